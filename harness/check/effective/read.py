"""Reading the configuration a live deployment's engine built: from the API server (vLLM's
dev-mode ``/server_info``) and from every worker (the stage probe's ``ppconf_effective_config``),
once per deployment; then each case's features judged against it (``harness.check.effective.judge``)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.check.effective.judge import disabled, flatten, worker_differences
from harness.check.serving.client import Client
from harness.check.serving.live import LiveDeployment
from harness.matrix.effective import Requirement
from harness.results.result import EffectiveConfig, Observation

EFFECTIVE_METHOD = "ppconf_effective_config"


def read(live: LiveDeployment) -> EffectiveConfig:
    """What the API server and each worker report; a process that does not answer is named in
    ``unavailable`` with the reason. A P/D pair's instances each answer for themselves (the proxy
    in front has no engine), in ``instances``."""
    if live.instances:
        return EffectiveConfig(instances={role: _read(client) for role, client in live.instances.items()})
    if live.proxied and len(live.ranks) > 1:
        return _read_dp_ranks(live.ranks)
    return _read(live.client)


def _read_dp_ranks(ranks: list[Client]) -> EffectiveConfig:
    """External DP behind a proxy: DP rank 0's API server, and every rank's workers (keyed
    ``"RANK (DP rank I)"``), each judged against rank 0's API server, so a rank whose engine
    turned a feature off is seen though the proxy would have asked one rank only."""
    eff = _read(ranks[0], tag=" (DP rank 0)")
    for i, client in enumerate(ranks[1:], start=1):
        other = _read(client, tag=f" (DP rank {i})", api=eff.api)
        eff.workers.update(other.workers)
        eff.unavailable += [f"DP rank {i}'s {why}" for why in other.unavailable if not why.startswith("api server")]
    return eff


def _read(client: Client, tag: str = "", api: dict[str, object] | None = None) -> EffectiveConfig:
    """One server's configuration; with ``api`` (another server's), only its workers are read."""
    eff = EffectiveConfig()
    if api is not None:
        eff.api = dict(api)
        return _read_workers(client, eff, tag)
    try:
        eff.api = flatten(client.server_config())
    except Exception as err:  # noqa: BLE001 — a server without the dev endpoint: evidence of its absence
        eff.unavailable.append(f"api server: /server_info ({type(err).__name__}: {err})")
    return _read_workers(client, eff, tag)


def _read_workers(client: Client, eff: EffectiveConfig, tag: str) -> EffectiveConfig:
    try:
        answers = client.collective_rpc(EFFECTIVE_METHOD)
    except Exception as err:  # noqa: BLE001 — no stage probe on the workers
        eff.unavailable.append(f"workers: {EFFECTIVE_METHOD} ({type(err).__name__}: {err})")
        return eff
    for answer in sorted(answers, key=lambda a: a["rank"]):
        eff.workers[f"{answer['rank']}{tag}"] = worker_differences(eff.api, answer["fields"])
    return eff


def judge_case(
    obs: Observation, eff: EffectiveConfig | None, needs: Iterable[tuple[str, Requirement, str | None]]
) -> None:
    """The deployment's configuration onto one case's observation, with the case's features
    judged against it (``needs``: each feature with a field it needs and the P/D side that runs
    it, None without P/D), each side on its own instance's configuration; where no process of an
    instance answered, a note says its features' fields went unjudged."""
    if eff is None:
        return
    by_instance: dict[str | None, dict[str, list[Requirement]]] = {}
    for feature, req, role in needs:
        by_instance.setdefault(role, {}).setdefault(feature, []).append(req)
    found = []
    for role, by_feature in by_instance.items():
        own = eff.instances.get(role, EffectiveConfig()) if role is not None else eff
        found += [d.model_copy(update={"instance": role or ""}) for d in disabled(by_feature, own)]
        if not own.api and not own.workers:
            on = f" on the {role} instance" if role else ""
            obs.notes.append(
                f"effective configuration unavailable{on} ({'; '.join(own.unavailable) or 'not read'}): "
                f"the fields of {', '.join(by_feature)} were not judged"
            )
    obs.effective = eff.model_copy(update={"disabled": found}, deep=True)

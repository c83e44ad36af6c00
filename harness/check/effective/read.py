"""Reading the configuration a live deployment's engine built: from the API server (vLLM's
dev-mode ``/server_info``) and from every worker (the stage probe's ``ppconf_effective_config``),
then judging the cases' features against it (``harness.check.effective.judge``)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.check.effective.judge import disabled, flatten, worker_differences
from harness.check.serving.live import LiveDeployment
from harness.matrix.load import Matrix
from harness.results.result import EffectiveConfig, Observation

EFFECTIVE_METHOD = "ppconf_effective_config"


def read(live: LiveDeployment) -> EffectiveConfig:
    """What the API server and each worker report; a process that does not answer is named in
    ``unavailable`` with the reason."""
    eff = EffectiveConfig()
    try:
        eff.api = flatten(live.client.server_config())
    except Exception as err:  # noqa: BLE001 — a server without the dev endpoint: evidence of its absence
        eff.unavailable.append(f"api server: /server_info ({type(err).__name__}: {err})")
    try:
        answers = live.client.collective_rpc(EFFECTIVE_METHOD)
    except Exception as err:  # noqa: BLE001 — no stage probe on the workers
        eff.unavailable.append(f"workers: {EFFECTIVE_METHOD} ({type(err).__name__}: {err})")
        return eff
    for answer in sorted(answers, key=lambda a: a["rank"]):
        eff.workers[str(answer["rank"])] = worker_differences(eff.api, answer["fields"])
    return eff


def observe(live: LiveDeployment, m: Matrix, features: Iterable[str], obs: Observation) -> None:
    """Read the engine's configuration onto ``obs`` and judge ``features`` (the cases' of this
    deployment: they share its launches) against it; where nothing answered, a note says the
    features' fields went unjudged."""
    eff = read(live)
    needs = {f: m.features[f].requirements() for f in sorted(set(features)) if m.features[f].effective}
    eff.disabled = disabled(needs, eff)
    obs.effective = eff
    if needs and not eff.api and not eff.workers:
        obs.notes.append(
            f"effective configuration unavailable ({'; '.join(eff.unavailable)}): the fields of "
            f"{', '.join(needs)} were not judged"
        )

"""Reading the configuration a live deployment's engine built: from the API server (vLLM's
dev-mode ``/server_info``) and from every worker (the stage probe's ``ppconf_effective_config``),
once per deployment; then each case's features judged against it (``harness.check.effective.judge``)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.check.effective.judge import disabled, flatten, worker_differences
from harness.check.serving.live import LiveDeployment
from harness.matrix.effective import Requirement
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


def judge_case(obs: Observation, eff: EffectiveConfig | None, needs: Iterable[tuple[str, Requirement]]) -> None:
    """The deployment's configuration onto one case's observation, with the case's features
    judged against it (``needs``: each feature with a field it needs); where no process
    answered, a note says the features' fields went unjudged."""
    if eff is None:
        return
    by_feature: dict[str, list[Requirement]] = {}
    for feature, req in needs:
        by_feature.setdefault(feature, []).append(req)
    obs.effective = eff.model_copy(update={"disabled": disabled(by_feature, eff)}, deep=True)
    if by_feature and not eff.api and not eff.workers:
        obs.notes.append(
            f"effective configuration unavailable ({'; '.join(eff.unavailable)}): the fields of "
            f"{', '.join(by_feature)} were not judged"
        )

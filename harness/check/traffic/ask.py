"""Everything a reference (or a golden being recorded) is asked: the sequential requests, then
each workload phase, with the same requests the case was sent."""

from __future__ import annotations

from harness.cases.workload import PhasePlan, kind_of
from harness.check.serving.live import LiveDeployment
from harness.check.traffic.compare import Outputs, collect
from harness.check.traffic.phases import run_phase
from harness.matrix.schema import Accuracy, Compare


def ask(
    live: LiveDeployment,
    accuracy: Accuracy,
    compare: Compare,
    pooling: str,
    plans: list[PhasePlan],
    id_prompts: list[list[int]] | None = None,
) -> Outputs:
    """The sequential requests (``id_prompts``: the case's tokenisation, where it has one), then
    the phases in order; a pooling runner answers no completions, so it gets only the phases its
    kind says it can answer (explicit requests)."""
    out = collect(live, accuracy, compare, pooling, id_prompts)
    for plan in plans:
        if not pooling or kind_of(plan).pooling:
            out.phases[plan.name] = run_phase(live, plan, compare)
    return out

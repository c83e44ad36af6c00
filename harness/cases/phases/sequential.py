"""``sequential``: the suite's accuracy requests, one after another (``harness.check.traffic.ask``)."""

from __future__ import annotations

from harness.cases.phases.kind import PhaseKind, PhasePlan
from harness.matrix.schema import Phase


class SequentialPhase(PhaseKind):
    planned = False

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        raise ValueError("the sequential phase sends the suite's accuracy requests")


KIND = SequentialPhase()

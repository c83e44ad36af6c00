"""A phase kind a test adds: ``burst``, prompts of one length sent twice over, streamed, and shown
exercised only when the engine had them all running at once."""

from __future__ import annotations

import random

from harness.cases.phases.kind import PhaseKind, PhasePlan, Request, Sender, ids
from harness.matrix.schema import Phase


class BurstPhase(PhaseKind):
    defaults = (5, 16, 4)
    streamed = True

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        reqs = tuple(Request(f"{phase.label}:{i}", ids(rng, s.prompt_tokens), s.max_tokens) for i in range(s.requests))
        return PhasePlan(phase, reqs + reqs, in_flight=2 * s.requests)

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.stream(plan.requests)

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        peak = metrics.get("peak_running", 0.0)
        return None if peak >= plan.in_flight else f"peak of {peak:g} running, {plan.in_flight} sent"


KIND = BurstPhase()

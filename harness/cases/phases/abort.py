"""``abort``: streams closed by the client mid-way, then a fresh request that must still be answered."""

from __future__ import annotations

import random

from harness.cases.phases.kind import PhaseKind, PhasePlan, Request, Sender, ids
from harness.matrix.schema import Phase


class AbortPhase(PhaseKind):
    defaults = (None, 32, 64)

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        reqs = tuple(Request(f"{phase.label}:{i}", ids(rng, s.prompt_tokens), s.max_tokens) for i in range(s.requests))
        fresh = Request(f"{phase.label}:fresh", ids(rng, s.prompt_tokens), min(s.max_tokens, 16))
        return PhasePlan(phase, reqs, after=(fresh,), in_flight=s.requests)

    def compared(self, plan: PhasePlan) -> tuple[Request, ...]:
        """The aborted streams' answers are cut short: only the others are compared."""
        return plan.warmup + plan.after

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.complete(plan.warmup)
        sender.abort(plan.requests)
        sender.complete(plan.after)


KIND = AbortPhase()

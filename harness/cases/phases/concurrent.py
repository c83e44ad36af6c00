"""``concurrent``: requests of mixed lengths streamed at once, at least 2 x PP in flight so every
stage has a batch of its own while the others work; it measures throughput and latency."""

from __future__ import annotations

import random

from harness.cases.phases.kind import PhaseKind, PhasePlan, Request, Sender, ids
from harness.matrix.schema import Phase


def batched_steps(metrics: dict[str, float]) -> bool | None:
    """Whether some engine step sampled several sequences at once: more tokens were generated
    than there were steps, with no speculative decoding (which gives one sequence several tokens
    a step). None where the counters do not tell. False is no proof of the contrary: a step that
    only prefills a chunk of a long prompt samples nothing and counts as a step too, so a step
    that sampled two can hide among them (a real run of tests/shrink_planted.py: 40 tokens in 40
    steps, and a fault that fires only in such a step fired)."""
    steps, generated = metrics.get("steps"), metrics.get("generation_tokens")
    if not steps or generated is None or (metrics.get("spec_draft_tokens") or 0) > 0:
        return None
    return generated > steps


class ConcurrentPhase(PhaseKind):
    defaults = (None, 96, 32)
    streamed = True

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        length, out = s.prompt_tokens, s.max_tokens
        # mixed lengths: prompts from a quarter to all of `prompt_tokens`, outputs likewise
        reqs = tuple(
            Request(
                f"{phase.label}:{i}", ids(rng, max(1, length * (i % 4 + 1) // 4)), max(1, out * ((i + 2) % 4 + 1) // 4)
            )
            for i in range(s.requests)
        )
        return PhasePlan(phase, reqs, in_flight=s.requests)

    def longest(self, phase: Phase, pp: int) -> int:
        s = self.sizes(phase, pp)
        length, out = s.prompt_tokens, s.max_tokens
        return max(
            max(1, length * (i % 4 + 1) // 4) + max(1, out * ((i + 2) % 4 + 1) // 4) for i in range(min(4, s.requests))
        )

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.complete(plan.warmup)
        sender.stream(plan.requests)

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        m = metrics
        if plan.in_flight < 2:  # one request is a sweep's baseline
            return None
        # the engine's own account: its running gauge as polled, or more tokens generated than
        # engine steps (a poll may fall between the steps of a short phase). When the client read
        # its streams is no evidence: buffered streams served one after another read as overlapping.
        if m.get("peak_running", 0.0) < 2 and not batched_steps(m):
            return (
                f"no sign of two requests running at once (engine gauge peak {m.get('peak_running', 0.0):g}, "
                f"{m.get('generation_tokens', 0.0):g} tokens generated in {m.get('steps', 0.0):g} engine steps, "
                f"of {plan.in_flight} sent)"
            )
        return None


KIND = ConcurrentPhase()

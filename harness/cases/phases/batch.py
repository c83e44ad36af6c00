"""``batch``: prompts of growing length in one completions request, sent greedy and then seeded;
every prompt must run to max_tokens, and the usage must count what was sent and asked."""

from __future__ import annotations

import random

from harness.cases.phases.kind import Answers, PhaseKind, PhasePlan, Request, Sender, ids
from harness.matrix.schema import Phase


def seeded(label: str) -> str:
    """The label of a prompt's answer in the seeded request."""
    return label.replace(":", "-seeded:", 1)


class BatchPhase(PhaseKind):
    defaults = (3, 12, 12)

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        n, length = s.requests, s.prompt_tokens
        reqs = tuple(
            Request(f"{phase.label}:{i}", ids(rng, max(1, length * (i + 1) // n)), s.max_tokens) for i in range(n)
        )
        return PhasePlan(phase, reqs, in_flight=n)

    def labels(self, plan: PhasePlan) -> list[str]:
        return [r.label for r in plan.compared()] + [seeded(r.label) for r in plan.requests]

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.batch(plan.requests)

    def problems(self, plan: PhasePlan, got: Answers, ref: Answers) -> list[str]:
        out = []
        greedy = [c for c in got.completions if "-seeded:" not in c.label]
        reasons = sorted({c.finish_reason or "none" for c in got.completions})
        if reasons != ["length"]:
            out.append(f"finish_reason {', '.join(reasons)} where every prompt ran to max_tokens (length)")
        want_prompt = sum(len(r.prompt) for r in plan.requests)
        want_out = sum(r.max_tokens for r in plan.requests)
        usage = got.usage
        if usage.get("prompt_tokens") != want_prompt or usage.get("completion_tokens") != want_out:
            out.append(
                f"usage {usage.get('prompt_tokens')} prompt / {usage.get('completion_tokens')} completion tokens, "
                f"sent {want_prompt} / asked {want_out}"
            )
        if len(greedy) != len(plan.requests):
            out.append(f"{len(greedy)} answers to {len(plan.requests)} prompts")
        if got.models != ref.models:
            out.append(f"/v1/models answers {got.models}, the reference {ref.models} (id and root)")
        return out


KIND = BatchPhase()

"""``long-prompt``: a few long prompts at once, whose prefill the engine must chunk."""

from __future__ import annotations

from harness.cases.phases.kind import PhaseKind
from harness.matrix.schema import Phase


class LongPromptPhase(PhaseKind):
    defaults = (2, 200, 8)

    def lint(self, phase: Phase, batched_tokens: int | None) -> list[str]:
        tokens = phase.prompt_tokens or self.defaults[1]
        if batched_tokens is not None and tokens <= batched_tokens:
            return [
                f"its prompts of {tokens} tokens fit in one engine step of the case's "
                f"--max-num-batched-tokens {batched_tokens}: their prefill is not chunked (send longer prompts)"
            ]
        return []


KIND = LongPromptPhase()

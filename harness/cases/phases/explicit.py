"""``explicit``: the phase's own requests (``harness.matrix.requests``), each to its endpoint, in
the order written, one after another (a control request such as resetting the prefix cache falls
between the requests around it). Each answer is compared with the reference's by its endpoint's
rule (``harness.check.requests``)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.cases.phases.kind import PhaseKind, PhasePlan, Request, Sender
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Phase


def _ids(r: ExplicitRequest) -> list[int]:
    prompt = getattr(r, "prompt", None)
    return prompt if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) else []


def longest_explicit(requests: Iterable[ExplicitRequest]) -> int:
    """Token-id prompt plus output tokens of the longest request (a text prompt has no length
    before it is tokenised)."""
    return max((len(_ids(r)) + r.tokens() for r in requests), default=0)


def unrepeatable(requests: Iterable[ExplicitRequest]) -> list[str]:
    """Why requests sampled without a seed cannot be compared with a reference's answers."""
    out = []
    for i, r in enumerate(requests):
        if getattr(r, "sampled", False) and getattr(r, "seed", None) is None:
            temperature = getattr(r, "temperature", None)
            set_to = "unset (the server samples at 1)" if temperature is None else f"{temperature:g}"
            out.append(
                f"request {r.name or i} ({r.endpoint}): temperature {set_to} with no seed: its tokens are "
                "not repeatable, so no reference can be compared with them (give temperature 0 or a seed)"
            )
    return out


class ExplicitPhase(PhaseKind):
    explicit = True
    pooling = True

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        given = phase.explicit or ()
        named = tuple(r if r.name else r.model_copy(update={"name": f"{phase.label}:{i}"}) for i, r in enumerate(given))
        return PhasePlan(phase, (), explicit=named)

    def longest(self, phase: Phase, pp: int) -> int:
        return longest_explicit(phase.explicit or ())

    def token_ids(self, phase: Phase, pp: int) -> int:
        return sum(len(_ids(r)) for r in phase.explicit or ())

    def compared(self, plan: PhasePlan) -> tuple[Request, ...]:
        return ()

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.explicit(plan.explicit)

    def lint(self, phase: Phase, batched_tokens: int | None) -> list[str]:
        out = [] if phase.explicit else ["an explicit phase names its requests in `explicit`"]
        sized = [f for f in ("requests", "prompt_tokens", "max_tokens") if getattr(phase, f) is not None]
        if sized:
            out.append(f"{', '.join(sized)}: sizes of generated requests; an explicit phase's requests say their own")
        named = self.plan(phase, 1).explicit
        names = [r.name or "" for r in named]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            out.append(f"request names must be unique in a phase: {', '.join(twice)}")
        return out + unrepeatable(named)


KIND = ExplicitPhase()

"""``explicit-concurrent``: the phase's own requests (as ``explicit`` names them), all sent at
once; each answer compared with the reference's by its endpoint's rule. Requests naming other
served models (LoRA adapters, the base model) then share engine steps: the engine's metrics must
show two requests running at once, else the phase is not exercised."""

from __future__ import annotations

from harness.cases.phases.concurrent import batched_steps
from harness.cases.phases.explicit import ExplicitPhase
from harness.cases.phases.kind import PhasePlan, Sender
from harness.matrix.schema import Phase

# requests that act on the server rather than ask it: their place between others is their meaning
CONTROL = frozenset({"reset-prefix-cache", "load-lora-adapter", "unload-lora-adapter", "sleep", "wake-up"})


class ExplicitConcurrentPhase(ExplicitPhase):
    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        named = super().plan(phase, pp)
        return PhasePlan(phase, (), in_flight=len(named.explicit), explicit=named.explicit)

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.explicit_at_once(plan.explicit)

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        if plan.in_flight < 2 or metrics.get("peak_running", 0.0) >= 2 or batched_steps(metrics):
            return None
        return (
            f"no sign of two requests running at once (engine gauge peak {metrics.get('peak_running', 0.0):g}, "
            f"{metrics.get('generation_tokens', 0.0):g} tokens generated in {metrics.get('steps', 0.0):g} "
            f"engine steps, of {plan.in_flight} sent)"
        )

    def lint(self, phase: Phase, batched_tokens: int | None) -> list[str]:
        control = [r.name or r.endpoint for r in phase.explicit or () if r.endpoint in CONTROL]
        out = super().lint(phase, batched_tokens)
        if control:
            out.append(
                f"{', '.join(control)}: sent at once, a request has no place between others; "
                "control requests go in an explicit phase"
            )
        return out


KIND = ExplicitConcurrentPhase()

"""``pressure``: more and longer requests at once than the KV cache holds: some must be preempted."""

from __future__ import annotations

from harness.cases.phases.kind import PhaseKind, PhasePlan


class PressurePhase(PhaseKind):
    defaults = (8, 192, 48)

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        if "preemptions" not in metrics:
            return "the server exports no num_preemptions: KV-cache pressure cannot be shown"
        if metrics["preemptions"] <= 0:
            return (
                "no request was preempted: the KV cache held all of them (shrink it for this case, "
                "e.g. --num-gpu-blocks-override, or send more or longer requests)"
            )
        return None


KIND = PressurePhase()

"""``open-loop``: requests arrive on their own clock, not when the previous ones are answered: at
``rate_per_s`` on average, with exponential gaps drawn from the phase's seed (a Poisson process),
for ``duration_s`` or until ``requests`` have arrived. Each arrival is a generated token-id
completion of mixed length, or, where the phase names ``explicit`` requests, one of them drawn
from the same seed (a mix of kinds). The case and its reference get the same arrivals.

What load that lasts shows only afterwards is asked afterwards: the engine idle again within
``idle_within_s`` (nothing running or waiting, its KV cache usage back to its level before the
phase within ``max_kv_usage_growth``), and, where bounded, no PP stage's memory grown past
``max_memory_growth``. The gauges and each stage's memory are sampled over the phase and kept
(``series``), so a leak shows as a line that does not come back."""

from __future__ import annotations

import random
from typing import Any

from harness.cases.phases.explicit import longest_explicit, unrepeatable
from harness.cases.phases.kind import Answers, PhaseKind, PhasePlan, Request, Sender, ids
from harness.matrix.schema import MAX_REQUESTS, Phase

DEFAULT_REQUESTS = 16  # arrivals of a phase that names neither a duration nor a count


def _lengths(i: int, prompt_tokens: int, max_tokens: int) -> tuple[int, int]:
    """The i-th generated request's prompt and output lengths: mixed, from a quarter to all of each."""
    return max(1, prompt_tokens * (i % 4 + 1) // 4), max(1, max_tokens * ((i + 2) % 4 + 1) // 4)


def arrivals(phase: Phase) -> list[float]:
    """Seconds from the phase's start at which each request arrives."""
    rng = random.Random(f"{phase.seed}:{phase.label}:arrivals")
    rate = phase.rate_per_s or 1.0
    count = phase.requests if phase.requests is not None or phase.duration_s is not None else DEFAULT_REQUESTS
    out: list[float] = []
    t = 0.0
    while len(out) < (count or MAX_REQUESTS):
        t += rng.expovariate(rate)
        if phase.duration_s is not None and t > phase.duration_s:
            break
        out.append(round(t, 4))
    return out


class OpenLoopPhase(PhaseKind):
    defaults = (None, 48, 16)
    explicit = True
    arrivals = True

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        times = arrivals(phase)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        s = self.sizes(phase, pp)
        label = phase.label
        if phase.explicit:
            mix = phase.explicit
            picks = [rng.randrange(len(mix)) for _ in times]
            named = tuple(
                mix[k].model_copy(update={"name": f"{label}:{i}:{mix[k].name or mix[k].endpoint}"})
                for i, k in enumerate(picks)
            )
            return PhasePlan(phase, (), explicit=named, extra={"arrivals": times})
        reqs = tuple(
            Request(f"{label}:{i}", ids(rng, prompt), out)
            for i in range(len(times))
            for prompt, out in [_lengths(i, s.prompt_tokens, s.max_tokens)]
        )
        return PhasePlan(phase, reqs, extra={"arrivals": times})

    def longest(self, phase: Phase, pp: int) -> int:
        if phase.explicit:
            return longest_explicit(phase.explicit)
        s = self.sizes(phase, pp)
        n = len(arrivals(phase))
        return max((sum(_lengths(i, s.prompt_tokens, s.max_tokens)) for i in range(min(4, n))), default=0)

    def token_ids(self, phase: Phase, pp: int) -> int:
        if phase.explicit:
            return 0  # the mix's requests, drawn again: no ids are generated
        s = self.sizes(phase, pp)
        return len(arrivals(phase)) * s.prompt_tokens

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.open_loop(plan)

    def problems(self, plan: PhasePlan, got: Answers, ref: Answers) -> list[str]:
        return idle_problems(plan.phase, got.metrics, got.series)

    def lint(self, phase: Phase, batched_tokens: int | None) -> list[str]:
        out = []
        if phase.rate_per_s is None:
            out.append("an open-loop phase needs rate_per_s (requests per second, on average)")
        if phase.duration_s is None and phase.requests is None:
            out.append("an open-loop phase needs duration_s or requests (how long, or how many arrive)")
        if phase.explicit:
            out += unrepeatable(phase.explicit)
        return out


def idle_problems(phase: Phase, metrics: dict[str, float], series: dict[str, Any]) -> list[str]:
    """What the engine's state after an open-loop phase shows wrong (``metrics``: the idle wait's
    readings; ``series``: the samples over the phase, by name, as [seconds, value] pairs)."""
    out = []
    start, end = metrics.get("kv_usage_start"), metrics.get("kv_usage_end")
    if start is None or end is None:
        out.append("KV cache usage not measured (the engine exports no kv_cache_usage_perc)")
    if "idle_after_s" not in metrics:
        kv = (
            f", KV cache usage {end:.3f} (before the phase {start:.3f})"
            if start is not None and end is not None
            else ""
        )
        out.append(
            f"the engine did not return to idle within {phase.idle_within_s:g} s after the phase: "
            f"{metrics.get('running_end', float('nan')):g} running, {metrics.get('waiting_end', float('nan')):g} "
            f"waiting{kv}"
        )
    if phase.max_memory_growth is not None:
        stages = {k: v for k, v in series.items() if k.startswith("stage") and k.endswith("_memory_bytes")}
        if not stages:
            out.append("stage memory not measured (no stage probe answered): max_memory_growth cannot be judged")
        for name, points in sorted(stages.items()):
            first, last = points[0][1], points[-1][1]
            grew = (last - first) / first if first > 0 else 0.0
            if grew > phase.max_memory_growth:
                out.append(
                    f"{name.removesuffix('_memory_bytes')} memory grew {100 * grew:.1f}% over the phase "
                    f"({first / 2**20:.0f} MiB to {last / 2**20:.0f} MiB), more than {100 * phase.max_memory_growth:g}%"
                )
    return out


KIND = OpenLoopPhase()

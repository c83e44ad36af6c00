"""How even a PP deployment's stages are, from each stage's own account (weights, KV-cache blocks,
peak memory, mean forward time), and whether that keeps within the claim's bounds."""

from __future__ import annotations

from harness.results.result import Stages, WorkerStage


def per_stage(stages: Stages) -> list[dict[str, float | int | None]]:
    """One row per PP stage: its workers' largest weights, KV blocks, peak memory and step time
    (a stage is as costly as its costliest TP rank)."""
    by: dict[int, list[WorkerStage]] = {}
    for w in stages.workers:
        by.setdefault(w.pp_rank, []).append(w)

    def most(values: list[float | int | None]) -> float | int | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return [
        {
            "stage": i,
            "weights_bytes": most([w.weights_bytes for w in ws]),
            "kv_blocks": most([w.kv_blocks for w in ws]),
            "peak_memory_bytes": most([w.peak_memory_bytes for w in ws]),
            "step_ms": most([w.step_ms for w in ws]),
        }
        for i, ws in sorted(by.items())
    ]


def _ratio(values: list[float | int | None], pick: float | int | None) -> float | None:
    known = [float(v) for v in values if v is not None]
    if pick is None or len(known) < 2 or sum(known) <= 0:
        return None
    return float(pick) / (sum(known) / len(known))


def problems(stages: Stages) -> list[str]:
    """The claim's stage bounds the deployment broke, each with its numbers."""
    rows = per_stage(stages)
    out = []
    bound = stages.max_last_stage_memory_ratio
    if bound is not None and rows:
        peaks = [r["peak_memory_bytes"] for r in rows]
        ratio = _ratio(peaks, rows[-1]["peak_memory_bytes"])
        if ratio is None:
            out.append("the stages' peak memory was not reported: the last stage's bound cannot be checked")
        elif ratio > bound:
            out.append(f"the last stage's peak memory is {ratio:.2f} x the stages' mean, above {bound:g}")
    bound = stages.max_step_time_ratio
    if bound is not None and rows:
        steps = [r["step_ms"] for r in rows]
        known = [s for s in steps if s is not None]
        ratio = _ratio(steps, max(known) if known else None)
        if ratio is None:
            out.append("the stages' forward times were not measured: the step-time bound cannot be checked")
        elif ratio > bound:
            out.append(f"the slowest stage's mean forward time is {ratio:.2f} x the stages' mean, above {bound:g}")
    return out

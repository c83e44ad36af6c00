"""Whether a streamed phase's inter-token latency was measured at all.

A client measures the time between a request's tokens from when its stream events arrive. When
events pile up before the client reads them (several read at once from the socket, or the
server putting several tokens in one event), the gaps it sees are its own parsing time, not the
engine's: microseconds on an engine that needs milliseconds per step. A token that arrived in
the same event as the one before it, or within a small fraction of the engine's own time per
token (its inter-token latency histogram over the phase; else the phase's time over its engine
steps), is coalesced; when more than ``COALESCED_MAX`` of the tokens are, the phase's ITL figures
are "not measured", with the reason, instead of printed as latencies.
"""

from __future__ import annotations

from harness.check.serving.client import Timing

# a gap below this fraction of the engine's own time per token cannot be an inter-token latency
FLOOR_FRACTION = 0.1
# the floor where the engine's metrics give no time per token (no engine steps a token this fast)
FALLBACK_FLOOR_S = 0.0005
# coalesced tokens, as a fraction of a phase's gaps, past which its ITL is not a measurement
COALESCED_MAX = 0.1
# the figures that measure the time between tokens
ITL_FIGURES = ("itl_p50_s", "itl_p99_s")


def engine_token_s(metrics: dict[str, float], wall_s: float) -> tuple[float | None, str]:
    """The engine's own time per output token over a phase, and how it was read."""
    itl_sum, itl_count = metrics.get("engine_itl_sum_s"), metrics.get("engine_itl_count")
    if itl_sum and itl_count:
        return itl_sum / itl_count, "the engine's mean inter-token latency"
    steps = metrics.get("steps")
    if steps and wall_s > 0:
        return wall_s / steps, "the phase's time over its engine steps"
    return None, ""


def coalesced(timing: Timing, floor_s: float) -> tuple[int, int]:
    """(tokens that arrived with the one before them, gaps between tokens) of one stream: a token
    after the first of its event, or the first of an event that arrived within ``floor_s`` of
    the event before it."""
    tokens = sum(n for _, n in timing.chunks)
    together = 0
    previous: float | None = None
    for at, n in timing.chunks:
        together += n - 1 if n else 0
        if previous is not None and n and at - previous < floor_s:
            together += 1
        previous = at
    return together, max(0, tokens - 1)


def unmeasured_itl(timings: list[Timing], metrics: dict[str, float], wall_s: float) -> str | None:
    """Why a phase's inter-token latency is not a measurement (None when it is)."""
    per_token, source = engine_token_s(metrics, wall_s)
    floor = FLOOR_FRACTION * per_token if per_token else FALLBACK_FLOOR_S
    counts = [coalesced(t, floor) for t in timings]
    together, gaps = sum(c for c, _ in counts), sum(g for _, g in counts)
    if not gaps or together <= COALESCED_MAX * gaps:
        return None
    engine = f"; {source} {per_token * 1e3:.3g} ms" if per_token else ""
    return (
        f"stream chunks coalesced: {together} of {gaps} tokens arrived in the same event as the previous one "
        f"or within {floor * 1e3:.3g} ms of it{engine}"
    )

"""Whether a streamed phase's inter-token latency was measured at all.

A client measures the time between a request's tokens from when its stream events arrive. When
events pile up before the client reads them (several read at once from the socket, or the server
putting several tokens in one event), the gaps it sees are its own parsing time, not the
engine's: microseconds on an engine that needs milliseconds per step. A token is coalesced with
the one before it when it came in the same event, when its event was already read as the client
asked for it (it waited less than ``SAME_READ_S`` on the socket), or when its event arrived within
a small fraction of the engine's own time per token (its inter-token latency histogram over the
phase; else the phase's time over its engine steps). When more than ``COALESCED_MAX`` of a phase's
tokens are, its ITL figures are "not measured", with the reason, instead of printed as latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.check.serving.client import Timing

# an event the client waited less than this for was already read, with the one before it
SAME_READ_S = 0.0001
# a gap below this fraction of the engine's own time per token cannot be an inter-token latency
FLOOR_FRACTION = 0.1
# the floor where the engine's metrics give no time per token (no engine steps a token this fast)
FALLBACK_FLOOR_S = 0.0005
# coalesced tokens, as a fraction of a phase's gaps, past which its ITL is not a measurement
COALESCED_MAX = 0.1
# the figures that measure the time between tokens
ITL_FIGURES = ("itl_p50_s", "itl_p99_s")


@dataclass(frozen=True)
class Coalescing:
    """Of a stream's gaps between tokens, those whose later token came with the earlier one."""

    gaps: int = 0
    same_event: int = 0  # after the first token of its event
    same_read: int = 0  # its event already read when the client asked for it
    too_close: int = 0  # its event within the floor of the one before

    @property
    def together(self) -> int:
        return self.same_event + self.same_read + self.too_close

    def __add__(self, other: Coalescing) -> Coalescing:
        return Coalescing(
            self.gaps + other.gaps,
            self.same_event + other.same_event,
            self.same_read + other.same_read,
            self.too_close + other.too_close,
        )


def engine_token_s(metrics: dict[str, float], wall_s: float) -> tuple[float | None, str]:
    """The engine's own time per output token over a phase, and how it was read."""
    itl_sum, itl_count = metrics.get("engine_itl_sum_s"), metrics.get("engine_itl_count")
    if itl_sum and itl_count:
        return itl_sum / itl_count, "the engine's mean inter-token latency"
    steps = metrics.get("steps")
    if steps and wall_s > 0:
        return wall_s / steps, "the phase's time over its engine steps"
    return None, ""


def coalesced(timing: Timing, floor_s: float) -> Coalescing:
    """How the tokens of one stream reached the client (a token counted once, first reason first)."""
    same_event = same_read = too_close = tokens = 0
    previous: float | None = None
    for at, n, waited in timing.chunks:
        tokens += n
        same_event += max(0, n - 1)
        if previous is not None and n:
            if waited < SAME_READ_S:
                same_read += 1
            elif at - previous < floor_s:
                too_close += 1
        previous = at
    return Coalescing(max(0, tokens - 1), same_event, same_read, too_close)


def unmeasured_itl(timings: list[Timing], metrics: dict[str, float], wall_s: float) -> str | None:
    """Why a phase's inter-token latency is not a measurement (None when it is)."""
    per_token, source = engine_token_s(metrics, wall_s)
    floor = FLOOR_FRACTION * per_token if per_token else FALLBACK_FLOOR_S
    c = sum((coalesced(t, floor) for t in timings), Coalescing())
    if not c.gaps or c.together <= COALESCED_MAX * c.gaps:
        return None
    engine = f"; {source} {per_token * 1e3:.3g} ms" if per_token else ""
    return (
        f"stream chunks coalesced: {c.together} of {c.gaps} tokens arrived with the previous one "
        f"({c.same_event} in the same event, {c.same_read} in the same read, "
        f"{c.too_close} within {floor * 1e3:.3g} ms of it){engine}"
    )

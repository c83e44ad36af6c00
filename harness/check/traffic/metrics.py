"""The engine's own account of a phase: its Prometheus counters before and after, and its
gauges polled while the phase runs.

A phase proves it did what it names with these numbers (requests running at once, preemptions,
prefix-cache hits, speculative tokens accepted); they are read from the API server's `/metrics`,
which on a multi-node or P/D deployment speaks for the engine behind it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

# Counters whose change over a phase is recorded (vLLM's names without the `vllm:` prefix; a
# Prometheus counter is exported with a `_total` suffix, read either way).
COUNTERS = {
    "preemptions": "num_preemptions",
    "prefix_cache_queries": "prefix_cache_queries",
    "prefix_cache_hits": "prefix_cache_hits",
    "spec_draft_tokens": "spec_decode_num_draft_tokens",
    "spec_accepted_tokens": "spec_decode_num_accepted_tokens",
    "spec_drafts": "spec_decode_num_drafts",
    "prompt_tokens": "prompt_tokens",
    "generation_tokens": "generation_tokens",
    # engine steps that returned outputs (the count of vLLM's tokens-per-step histogram)
    "steps": "iteration_tokens_total_count",
    # the engine's own time between a request's tokens (its histogram's sum and count)
    "engine_itl_sum_s": "inter_token_latency_seconds_sum",
    "engine_itl_count": "inter_token_latency_seconds_count",
}
# Gauges whose peak over a phase is recorded.
GAUGES = {"running": "num_requests_running", "waiting": "num_requests_waiting"}


def parse(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text page summed over its label sets, by metric name without
    the `vllm:` prefix and without a counter's `_total` suffix."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            number = float(value)
        except ValueError:
            continue
        if not math.isfinite(number):
            continue
        name = name.removeprefix("vllm:").removesuffix("_total")
        out[name] = out.get(name, 0.0) + number
    return out


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The change of each counter over a phase; a counter the platform does not export is absent."""
    return {key: round(after[name] - before.get(name, 0.0), 6) for key, name in COUNTERS.items() if name in after}


def acceptance(metrics: dict[str, float]) -> float | None:
    """Accepted over drafted speculative tokens, or None where nothing was drafted."""
    drafted = metrics.get("spec_draft_tokens") or 0.0
    return metrics.get("spec_accepted_tokens", 0.0) / drafted if drafted > 0 else None


class GaugePoller:
    """Polls the gauges in a thread while a phase runs; ``peaks`` after ``stop``."""

    def __init__(self, read: Callable[[], str], interval_s: float = 0.05):
        self.read = read
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ppconf-metrics", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                values = parse(self.read())
            except Exception:  # noqa: BLE001 — a missed sample is not evidence of anything
                values = {}
            for key, name in GAUGES.items():
                if name in values:
                    self.peaks[key] = max(self.peaks.get(key, 0.0), values[name])
            self.samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> GaugePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# Gauges sampled over an open-loop phase, and read again until the engine is idle after it
# (vLLM's kv_cache_usage_perc is a fraction of the cache, 0 to 1).
SERIES = {"running": "num_requests_running", "waiting": "num_requests_waiting", "kv_usage": "kv_cache_usage_perc"}


class SeriesSampler:
    """Samples ``SERIES`` from ``read`` and, with ``stages``, each PP stage's memory (a list of
    the workers' ``{pp_rank, memory_bytes}``; a stage's value is its largest worker's), every
    ``interval_s`` in a thread; ``series`` maps each name to [seconds since start, value] pairs."""

    def __init__(
        self,
        read: Callable[[], str],
        stages: Callable[[], list[dict]] | None = None,
        interval_s: float = 0.5,
    ):
        self.read = read
        self.stages = stages
        self.interval_s = interval_s
        self.series: dict[str, list[list[float]]] = {}
        self.stage_error: str | None = None
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ppconf-series", daemon=True)

    def _add(self, name: str, t: float, value: float) -> None:
        self.series.setdefault(name, []).append([t, value])

    def sample(self) -> None:
        t = round(time.monotonic() - self._t0, 3)
        try:
            values = parse(self.read())
        except Exception:  # noqa: BLE001 — a missed sample is not evidence of anything
            values = {}
        for key, name in SERIES.items():
            if name in values:
                self._add(key, t, values[name])
        if self.stages is not None and self.stage_error is None:
            try:
                workers = self.stages()
            except Exception as err:  # noqa: BLE001 — no probe: the gauges alone are sampled
                self.stage_error = f"{type(err).__name__}: {err}"
                return
            per_stage: dict[int, float] = {}
            for w in workers:
                if w.get("memory_bytes") is not None:
                    k = int(w.get("pp_rank") or 0)
                    per_stage[k] = max(per_stage.get(k, 0.0), float(w["memory_bytes"]))
            for k, v in sorted(per_stage.items()):
                self._add(f"stage{k}_memory_bytes", t, v)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> SeriesSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def wait_idle(
    read: Callable[[], str], kv_start: float | None, bound: float, within_s: float, poll_s: float = 0.25
) -> dict[str, float]:
    """Polls ``read`` until nothing is running or waiting and the KV cache usage is back within
    ``bound`` of ``kv_start``, for at most ``within_s``: ``idle_after_s`` when it got there (absent
    when it did not), and the last readings (``running_end``, ``waiting_end``, ``kv_usage_end``)."""
    t0 = time.monotonic()
    out: dict[str, float] = {}
    while True:
        try:
            values = parse(read())
        except Exception:  # noqa: BLE001 — an unanswered poll is retried until the bound
            values = {}
        running, waiting = values.get(SERIES["running"]), values.get(SERIES["waiting"])
        kv = values.get(SERIES["kv_usage"])
        out = {
            k: v for k, v in (("running_end", running), ("waiting_end", waiting), ("kv_usage_end", kv)) if v is not None
        }
        kv_back = kv is None or kv_start is None or kv <= kv_start + bound
        if running == 0 and waiting == 0 and kv_back:
            return out | {"idle_after_s": round(time.monotonic() - t0, 3)}
        if time.monotonic() - t0 > within_s:
            return out
        time.sleep(poll_s)


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation, or None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def now() -> float:
    return time.monotonic()

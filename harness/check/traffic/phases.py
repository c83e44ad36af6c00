"""Sending one phase's requests to a live deployment, the way the phase names, and keeping what
the server answered, how fast, and what its own metrics say happened meanwhile."""

from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import dataclass, field
from typing import Any

from harness.cases.phases.batch import seeded as seeded_label
from harness.cases.phases.kind import ABORT_AFTER_CHUNKS, PhasePlan, Request
from harness.cases.workload import kind_of
from harness.check.serving.client import Client, Completion, Sampling, Timing
from harness.check.serving.live import LiveDeployment
from harness.check.traffic import latency, metrics
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare
from harness.registry import ENDPOINTS

# requests an open-loop phase keeps in flight at most: arrivals past it wait (late_max_s shows it)
OPEN_LOOP_IN_FLIGHT = 64


@dataclass
class PhaseOutputs:
    """What one side answered in one phase."""

    completions: list[Completion] = field(default_factory=list)
    # explicit requests: each answer as sent back (harness.check.requests.endpoint.answer_json)
    answers: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # counter deltas and gauge peaks
    # open-loop: the gauges and each stage's memory over the phase, [seconds, value] by name
    series: dict[str, list[list[float]]] = field(default_factory=dict)
    perf: dict[str, float | None] = field(default_factory=dict)  # streamed phases: tokens/s, TTFT, ITL
    wall_s: float = 0.0
    error: str | None = None  # a request failed, or the phase outlived its deadline
    usage: dict[str, int] = field(default_factory=dict)  # batch: the usage of the greedy request
    models: list[dict[str, Any]] = field(default_factory=list)  # batch: /v1/models as answered
    # perf_baseline.aisbench: AISBench's perf run after the phase (figures, file, argv, log; or error)
    aisbench: dict[str, Any] | None = None
    # a perf figure left out, and why: ITL from stream events the client read coalesced
    unmeasured: dict[str, str] = field(default_factory=dict)
    streams: list[Timing] = field(default_factory=list)  # streamed phases: when each event arrived

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "completions": [c.to_json() for c in self.completions],
                "metrics": self.metrics,
                "perf": self.perf,
                "wall_s": self.wall_s,
                "error": self.error,
                "usage": self.usage,
                "models": self.models,
            }
            | ({"aisbench": self.aisbench} if self.aisbench is not None else {})
            | ({"answers": self.answers} if self.answers else {})
            | ({"series": self.series} if self.series else {})
            | ({"unmeasured": self.unmeasured} if self.unmeasured else {})
            | ({"streams": [t.to_json() for t in self.streams]} if self.streams else {})
        )

    @staticmethod
    def from_json(d: dict[str, Any]) -> PhaseOutputs:
        return PhaseOutputs(
            [Completion.from_json(c) for c in d.get("completions") or []],
            list(d.get("answers") or []),
            dict(d.get("metrics") or {}),
            dict(d.get("series") or {}),
            dict(d.get("perf") or {}),
            float(d.get("wall_s") or 0.0),
            d.get("error"),
            dict(d.get("usage") or {}),
            list(d.get("models") or []),
            d.get("aisbench"),
            dict(d.get("unmeasured") or {}),
            [Timing.from_json(t) for t in d.get("streams") or []],
        )


def greedy(compare: Compare) -> Sampling:
    return Sampling(top_logprobs=compare.top_logprobs)


def _perf(timings: list[Timing], wall_s: float) -> dict[str, float | None]:
    tokens = sum(n for t in timings for _, n, _ in t.chunks)
    ttft = [x for t in timings if (x := t.ttft) is not None]
    itl = [x for t in timings for x in t.inter_token()]
    return {
        "output_tokens_per_s": round(tokens / wall_s, 3) if wall_s > 0 else None,
        "ttft_p50_s": metrics.percentile(ttft, 0.5),
        "ttft_p99_s": metrics.percentile(ttft, 0.99),
        "ttft_max_s": max(ttft) if ttft else None,
        "itl_p50_s": metrics.percentile(itl, 0.5),
        "itl_p99_s": metrics.percentile(itl, 0.99),
        "output_tokens": float(tokens),
    }


def _at_once(
    client: Client, model: str, reqs: tuple[Request, ...] | tuple[ExplicitRequest, ...], call: Any, deadline: float
) -> list[Any]:
    """``call(client, model, request)`` for every request at once; results in request order.
    Raises TimeoutError past ``deadline`` (monotonic), or the first request's error."""
    if not reqs:
        return []
    with cf.ThreadPoolExecutor(max_workers=len(reqs), thread_name_prefix="ppconf-phase") as pool:
        futures = [pool.submit(call, client, model, r) for r in reqs]
        done, pending = cf.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        if pending:
            for f in pending:
                f.cancel()
            raise TimeoutError(f"{len(pending)} of {len(reqs)} requests unanswered at the phase's deadline")
        return [f.result() for f in futures]


def _send_explicit(client: Client, model: str, req: ExplicitRequest) -> dict[str, Any]:
    return ENDPOINTS[req.endpoint].send(client, model, req)


def run_phase(live: LiveDeployment, plan: PhasePlan, compare: Compare) -> PhaseOutputs:
    """Send ``plan``'s requests to ``live``; a failure is recorded, never raised."""
    model = live.model_name or ""
    out = PhaseOutputs()
    sampling = greedy(compare)
    client = live.client.sibling(len(plan.requests) + len(plan.explicit) + 4)
    watcher = live.metrics_client.sibling(1)
    deadline = time.monotonic() + plan.phase.deadline_s
    before: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        before = metrics.parse(live.metrics_client.metrics())
        with metrics.GaugePoller(watcher.metrics, interval_s=0.02) as poller:
            try:
                kind_of(plan).send(plan, _Sender(client, model, compare, sampling, deadline, out, live))
            finally:
                out.wall_s = round(time.monotonic() - t0, 3)
        out.metrics |= metrics.deltas(before, metrics.parse(live.metrics_client.metrics()))
        out.metrics |= {f"peak_{k}": v for k, v in poller.peaks.items()}
        if out.streams and (why := latency.unmeasured_itl(out.streams, out.metrics, out.wall_s)):
            out.perf |= dict.fromkeys(latency.ITL_FIGURES)
            out.unmeasured |= dict.fromkeys(latency.ITL_FIGURES, why)
    except Exception as err:  # noqa: BLE001 — what failed is the phase's evidence
        out.error = f"{type(err).__name__}: {err}"
        out.wall_s = round(time.monotonic() - t0, 3)
    finally:
        client.close()
        watcher.close()
    return out


class _Sender:
    """Sends a phase's requests the ways its kind asks (``harness.cases.phases.kind.Sender``),
    keeping the answers in ``out``."""

    def __init__(
        self,
        client: Client,
        model: str,
        compare: Compare,
        sampling: Sampling,
        deadline: float,
        out: PhaseOutputs,
        live: LiveDeployment,
    ):
        self.live = live
        self.client = client
        self.model = model
        self.compare = compare
        self.sampling = sampling
        self.deadline = deadline
        self.out = out

    def _complete(self, c: Client, m: str, r: Request) -> Completion:
        return c.complete(m, list(r.prompt), r.max_tokens, self.sampling, r.label)

    def _stream(self, c: Client, m: str, r: Request) -> tuple[Completion, Timing]:
        return c.stream_timed(m, list(r.prompt), r.max_tokens, self.sampling, r.label)

    def _aborted(self, c: Client, m: str, r: Request) -> tuple[Completion, Timing]:
        return c.stream_timed(m, list(r.prompt), r.max_tokens, self.sampling, r.label, ABORT_AFTER_CHUNKS)

    def complete(self, requests: tuple[Request, ...]) -> None:
        self.out.completions += _at_once(self.client, self.model, requests, self._complete, self.deadline)

    def stream(self, requests: tuple[Request, ...]) -> None:
        t0 = time.monotonic()
        answered = _at_once(self.client, self.model, requests, self._stream, self.deadline)
        self.out.completions += [c for c, _ in answered]
        self.out.streams += [t for _, t in answered]
        self.out.perf = _perf([t for _, t in answered], time.monotonic() - t0)

    def abort(self, requests: tuple[Request, ...]) -> None:
        _at_once(self.client, self.model, requests, self._aborted, self.deadline)

    def explicit(self, requests: tuple[ExplicitRequest, ...]) -> None:
        for i, r in enumerate(requests):
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"{len(requests) - i} of {len(requests)} requests unsent at the phase's deadline")
            self.out.answers.append(ENDPOINTS[r.endpoint].send(self.client, self.model, r))

    def explicit_at_once(self, requests: tuple[ExplicitRequest, ...]) -> None:
        self.out.answers += _at_once(self.client, self.model, requests, _send_explicit, self.deadline)

    def _one(self, item: Request | ExplicitRequest) -> None:
        if isinstance(item, Request):
            self.out.completions.append(self._complete(self.client, self.model, item))
        else:
            self.out.answers.append(ENDPOINTS[item.endpoint].send(self.client, self.model, item))

    def open_loop(self, plan: PhasePlan) -> None:
        items: tuple[Request | ExplicitRequest, ...] = plan.explicit or plan.requests
        times: list[float] = plan.extra["arrivals"]
        phase = plan.phase
        watch = self.live.metrics_client.sibling(1)
        stages = self.live.stage_client.sibling(1)
        try:
            before = metrics.parse(watch.metrics())
            kv_start = before.get(metrics.SERIES["kv_usage"])
            sampler = metrics.SeriesSampler(watch.metrics, lambda: stages.collective_rpc("ppconf_stage_memory"))
            with sampler, cf.ThreadPoolExecutor(OPEN_LOOP_IN_FLIGHT, thread_name_prefix="ppconf-open-loop") as pool:
                t0 = time.monotonic()
                late = 0.0
                futures: list[cf.Future[None]] = []
                for at, item in zip(times, items, strict=True):
                    wait = t0 + at - time.monotonic()
                    if t0 + at > self.deadline:
                        raise TimeoutError(
                            f"{len(items) - len(futures)} of {len(items)} arrivals past the phase's deadline"
                        )
                    if wait > 0:
                        time.sleep(wait)
                    late = max(late, -wait)  # sent after its arrival time by this much
                    futures.append(pool.submit(self._one, item))
                done, pending = cf.wait(futures, timeout=max(0.0, self.deadline - time.monotonic()))
                if pending:
                    raise TimeoutError(f"{len(pending)} of {len(items)} requests unanswered at the phase's deadline")
                for f in futures:
                    f.result()
                self.out.metrics["drain_s"] = round(time.monotonic() - t0 - (times[-1] if times else 0.0), 3)
                self.out.metrics["late_max_s"] = round(late, 3)
                idle = metrics.wait_idle(watch.metrics, kv_start, phase.max_kv_usage_growth, phase.idle_within_s)
                sampler.sample()  # the state the idle wait ended on
            self.out.metrics |= idle | ({"kv_usage_start": kv_start} if kv_start is not None else {})
            self.out.series = sampler.series
            if sampler.stage_error:
                self.out.metrics["stage_memory_unsampled"] = 1.0
        finally:
            watch.close()
            stages.close()

    def batch(self, requests: tuple[Request, ...]) -> None:
        client, model, compare = self.client, self.model, self.compare
        prompts = [list(r.prompt) for r in requests]
        n = requests[0].max_tokens
        greedy_batch = client.complete_batch(model, prompts, n, self.sampling, [r.label for r in requests])
        seeded = Sampling(temperature=compare.temperature, seed=compare.seed, top_logprobs=compare.top_logprobs)
        seeded_batch = client.complete_batch(model, prompts, n, seeded, [seeded_label(r.label) for r in requests])
        self.out.completions = [*greedy_batch.completions, *seeded_batch.completions]
        self.out.usage = greedy_batch.usage
        self.out.models = client.models()

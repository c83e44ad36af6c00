"""The traffic section of a report: each served case's workload phases (answers compared, what the
engine's metrics show, speed against the reference) and, where a suite swept concurrency, a plot
of throughput and time to first token against the requests in flight; for an open-loop phase, the
engine's gauges, its KV cache usage and each PP stage's memory over the phase. Self-contained SVG."""

from __future__ import annotations

from html import escape
from typing import Any

from harness.check.stages.balance import per_stage
from harness.results.result import PhaseRecord, Result, Stages


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"{a / b:.2f}"


def _itl(perf: dict[str, float | None], unmeasured: dict[str, str]) -> str:
    """The inter-token latency's p50 / p99, or why it was not measured."""
    if "itl_p50_s" in unmeasured:
        return f"not measured: {unmeasured['itl_p50_s']}"
    return f"{_fmt(perf.get('itl_p50_s'))} / {_fmt(perf.get('itl_p99_s'))}" if perf else "—"


def phase_row(case: str, p: PhaseRecord) -> dict[str, Any]:
    m, perf, ref = p.metrics, p.perf, p.reference_perf
    shown = [
        f"{k.replace('_', ' ')} {v:g}"
        for k, v in m.items()
        if k in ("peak_running", "peak_waiting", "preemptions", "prefix_cache_hits", "spec_accepted_tokens") and v
    ]
    # a phase that passed still names the performance gates it held, with their numbers; any
    # verdict names a baseline the phase beat by more than its gate's margin
    verdict = (
        p.error
        or (p.not_exercised and f"not exercised: {p.not_exercised}")
        or "; ".join(p.problems)
        or "; ".join(["ok", *p.gates])
    )
    verdict = "; ".join([verdict, *p.stale_baselines])
    stages = ""
    if p.stage_utilisation:
        busy = ", ".join(f"{u:.0%}" for u in p.stage_utilisation)
        stages = f"busy {busy}; bubble {_fmt(p.bubble, 2)} (model {_fmt(p.bubble_model, 2)})"
    return {
        "case": case,
        "phase": p.name if p.name == p.kind else f"{p.name} ({p.kind})",
        "kind": p.kind,
        "compared": f"{p.exact} exact, {p.tied} tied, {p.mismatched} mismatched of {p.requests}",
        "metrics": "; ".join(shown) or "—",
        "tokens_s": f"{_fmt(perf.get('output_tokens_per_s'))} vs {_fmt(ref.get('output_tokens_per_s'))}"
        if perf
        else "—",
        "ratio": _ratio(perf.get("output_tokens_per_s"), ref.get("output_tokens_per_s")),
        "ttft": f"{_fmt(perf.get('ttft_p50_s'))} / {_fmt(perf.get('ttft_p99_s'))}" if perf else "—",
        "itl": _itl(perf, p.unmeasured),
        "stages": stages or "—",
        "wall": f"{_fmt(p.wall_s)} vs {_fmt(p.reference_wall_s)}",
        "verdict": verdict,
    }


def rows(records: list[Result]) -> list[dict[str, Any]]:
    return [phase_row(r.case, p) for r in records for p in r.observation.workload]


MARKED = 20  # points of a line drawn as dots too (a time series is a line alone)
TICKS = 6  # ticks of an axis with more distinct values than this
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def _polyline(points: list[tuple[float, float]], sx: Any, sy: Any, colour: str) -> str:
    path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    dots = (
        "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in points)
        if len(points) <= MARKED
        else ""
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>{dots}'


def _chart(
    title: str, series: dict[str, list[tuple[float, float]]], unit: str, x_label: str = "requests in flight"
) -> str:
    w, h, pad = 320, 180, 36
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) or 1
    y1 = max(ys) or 1

    def sx(x: float) -> float:
        return pad + (w - 2 * pad) * ((x - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def sy(y: float) -> float:
        return h - pad - (h - 2 * pad) * (y / y1)

    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    lines = "".join(_polyline(sorted(pts), sx, sy, colours[name]) for name, pts in series.items() if pts)
    marks = sorted(set(xs))
    if len(marks) > TICKS:
        marks = [round(x0 + (x1 - x0) * i / (TICKS - 1), 1) for i in range(TICKS)]
    ticks = "".join(
        f'<text x="{sx(x):.1f}" y="{h - pad + 14}" font-size="10" text-anchor="middle">{x:g}</text>' for x in marks
    )
    legend = "".join(
        f'<text x="{w - pad}" y="{14 + 12 * i}" font-size="10" text-anchor="end" fill="{colours[n]}">{escape(n)}</text>'
        for i, n in enumerate(series)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{escape(title)}">'
        f'<text x="{pad}" y="14" font-size="11">{escape(title)} ({escape(unit)}, max {y1:.3g})</text>'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#888"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#888"/>'
        f'<text x="{w / 2}" y="{h - 4}" font-size="10" text-anchor="middle">{escape(x_label)}</text>'
        f"{ticks}{lines}{legend}</svg>"
    )


def _over_time(p: PhaseRecord) -> str:
    """An open-loop phase's samples over its time: requests running and waiting, KV cache usage,
    each PP stage's memory (MiB)."""
    series = p.series
    charts = []
    for title, names, unit, scale in (
        (f"{p.name}: requests", ("running", "waiting"), "requests", 1.0),
        (f"{p.name}: KV cache usage", ("kv_usage",), "fraction", 1.0),
        (
            f"{p.name}: stage memory",
            tuple(sorted(k for k in series if k.startswith("stage") and k.endswith("_memory_bytes"))),
            "MiB",
            1 / 2**20,
        ),
    ):
        lines = {
            n.removesuffix("_memory_bytes"): [(t, v * scale) for t, v in series[n]] for n in names if series.get(n)
        }
        if lines:
            charts.append(_chart(title, lines, unit, "seconds into the phase"))
    return "".join(charts)


def plots(records: list[Result]) -> list[dict[str, str]]:
    """For each case with two or more concurrent phases: throughput and TTFT (p50) against the
    requests in flight, the case beside its reference; for each open-loop phase, its samples
    over time."""
    out = []
    for r in records:
        for p in r.observation.workload:
            if p.series:
                out.append({"case": f"{r.case} ({p.name})", "svg": _over_time(p)})
        sweep = [p for p in r.observation.workload if p.kind == "concurrent" and p.perf and p.in_flight]
        if len({p.in_flight for p in sweep}) < 2:
            continue
        charts = []
        for key, title, unit in (
            ("output_tokens_per_s", "output throughput", "tokens/s"),
            ("ttft_p50_s", "time to first token, p50", "s"),
        ):
            series = {
                "case": [(float(p.in_flight), v) for p in sweep if (v := p.perf.get(key)) is not None],
                "reference": [(float(p.in_flight), v) for p in sweep if (v := p.reference_perf.get(key)) is not None],
            }
            if any(series.values()):
                charts.append(_chart(title, series, unit))
        out.append({"case": r.case, "svg": "".join(charts)})
    return out


def _mib(v: float | int | None) -> str:
    return "—" if v is None else f"{v / 2**20:.1f}"


def stage_rows(stages: Stages) -> list[dict[str, str]]:
    """Each PP stage's weights, KV-cache blocks, peak memory (MiB) and mean forward time (ms)."""
    return [
        {
            "stage": str(r["stage"]),
            "weights_mib": _mib(r["weights_bytes"]),
            "kv_blocks": "—" if r["kv_blocks"] is None else str(r["kv_blocks"]),
            "peak_mib": _mib(r["peak_memory_bytes"]),
            "step_ms": _fmt(r["step_ms"]),
        }
        for r in per_stage(stages)
    ]

"""What a phase shows: its answers against the reference's, whether the engine's own metrics say
the phase did what it names, and the bounds a claim puts on it."""

from __future__ import annotations

import math
from typing import Any

from harness.cases.workload import PhasePlan, kind_of
from harness.check.traffic import metrics
from harness.check.traffic.compare import compare_explicit, compare_phase
from harness.check.traffic.phases import PhaseOutputs
from harness.matrix.schema import Compare, PerfFigure, PerfGate
from harness.results.result import PhaseRecord


def not_exercised(plan: PhasePlan, got: PhaseOutputs) -> str | None:
    """Why the case's metrics show the phase did not do what it names (None when they show it did)."""
    return kind_of(plan).not_exercised(plan, got.metrics)


def not_a_measurement(value: object) -> bool:
    """Whether a measured figure (throughput, latency, acceptance) cannot be one: not a number,
    NaN, infinite or negative. Such a figure fails the bound it meets, naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value is not None
    return not math.isfinite(value) or value < 0


def _unmeasurable(figures: dict[str, object]) -> list[str]:
    return [f"{name} {value!r} is not a measurement" for name, value in figures.items() if not_a_measurement(value)]


def _bounds(plan: PhasePlan, got: PhaseOutputs, ref: PhaseOutputs) -> list[str]:
    phase = plan.phase
    out = []
    if phase.min_acceptance_ratio is not None:
        mine, theirs = metrics.acceptance(got.metrics), metrics.acceptance(ref.metrics)
        bad = _unmeasurable({"the case's speculative acceptance": mine, "the reference's": theirs})
        if bad:
            out += bad
        elif mine is None or theirs is None:
            side = "the case" if mine is None else "the reference"
            out.append(f"speculative acceptance not measured: {side} drafted no tokens")
        elif mine < phase.min_acceptance_ratio * theirs:
            out.append(
                f"speculative acceptance {mine:.3f} < {phase.min_acceptance_ratio:g} x the reference's {theirs:.3f}"
            )
    if phase.min_throughput_ratio is not None:
        mine_t, theirs_t = got.perf.get("output_tokens_per_s"), ref.perf.get("output_tokens_per_s")
        bad = _unmeasurable({"the case's throughput": mine_t, "the reference's throughput": theirs_t})
        if bad:
            out += bad
        elif not mine_t or not theirs_t:
            out.append("throughput not measured (a concurrent phase measures it)")
        elif mine_t < phase.min_throughput_ratio * theirs_t:
            out.append(
                f"throughput {mine_t:.1f} tok/s < {phase.min_throughput_ratio:g} x the reference's {theirs_t:.1f}"
            )
    if phase.max_ttft_s is not None:
        worst = got.perf.get("ttft_max_s")
        if not_a_measurement(worst):
            out.append(f"time to first token {worst!r} is not a measurement")
        elif worst is None:
            out.append("time to first token not measured (a concurrent phase measures it)")
        elif worst > phase.max_ttft_s:
            out.append(f"time to first token {worst:.3f} s > {phase.max_ttft_s:g} s")
    return out


# A gate's measured figure (PhaseRecord.perf), and whether more of it is better.
PERF_GATES: dict[PerfFigure, tuple[str, str, str, bool]] = {
    "output_tokens_per_s": ("output_tokens_per_s", "output throughput", "tok/s", True),
    "ttft_s": ("ttft_p50_s", "median TTFT", "s", False),
    "tpot_s": ("itl_p50_s", "median TPOT", "s", False),
}


def gate_bounds(gate: PerfGate, key: PerfFigure, baseline: float) -> tuple[float, float, str]:
    """A figure's bounds: past the first it fails, past the second (as far from the baseline the
    other way) its baseline is stale; and how the first is written. vllm-ascend's form scales the
    baseline by ``ratio``; TensorRT-LLM's allows max(rel_slack x baseline, abs_slack)."""
    higher = PERF_GATES[key][3]
    if gate.slack_form:
        rel, fixed = gate.rel_slack or 0.0, (gate.abs_slack or {}).get(key, 0.0)
        margin = max(rel * baseline, fixed)
        bound = baseline - margin if higher else baseline + margin
        how = f"baseline {baseline:g} {'-' if higher else '+'} max({rel:g} x baseline, {fixed:g})"
    else:
        bound = gate.ratio * baseline if higher else baseline / gate.ratio
        how = f"{gate.ratio:g} {'x' if higher else '/'} baseline {baseline:g}"
    return bound, 2 * baseline - bound, how


def perf_gates(
    gate: PerfGate | None,
    perf: dict[str, float | None],
    measured_by: str | None = None,
    unmeasured: dict[str, str] | None = None,
) -> tuple[list[str], list[str], list[str]]:
    """The figures against a recorded baseline: (held, failed, stale), each naming the numbers;
    stale: a figure better than its baseline by more than the gate allows the other way, "update
    the baseline" (held too: it is no regression). ``perf``: a concurrent phase's own
    measurements, or those of ``measured_by`` (a tool's output, named in each line);
    ``unmeasured``: figures left out, and why (a gate on one fails saying so)."""
    held: list[str] = []
    failed: list[str] = []
    stale: list[str] = []
    if gate is None:
        return held, failed, stale
    by = f" (measured by {measured_by})" if measured_by else ""
    source = f" ({gate.source})" if gate.source else ""
    for key, (measured, label, unit, higher) in PERF_GATES.items():
        baseline = getattr(gate, key)
        if baseline is None:
            continue
        value = perf.get(measured)
        if measured in (unmeasured or {}):
            failed.append(f"{label} not measured: {(unmeasured or {})[measured]}")
            continue
        if not_a_measurement(value):
            failed.append(f"{label} {value!r}{by} is not a measurement (a finite number, 0 or more)")
            continue
        if value is None:
            why = f"{measured_by} gives none" if measured_by else "a concurrent phase measures it"
            failed.append(f"{label} not measured ({why})")
            continue
        bound, update, how = gate_bounds(gate, key, baseline)
        ok = value >= bound if higher else value <= bound
        sign = (">=" if ok else "<") if higher else ("<=" if ok else ">")
        (held if ok else failed).append(f"{label} {value:g} {unit}{by} {sign} {bound:g} ({how}{source})")
        if value > update if higher else value < update:
            stale.append(
                f"update the baseline: {label} {value:g} {unit}{by} is better than baseline {baseline:g}{source} "
                f"by more than the gate allows ({'>' if higher else '<'} {update:g})"
            )
    return held, failed, stale


def measured_by_aisbench(result: object) -> str:
    """How a gate names figures read from AISBench's performances file ``result``."""
    return f"AISBench, {result}"


def _gates(gate: PerfGate | None, got: PhaseOutputs) -> tuple[list[str], list[str], list[str]]:
    """The phase's gate on its own figures, or on AISBench's perf run where the gate asks for it."""
    if gate is None or gate.aisbench is None:
        return perf_gates(gate, got.perf, unmeasured=got.unmeasured)
    run = got.aisbench or {"error": "it did not run"}
    if run.get("error"):
        return [], [f"AISBench's perf run gave no figures: {run['error']}"], []
    return perf_gates(gate, run["figures"], measured_by=measured_by_aisbench(run["result"]))


def phase_record(
    plan: PhasePlan, compare: Compare, got: PhaseOutputs, ref: PhaseOutputs | None, stages: dict[str, Any]
) -> PhaseRecord:
    """The phase's record for one case; ``ref`` None where the reference has no answers for it
    (the case's own checks still count). ``stages``: the stage probe's busy fractions, if read."""
    rec: dict[str, Any] = {
        "name": plan.name,
        "kind": plan.kind,
        "in_flight": plan.in_flight,
        "wall_s": got.wall_s,
        "metrics": got.metrics,
        "perf": got.perf,
        "unmeasured": got.unmeasured,
        "streams": [t.to_json() for t in got.streams],
        "error": got.error,
        **stages,
    } | ({"series": got.series} if got.series else {})
    held, failed, stale = _gates(plan.phase.perf_baseline, got)
    if got.aisbench is not None:
        rec["aisbench"] = got.aisbench
    rec["gates"] = held + failed
    rec["stale_baselines"] = stale
    if not got.error:
        rec["not_exercised"] = not_exercised(plan, got)
        rec["problems"] = failed
    if not got.error and ref is not None:
        problems: list[str] = []
        labels = kind_of(plan).labels(plan)
        problems += kind_of(plan).problems(plan, got, ref)
        verdict = compare_phase(compare, labels, ref.completions, got.completions)
        if plan.explicit:
            verdict = compare_explicit(compare, plan.explicit, ref.answers, got.answers)
        rec |= verdict | {
            "reference_wall_s": ref.wall_s,
            "reference_metrics": ref.metrics,
            "reference_perf": ref.perf,
            "reference_unmeasured": ref.unmeasured,
            "problems": problems + _bounds(plan, got, ref) + failed,
        }
    return PhaseRecord.of(rec)

"""AISBench's own performance output, as the figures ppconf's performance gate reads.

What is read (ais-bench-benchmark, github AISBench/benchmark; tests/data/aisbench/perf/README.md):
an ``ais_bench --mode perf`` run writes <work-dir>/<time>/performances/<model abbr>/ with, per
dataset, ``<dataset abbr>.json`` (the end-to-end metrics: ``{"Output Token Throughput": {"total":
"2424.78 token/s"}, ...}``) and ``<dataset abbr>.csv`` (per-request metrics: a row per metric, its
stage, then Average, Min, Max, Median, P75, P90, P99 and N; latencies written "262.59 ms").
Output throughput comes from the JSON, as vllm-ascend's nightly reads it; median TTFT and median
TPOT from the CSV, in seconds. A figure AISBench did not write (TTFT and TPOT are left out of a
run without streaming) is absent, and the gate says it was not measured.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from harness.check.scores.tool import ScoreError
from harness.check.traffic.evidence import perf_gates
from harness.matrix.schema import PerfGate

STAGE = "total"  # the stage of a run without stages (DefaultPerfMetricCalculator)
THROUGHPUT = "Output Token Throughput"
# CSV row -> the figure of ppconf's gate it gives (PERF_GATES' measured names)
MEDIANS = {"TTFT": "ttft_p50_s", "TPOT": "itl_p50_s"}
UNITS = {"ms": 1e-3, "token/s": 1.0, "": 1.0}


def _number(text: str, where: str) -> tuple[float, str]:
    value, _, unit = str(text).strip().partition(" ")
    try:
        return float(value), unit.strip()
    except ValueError:
        raise ScoreError(f"{where}: {text!r} is not a number with a unit") from None


def _scaled(text: str, where: str) -> float:
    value, unit = _number(text, where)
    if unit not in UNITS:
        raise ScoreError(f"{where}: unit {unit!r} of {text!r} (expected ms or token/s)")
    return value * UNITS[unit]


def read_aisbench_performance(result: Path) -> dict[str, float | None]:
    """The gate's figures from AISBench's performance result ``result`` (its ``<dataset
    abbr>.json``; the ``.csv`` beside it gives the latencies). ScoreError naming the file and
    entry when they are not AISBench's."""
    try:
        common = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ScoreError(f"{result}: not AISBench's performance result ({err})") from None
    entry = common.get(THROUGHPUT) if isinstance(common, dict) else None
    if not isinstance(entry, dict) or STAGE not in entry:
        raise ScoreError(f"{result}: no {THROUGHPUT!r} of stage {STAGE!r} (keys: {', '.join(common)})")
    figures: dict[str, float | None] = {"output_tokens_per_s": _scaled(entry[STAGE], f"{result}: {THROUGHPUT}")}
    table = result.with_suffix(".csv")
    if not table.is_file():
        return figures
    with table.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = rows[0] if rows else []
    if header[:2] != ["Performance Parameters", "Stage"] or "Median" not in header:
        raise ScoreError(f"{table}:1: not AISBench's per-request metrics (header {header})")
    median = header.index("Median")
    for n, row in enumerate(rows[1:], 2):
        if len(row) == len(header) and row[0] in MEDIANS and row[1] == STAGE:
            figures[MEDIANS[row[0]]] = _scaled(row[median], f"{table}:{n}: {row[0]} Median")
    return figures


def aisbench_perf_gates(gate: PerfGate, result: Path) -> tuple[list[str], list[str]]:
    """``gate`` on the figures of AISBench's performance result ``result``: (held, failed), each
    line naming the numbers and the file they came from."""
    return perf_gates(gate, read_aisbench_performance(result), measured_by=f"AISBench, {result}")

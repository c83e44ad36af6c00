"""AISBench's own performance output, as the figures ppconf's performance gate reads.

What is read (ais-bench-benchmark, github AISBench/benchmark; tests/data/aisbench/perf/README.md):
an ``ais_bench --mode perf`` run writes <work-dir>/<time>/performances/<model abbr>/ with, per
dataset, ``<dataset abbr>.json`` (the end-to-end metrics: ``{"Output Token Throughput": {"total":
"2424.78 token/s"}, ...}``) and ``<dataset abbr>.csv`` (per-request metrics: a row per metric, its
stage, then Average, Min, Max, Median, P75, P90, P99 and N; latencies written "262.59 ms").
Output throughput comes from the JSON, as vllm-ascend's nightly reads it; median TTFT and median
TPOT from the CSV, in seconds. A figure AISBench did not write (TTFT and TPOT are left out of a
run without streaming) is absent, and the gate says it was not measured.

A phase whose ``perf_baseline`` sets ``aisbench`` runs ``ais_bench --mode perf`` on the live
deployment after the phase (``run_aisbench``: argv list, its own work dir, its own process group)
and its gate reads the figures of the newest run's performances file.
"""

from __future__ import annotations

import csv
import hashlib
import time
from pathlib import Path
from typing import Any

from harness import json_input
from harness.check.scores.aisbench import AISBENCH_ABBR, failure_evidence, newest_run, run_aisbench
from harness.check.scores.tool import ScoreError, a_number
from harness.matrix.schema import AISBenchPerf, Phase

STAGE = "total"  # the stage of a run without stages (DefaultPerfMetricCalculator)
THROUGHPUT = "Output Token Throughput"
# CSV row -> the figure of ppconf's gate it gives (PERF_GATES' measured names)
MEDIANS = {"TTFT": "ttft_p50_s", "TPOT": "itl_p50_s"}
UNITS = {"ms": 1e-3, "token/s": 1.0, "": 1.0}


def _number(text: str, where: str) -> tuple[float, str]:
    value, _, unit = str(text).strip().partition(" ")
    try:
        number = float(value)
    except ValueError:
        raise ScoreError(f"{where}: {text!r} is not a number with a unit") from None
    return a_number(number, f"{where}: {text!r}", low=0.0), unit.strip()


def _scaled(text: str, where: str) -> float:
    value, unit = _number(text, where)
    if unit not in UNITS:
        raise ScoreError(f"{where}: unit {unit!r} of {text!r} (expected ms or token/s)")
    return value * UNITS[unit]


def _csv_rows(table: Path) -> list[list[str]]:
    """The rows of AISBench's per-request metrics ``table``; ScoreError naming the file (and
    line) when it cannot be read as CSV."""
    reader = None
    try:
        with table.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            return list(reader)
    except UnicodeDecodeError as err:
        raise ScoreError(f"{table}: not AISBench's per-request metrics (not UTF-8: {err})") from None
    except csv.Error as err:
        line = f":{reader.line_num}" if reader is not None else ""
        raise ScoreError(f"{table}{line}: not AISBench's per-request metrics ({err})") from None
    except OSError as err:
        raise ScoreError(f"{table}: cannot read AISBench's per-request metrics ({err})") from None


def read_aisbench_performance(result: Path) -> dict[str, float | None]:
    """The gate's figures from AISBench's performance result ``result`` (its ``<dataset
    abbr>.json``; the ``.csv`` beside it gives the latencies). ScoreError naming the file and
    entry when they are not AISBench's."""
    try:
        common = json_input.load(result)
    except (OSError, ValueError) as err:  # JsonInputError is a ValueError
        raise ScoreError(f"{result}: not AISBench's performance result ({err})") from None
    if not isinstance(common, dict):
        raise ScoreError(f"{result}: not AISBench's performance result (a JSON {type(common).__name__}, not an object)")
    entry = common.get(THROUGHPUT)
    if not isinstance(entry, dict) or STAGE not in entry:
        raise ScoreError(f"{result}: no {THROUGHPUT!r} of stage {STAGE!r} (keys: {', '.join(map(str, common))})")
    figures: dict[str, float | None] = {"output_tokens_per_s": _scaled(entry[STAGE], f"{result}: {THROUGHPUT}")}
    table = result.with_suffix(".csv")
    if not table.is_file():
        return figures
    rows = _csv_rows(table)
    header = rows[0] if rows else []
    if header[:2] != ["Performance Parameters", "Stage"] or "Median" not in header:
        raise ScoreError(f"{table}:1: not AISBench's per-request metrics (header {header})")
    median = header.index("Median")
    for n, row in enumerate(rows[1:], 2):
        if len(row) == len(header) and row[0] in MEDIANS and row[1] == STAGE:
            figures[MEDIANS[row[0]]] = _scaled(row[median], f"{table}:{n}: {row[0]} Median")
    return figures


def performance_result(out_dir: Path, dataset_abbr: str | None, log_path: Path) -> Path:
    """The performances file of the newest run under ``out_dir`` (AISBench's --work-dir): the
    one of ``dataset_abbr``, or the only one."""
    folder = newest_run(out_dir, log_path) / "performances" / AISBENCH_ABBR
    found = sorted(folder.glob("*.json"))
    if dataset_abbr is not None:
        found = [p for p in found if p.stem == dataset_abbr] or found
        if found and found[0].stem != dataset_abbr:
            known = ", ".join(p.stem for p in found)
            raise ScoreError(f"{folder}: no performances of dataset {dataset_abbr!r}; there are {known}")
    if not found:
        raise ScoreError(f"AISBench wrote no performances file in {folder}\n{failure_evidence(log_path)}")
    if len(found) > 1:
        names = ", ".join(p.stem for p in found)
        raise ScoreError(f"{folder}: performances of several datasets ({names}); name one in dataset_abbr")
    return found[0]


def measure_aisbench_perf(
    base_url: str,
    model_name: str,
    spec: AISBenchPerf,
    base_dir: Path,
    workdir: Path,
    timeout_s: float,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """AISBench in perf mode against the server at ``base_url`` (``tokenizer``: the served
    model's local folder, AISBench's model path), as vllm-ascend measures: the figures of its newest
    performances file, the file, the argv and the log; ``{"error": ...}`` with its evidence
    when it is missing, fails, runs past ``timeout_s`` or writes no performances."""
    try:
        limit = spec.num_prompts
        ran = run_aisbench(base_url, model_name, spec, base_dir, workdir, timeout_s, limit, "perf", tokenizer)
        result = performance_result(ran["out_dir"], spec.dataset_abbr, Path(ran["log"]))
        figures = read_aisbench_performance(result)
    except ScoreError as err:
        return {"error": str(err)}
    return {
        "figures": figures,
        "result": str(result),
        "command": ran["command"],
        "generation": ran["generation"],
        "log": ran["log"],
        "duration_s": round(time.monotonic() - ran["started"], 3),
    }


def perf_workdir(log_dir: Path, phase: Phase, key: str) -> Path:
    """The folder of the perf run of the phase ``key`` (phases sharing a label each have their own)."""
    return log_dir / "aisbench-perf" / f"{phase.label}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def measure_phase_perf(live: Any, phase: Phase, base_dir: Path, key: str) -> dict[str, Any]:
    """AISBench's perf run for ``phase`` (its ``perf_baseline.aisbench``; ``key`` the phase's
    identity) on the ready deployment ``live``, within the phase's deadline, in its own folder
    under the deployment's logs."""
    gate = phase.perf_baseline
    assert gate is not None and gate.aisbench is not None
    workdir = perf_workdir(live.log_dir, phase, key)
    model = live.deployment.model
    tokenizer = model if model and Path(model).is_dir() else None
    return measure_aisbench_perf(
        live.client.base, live.model_name or "", gate.aisbench, base_dir, workdir, phase.deadline_s, tokenizer
    )

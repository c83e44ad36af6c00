"""The performance gate on AISBench's own performance output (tests/data/aisbench/perf: the files
an ``ais_bench --mode perf`` run writes, their format and source in its README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.check.scores.aisbench_perf import aisbench_perf_gates, read_aisbench_performance
from harness.check.scores.tool import ScoreError
from harness.matrix.schema import PerfGate

RESULT = Path(__file__).parent / "data" / "aisbench" / "perf" / "20260822_101500" / "performances" / "ppconf"
JSON = RESULT / "gsm8kdataset.json"


def test_the_figures_are_aisbenchs_throughput_and_median_latencies_in_seconds():
    figures = read_aisbench_performance(JSON)
    assert figures == {
        "output_tokens_per_s": 2424.7802,  # "Output Token Throughput": {"total": "2424.7802 token/s"}
        "ttft_p50_s": pytest.approx(22.9034471),  # TTFT's Median, "22903.4471 ms"
        "itl_p50_s": pytest.approx(0.2680144),  # TPOT's Median, "268.0144 ms"
    }


def test_the_gate_holds_and_fails_on_aisbenchs_figures_and_names_their_file():
    # the config's own numbers: baseline 2424.6267 tok/s, threshold 0.97
    gate = PerfGate(output_tokens_per_s=2424.6267, ttft_s=30.0, tpot_s=0.25, ratio=0.97, source="vllm-ascend nightly")
    held, failed = aisbench_perf_gates(gate, JSON)
    assert held[0] == (
        f"output throughput 2424.78 tok/s (measured by AISBench, {JSON}) >= 2351.89 "
        "(0.97 x baseline 2424.63 (vllm-ascend nightly))"
    )
    assert held[1].startswith(f"median TTFT 22.9034 s (measured by AISBench, {JSON}) <= 30.9278")
    (tpot,) = failed
    assert tpot.startswith(f"median TPOT 0.268014 s (measured by AISBench, {JSON}) > 0.257732 (0.97 / baseline 0.25")
    # a faster baseline than AISBench measured fails the throughput gate
    _, failed = aisbench_perf_gates(PerfGate(output_tokens_per_s=2600.0), JSON)
    assert failed == [f"output throughput 2424.78 tok/s (measured by AISBench, {JSON}) < 2522 (0.97 x baseline 2600)"]


def test_a_run_without_streaming_has_no_latencies_and_the_gate_says_so(tmp_path):
    # AISBench leaves TTFT and TPOT out of its CSV when every TTFT is 0 (no streaming)
    result = tmp_path / "gsm8kdataset.json"
    shutil.copy(JSON, result)
    rows = (RESULT / "gsm8kdataset.csv").read_text().splitlines()
    (tmp_path / "gsm8kdataset.csv").write_text("\n".join(r for r in rows if not r.startswith(("TTFT", "TPOT"))))
    _, failed = aisbench_perf_gates(PerfGate(output_tokens_per_s=1.0, ttft_s=1.0), result)
    assert failed == [f"median TTFT not measured (AISBench, {result} gives none)"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("Output Token Throughput"), "no 'Output Token Throughput' of stage 'total'"),
        (lambda d: d["Output Token Throughput"].update(total="fast token/s"), "'fast token/s' is not a number"),
        (lambda d: d["Output Token Throughput"].update(total="2424.78 tok/min"), "unit 'tok/min'"),
    ],
)
def test_a_result_that_is_not_aisbenchs_is_an_error_naming_the_file(tmp_path, edit, message):
    data = json.loads(JSON.read_text())
    edit(data)
    result = tmp_path / "gsm8kdataset.json"
    result.write_text(json.dumps(data))
    with pytest.raises(ScoreError) as err:
        read_aisbench_performance(result)
    assert str(err.value).startswith(f"{result}: ") and message in str(err.value)


def test_a_latency_that_is_not_a_number_is_named_at_its_csv_line(tmp_path):
    result = tmp_path / "gsm8kdataset.json"
    shutil.copy(JSON, result)
    text = (RESULT / "gsm8kdataset.csv").read_text().replace("22903.4471 ms", "n/a ms")
    (tmp_path / "gsm8kdataset.csv").write_text(text)
    with pytest.raises(ScoreError, match=rf"{tmp_path / 'gsm8kdataset.csv'}:3: TTFT Median: 'n/a ms'"):
        read_aisbench_performance(result)

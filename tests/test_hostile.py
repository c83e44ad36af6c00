"""Hostile matrices and arguments: each gets a clean, positioned error or a bounded run."""

import time

import pytest

from harness.check import logs
from harness.check.diagnose import diagnose
from harness.matrix.load import load_matrix
from harness.matrix.schema import Diagnosis
from harness.matrix.source import MatrixError


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


@pytest.mark.parametrize("where,body", [
    ("rules", 'rules:\n  - when: family == "qwen3-tiny"\n    expect: rejected\n    phase: startup\n'
              '    why: x\n    error: "^(\\\\w+\\\\s?)+$"\n'),
    ("features", "features:\n  evil:\n    title: x\n    silent_disable: ['(a+)+b']\n"),
    ("diagnosis", "diagnosis:\n  - symptom: x\n    advice: y\n    patterns: ['(x+x+)+y']\n"),
])
def test_nested_quantifiers_are_refused_at_load(matrix_dir, where, body):
    matrix_dir("evil.yaml", body)
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/evil.yaml:") and "nested quantifiers" in e for e in errs), errs


def test_a_backtracking_pattern_cannot_hang_a_log_search(tmp_path, monkeypatch):
    # (a|aa)+$ has no nested quantifier, so it passes the lint; matching still has a deadline
    monkeypatch.setattr(logs, "PATTERN_BUDGET_S", 0.5)
    log = tmp_path / "api.log"
    log.write_text("WARNING " + "a" * 80 + "b\n")
    t0 = time.monotonic()
    with pytest.raises(logs.PatternTimeout, match=r"\(a\|aa\)\+\$"):
        logs.search({"api": log}, r"(a|aa)+$")
    with pytest.raises(logs.PatternTimeout):
        logs.warnings_matching({"api": log}, [r"(a|aa)+$"])
    with pytest.raises(logs.PatternTimeout):
        diagnose([Diagnosis(symptom="s", advice="a", patterns=[r"(a|aa)+$"])], ["a" * 80 + "b"], {})
    assert time.monotonic() - t0 < 10


def _cli(*argv):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-5", '"soon"', "true"])
def test_schedule_durations_must_be_finite_seconds(tmp_path, value):
    from harness.plan.schedule import load_durations

    path = tmp_path / "d.json"
    path.write_text('{"qwen3-tiny/pp1-tp1/auto/none": %s}' % value)
    with pytest.raises(ValueError, match="not a duration"):
        load_durations(path)


def test_schedule_durations_from_a_run_with_a_bad_record(tmp_path):
    from harness.plan.schedule import load_durations

    (tmp_path / "results.jsonl").write_text('{"case": "c", "outcome": "PASS", "duration_s": "1e999"}\n')
    with pytest.raises(ValueError, match="results.jsonl: case 'c' duration_s"):
        load_durations(tmp_path)


def test_schedule_cli_gives_one_clean_line_for_nan(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"x": NaN}')
    out = _cli("schedule", "--suite", "smoke-cpu", "--simulate", "--durations", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a duration" in out.stderr, out.stderr


@pytest.mark.parametrize("argv,says", [
    (["--layers", "61", "--pp", "1000000000"], "--pp 1000000000"),
    (["--layers", "-5", "--pp", "2"], "--layers -5"),
    (["--layers", "0", "--pp", "2"], "--layers 0"),
    (["--layers", "5", "--pp", "2", "--step-ms", "nan,1"], "not a measurement"),
    (["--layers", "5", "--pp", "2", "--step-ms", "inf,1"], "not a measurement"),
    (["--layers", "5", "--pp", "2", "--step-ms=-1,1"], "not a measurement"),
    (["--layers", "5", "--pp", "2", "--peak-mib", "1,nan"], "not a measurement"),
])
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

    line = "\x1b[31mERROR\x1b[0m ValueError: bad \x01\x0b\x1f byte <img src=http://x/p.png> <script>alert(1)</script> | x"
    run = tmp_path / "run"
    run.mkdir()
    results.append(run, {"case": "qwen3-tiny/pp2-tp1-mp/auto/none", "suite": "s", "family": "qwen3-tiny",
                         "variant": "default", "topology": "pp2-tp1-mp", "partition": "auto", "features": [],
                         "platform": "cpu", "expectation": {"kind": "supported"}, "outcome": "FAIL",
                         "reason": f"did not start: {line}", "observation": {"root_cause": {"log": "a", "line": 1,
                                                                                           "text": line}},
                         "deployment": None, "started": "2026-11-30T20:00:00+00:00", "duration_s": 10.0})
    report_run(run, run / "report")
    return run / "report"


def test_junit_is_valid_xml_when_a_log_line_carries_control_characters(tmp_path):
    import xml.etree.ElementTree as ET

    report = _run_with_a_hostile_log_line(tmp_path)
    root = ET.parse(report / "junit.xml").getroot()  # raises on an invalid document
    failure = root.find("testcase/failure")
    assert "ValueError: bad \\x01\\x0b\\x1f byte" in failure.text and "\x1b" not in failure.text


def test_support_md_carries_no_raw_html_from_log_lines(tmp_path):
    md = (_run_with_a_hostile_log_line(tmp_path) / "support.md").read_text()
    assert "<img" not in md and "<script" not in md and "\x1b" not in md
    assert "&lt;img src=http://x/p.png&gt;" in md

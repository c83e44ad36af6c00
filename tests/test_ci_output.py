"""CI-native output: one plain line per verdict off a terminal, GitHub annotations and job summary."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.commands.run import github_output
from harness.console import event_line, one_line, progress_display, verdict_line
from harness.progress import Event, EventKind
from harness.results.result import Expectation
from reports import github
from tests.records import record, result

REPO = Path(__file__).resolve().parents[1]


def _case(case_id: str) -> Case:
    return Case(
        id=case_id,
        suite="s",
        platform="cpu",
        family="f",
        variant="default",
        topology="t",
        partition="auto",
        features=(),
        attrs={},
        expectation=Expectation(kind="supported"),
    )


def test_a_verdict_is_one_line_whatever_its_reason():
    line = verdict_line("BAD_REJECT", "f/pp2/auto/none", "exited 1:\n  Traceback (most recent call last):\r\n\tboom")
    assert line == "BAD_REJECT         f/pp2/auto/none  exited 1: Traceback (most recent call last): boom"
    assert one_line("a\n\n  b\tc ") == "a b c"


def test_event_lines():
    case = _case("q/pp2/1,4/none")
    assert event_line(Event(EventKind.RESULT, "ok", case, outcome="PASS")) == "PASS               q/pp2/1,4/none  ok"
    assert event_line(Event(EventKind.RETRY, "infra", case, count=2)).startswith("RETRY              q/pp2/1,4/none")
    assert event_line(Event(EventKind.LAUNCH, "2 launches", case)) == "launch             q/pp2/1,4/none  2 launches"
    assert event_line(Event(EventKind.NOTICE, "stopped 1 group\nleft behind")) == "stopped 1 group left behind"


def test_off_a_terminal_the_display_is_plain_lines():
    out = io.StringIO()  # not a terminal, like a CI log
    with progress_display("s", out) as sink:
        sink(Event(EventKind.START, "2 of 2 cases to run", total=2))
        sink(Event(EventKind.RESULT, "reason " * 40 + "\nmore", _case("a/b"), outcome="FAIL"))
        sink(Event(EventKind.RESULT, "fine", _case("c/d"), outcome="PASS"))
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "FAIL", "PASS"]
    assert lines[1].endswith("reason more") and len(lines[1]) > 280  # not wrapped at 80 columns
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()  # no colours, no bar redraws


def _unescape_data(text: str) -> str:
    """The runner's unescaping of a workflow command's message (actions/runner ActionCommand)."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def _unescape_property(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def test_escaping_follows_the_workflow_command_rules():
    assert github.escape_data("50% of\r\nit") == "50%25 of%0D%0Ait"
    assert github.escape_property("a/1,4:x%") == "a/1%2C4%3Ax%25"
    assert github.command("error", "x\ny", title="FAIL q/1,4") == "::error title=FAIL q/1%2C4::x%0Ay"


@given(st.text())
def test_escaped_text_reads_back_and_stays_on_one_line(text):
    data, prop = github.escape_data(text), github.escape_property(text)
    assert _unescape_data(data) == text and _unescape_property(prop) == text
    assert "\n" not in data + prop and "\r" not in data + prop
    assert ":" not in prop and "," not in prop


def test_an_annotation_per_failing_case_on_the_rule_that_claimed_it(tmp_path):
    where = {"kind": "supported", "where": "matrices/cpu/rules.yaml:61:5"}
    records = [
        result("q/pp2/1,4/none", "FAIL", reason="accuracy: first divergence at token 3\nof 12", expectation=where),
        result("q/pp2/auto/none", "PASS"),
        result("q/pp2/auto/x", "XFAIL"),
        result("q/pp2/auto/y", "SKIP"),
        result(
            "q/pp2/auto/z",
            "ERROR",
            reason="port taken",
            expectation={"kind": "supported", "where": "/elsewhere/rules.yaml:3:1"},
        ),
    ]
    lines = github.error_annotations(records, env={"GITHUB_WORKSPACE": str(tmp_path)})
    assert lines == [
        "::error title=FAIL q/pp2/1%2C4/none,file=matrices/cpu/rules.yaml,line=61::"
        "accuracy: first divergence at token 3%0Aof 12",
        "::error title=ERROR q/pp2/auto/z::port taken",
    ]  # outside the checkout: no file
    inside = [result("q/a", "BAD_REJECT", expectation={"kind": "rejected", "where": f"{tmp_path}/m/r.yaml:7:3"})]
    assert ",file=m/r.yaml,line=7::" in github.error_annotations(inside, env={"GITHUB_WORKSPACE": str(tmp_path)})[0]


def test_annotations_stop_at_githubs_limit_and_count_the_rest():
    records = [result(f"q/{i}", "FAIL") for i in range(13)]
    lines = github.error_annotations(records, env={})
    assert len(lines) == github.MAX_ANNOTATIONS + 1
    assert lines[-1].startswith("::error title=3 more failing cases::")


def test_a_warning_per_waived_case_with_its_waiver():
    waived = {"kind": "known-issue", "link": "https://x/1", "owner": "alice", "until": "2099-01-01"}
    records = [
        result("q/a", "KNOWN_ISSUE", reason="failed at startup", expectation={**waived, "where": "m/r.yaml:3:1"}),
        result("q/b", "FLAKY", reason="one of 3 differed", expectation={"kind": "flaky"}),
        result("q/c", "FAIL", reason="broken"),
        result("q/d", "KNOWN_ISSUE", kind="known-issue", reason="fine now"),
        result("q/e", "PASS", expectation=waived),  # a waiver that was not needed warns of nothing
    ]
    lines = github.warning_annotations(records, env={"GITHUB_WORKSPACE": "/w"})
    assert lines[0] == (
        "::warning title=KNOWN_ISSUE q/a,file=m/r.yaml,line=3::"
        "failed at startup — waived: known-issue https://x/1, owner alice, until 2099-01-01"
    )
    assert lines[1] == "::warning title=FLAKY q/b::one of 3 differed — waived: flaky (no link), owner none, no expiry"
    assert len(lines) == 3
    errors, warnings = github.error_annotations(records, env={}), github.warning_annotations(records, env={})
    assert github.all_annotations(records, env={}) == errors + warnings
    many = github.warning_annotations([result(f"q/{i}", "FLAKY", expectation={"kind": "flaky"}) for i in range(12)], {})
    assert len(many) == github.MAX_ANNOTATIONS + 1 and many[-1].startswith("::warning title=2 more waived cases::")


def test_the_job_summary_has_the_support_table():
    records = [
        result("q/pp2/auto/none", "PASS", family="qwen3.6"),
        result("q/pp2/1,2/none", "XFAIL", family="qwen3.6", partition="1,2", expectation={"kind": "rejected"}),
        result("q/pp2/auto/x|y", "FAIL", family="qwen3.6", features=["x|y"]),
    ]
    text = github.job_summary("nightly", records, Path("r"), {})
    assert "### qwen3.6\n\n| Feature stacked with PP | pp2-tp1-mp · cpu |\n|---|---|\n" in text
    assert "| PP | ✅ |" in text and "| PP, partition 1,2 | ❌ |" in text
    assert "| x\\|y | ❌❗ [1] |" in text  # a failing cell is marked, its note below, text escaped
    assert "1. claimed ✅, observed FAIL: because" in text


def test_the_job_summary_counts_lists_failures_and_links_the_report():
    records = [
        result("q/pp2/1,4/none", "FAIL", reason="a | b\n<script>"),
        result("q/ok", "PASS"),
        result("q/ok2", "PASS"),
        result("q/s", "SKIP"),
    ]
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42"}
    text = github.job_summary("nightly", records, Path("runs/n/report/support.html"), env)
    assert "4 cases, **1 failing**" in text
    assert "| PASS | 2 | no |" in text and "| FAIL | 1 | yes |" in text and "| SKIP | 1 | no |" in text
    assert "| FAIL | q/pp2/1,4/none | a \\| b &lt;script&gt; |" in text
    url = "https://github.com/o/r/actions/runs/42"
    assert f"`runs/n/report/support.html` — in the artifacts of [this run]({url})" in text
    assert "Failing cases" not in github.job_summary("nightly", records[1:], Path("r"), {})


def test_github_output_of_a_finished_run(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        record("q/a", "ERROR", reason="first try"),
        record("q/a", "FAIL", reason="the retry's verdict"),
        record("q/b", "PASS"),
        record("q/c", "KNOWN_ISSUE", kind="known-issue", reason="waived"),
    ]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    github_output("s", run)
    assert capsys.readouterr().out == (
        "::error title=FAIL q/a::the retry's verdict\n"  # the case's last verdict
        "::warning title=KNOWN_ISSUE q/c::waived — waived: known-issue (no link), owner none, no expiry\n"
    )
    text = summary.read_text()
    assert text.startswith("earlier step\n## ppconf: s\n") and "3 cases, **1 failing**" in text  # appended


@pytest.mark.slow
def test_ppconf_run_off_a_terminal_prints_one_line_per_verdict(tmp_path):
    """A private suite whose every case is unsupported here: verdicts are recorded, nothing launches."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "ci.yaml").write_text("""\
suites:
  ci-output:
    title: cases that never launch
    platform: cpu
    groups:
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp, pp2-tp1-2node-mp]
        partitions: [auto, "1,4"]
rules:
  - when: suite == "ci-output"
    expect: unsupported-on-platform
    reason: "first line of the reason\\n\\nand a second one, long enough that a wrap at eighty columns would break it"
    why: verdicts without a launch
""")
    summary = tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "80"}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--matrices",
            str(REPO / "matrices"),
            "--matrices",
            str(private),
            "--suite",
            "ci-output",
            "--out",
            str(tmp_path / "run"),
            "--github",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    verdicts = [line for line in out.stderr.splitlines() if line.split(" ", 1)[0] == "SKIP"]
    reason = (
        "unsupported on this platform: first line of the reason and a second one, long enough that a wrap "
        "at eighty columns would break it"
    )
    assert sorted(verdicts) == sorted(
        f"SKIP               {case}  {reason}"
        for case in (
            "qwen3-tiny/pp2-tp1-mp/auto/none",
            "qwen3-tiny/pp2-tp1-mp/1,4/none",
            "qwen3-tiny/pp2-tp1-2node-mp/auto/none",
            "qwen3-tiny/pp2-tp1-2node-mp/1,4/none",
        )
    )
    assert "\x1b" not in out.stderr and "\r" not in out.stderr
    assert "::error" not in out.stdout  # nothing failed
    assert "| SKIP | 4 | no |" in summary.read_text()

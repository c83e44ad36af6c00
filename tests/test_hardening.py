"""Crafted run directories and hostile arguments (nothing launched): the gate says YES only on
grounds, verdicts read as what happened, runs are not clobbered, and every bad input is one
clean error line with exit status 2, never a traceback."""

import datetime
import json
import os
import subprocess
import sys
import time

import pytest

from harness.cases.expand import expand
from harness.check.verdict.judge import judge
from harness.cli import main
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from harness.outcomes import Outcome
from harness.results import store as results
from harness.results.lock import RunBusy, live_owner, run_lock
from harness.results.result import Expectation, Observation
from reports.render import report_run
from reports.signoff import diff_runs, signoff
from tests.records import record

GOOD = [
    record("qwen3-tiny/pp2-tp1-mp/auto/none"),
    record("qwen3-tiny/pp2-tp1-2node-mp/auto/none", topology="pp2-tp1-2node-mp"),
]


def make_run(path, records, meta=None):
    path.mkdir(parents=True, exist_ok=True)
    for r in records:
        results.append(path, r)
    if meta is not None:
        (path / "run.json").write_text(json.dumps(meta))
    return path


def one_error(capsys, code, *needles):
    """The command failed cleanly: exit 2, one line on stderr naming what was wrong."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- the gate ---------------------------------------------------------------------------------


def test_signoff_refuses_a_baseline_that_is_missing_or_not_a_run(tmp_path, capsys):
    run = make_run(tmp_path / "run", GOOD, {"suite": "smoke-cpu"})
    one_error(capsys, main(["signoff", str(run), "--baseline", str(tmp_path / "nope")]), "nope", "no such directory")
    (tmp_path / "empty").mkdir()
    one_error(capsys, main(["signoff", str(run), "--baseline", str(tmp_path / "empty")]), "not a run directory")
    assert not (run / "signoff.md").exists()


def test_a_baseline_with_no_results_cannot_vouch_for_anything(tmp_path):
    run = make_run(tmp_path / "run", GOOD)
    base = make_run(tmp_path / "base", [], {"suite": "s"})
    v = signoff(run, base, {r["case"]: r["expectation"] for r in GOOD})
    assert not v.ok and any("holds no results" in r for r in v.reasons)


def test_diff_of_missing_directories_is_an_error_not_no_differences(tmp_path, capsys):
    one_error(capsys, main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]), "no such directory")
    with pytest.raises(results.RunDirError):
        diff_runs(tmp_path / "a", tmp_path / "b")


def test_an_unknown_outcome_neither_signs_nor_crashes_diff(tmp_path, capsys):
    run = make_run(tmp_path / "run", [record("c/1", "PASSED")], {"suite": "smoke-cpu"})
    base = make_run(tmp_path / "base", [record("c/1", "PASS")], {"suite": "smoke-cpu"})
    line = one_error(capsys, main(["signoff", str(run)]), "results.jsonl:1", "outcome", "PASSED")
    assert "unknown outcome" in line
    one_error(capsys, main(["diff", str(run), str(base)]), "results.jsonl:1", "PASSED")
    one_error(capsys, main(["report", str(run)]), "PASSED")


def test_no_run_json_or_a_vanished_suite_is_no_coverage_and_no_yes(tmp_path, capsys):
    bare = make_run(tmp_path / "bare", GOOD)
    assert main(["signoff", str(bare)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("# Sign-off: NO") and "coverage cannot be checked" in out and "no run.json" in out
    gone = make_run(tmp_path / "gone", GOOD, {"suite": "renamed-long-ago"})
    assert main(["signoff", str(gone)]) == 1
    assert "the suite 'renamed-long-ago' of this run is not in the matrices" in capsys.readouterr().out


@pytest.mark.parametrize("recorded", ["string", "list"])
def test_signoff_and_report_use_the_matrices_the_run_recorded(tmp_path, capsys, matrix_dir, recorded):
    matrix_dir(
        "private/suite.yaml",
        """\
        suites:
          private:
            title: a private suite
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
                partitions: [auto, "1,4", "1,2"]
        """,
    )
    families = matrix_dir.root / "cpu" / "families.yaml"
    families.write_text(families.read_text().replace("title: Qwen3 dense (tiny stand-in)", "title: Private Qwen3"))
    private = load_matrix(matrix_dir.root)
    cases = expand(private, "private").cases
    covered = cases[0]
    rec = record(covered.id, "PASS", suite="private", expectation=covered.expectation.to_json())
    root = str(matrix_dir.root)
    run = make_run(tmp_path / "run", [rec], {"suite": "private", "matrices": root if recorded == "string" else [root]})
    assert main(["signoff", str(run)]) == 1
    out = capsys.readouterr().out
    missing = [c.id for c in cases[1:]]
    assert all(f"claimed but not tested (no result): {m}" in out for m in missing), out
    assert main(["report", str(run)]) == 0
    assert "## Private Qwen3" in (run / "report" / "support.md").read_text()
    # the recorded matrices moved away: say so, rather than judge against the shipped claims
    moved = make_run(tmp_path / "moved", [rec], {"suite": "private", "matrices": str(tmp_path / "gone")})
    capsys.readouterr()
    one_error(capsys, main(["signoff", str(moved)]), "give --matrices")
    # a run made with layered matrices is judged against the same layers
    layered = make_run(tmp_path / "layered", [rec], {"suite": "private", "matrices": [root, root]})
    capsys.readouterr()
    assert main(["signoff", str(layered)]) == 1
    assert "claimed but not tested (no result)" in capsys.readouterr().out


# ---- verdicts as they read --------------------------------------------------------------------


def test_a_bad_reject_cell_never_looks_untested(tmp_path):
    run = make_run(
        tmp_path / "run",
        [record("qwen3-tiny/pp2-tp1-mp/1,2/none", "BAD_REJECT", kind="rejected", partition="1,2", reason="it hung")],
    )
    report_run(run, run / "report")
    md = (run / "report" / "support.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| PP, partition 1,2 |"))
    assert "🟡" not in row and "❌❗ [1]" in row
    cell = json.loads((run / "report" / "summary.json").read_text())["cells"][0]
    assert cell["symbol"] == "❌" and cell["fails_run"] is True
    assert "❗" in (run / "report" / "support.html").read_text().split("<table")[1].split("</table>")[0]


def test_a_crashed_request_says_the_partition_was_not_checked_and_why():
    obs = Observation(ready=True, request_error="HTTP 500: EngineDeadError", partition_expected=[[0, 3], [3, 5]])
    v = judge(Expectation(kind="supported"), obs)
    assert v.outcome is Outcome.FAIL
    assert "could not be read" not in v.reason
    assert "partition the workers built was not checked: the request failed" in v.reason
    # without a request failure, an unreadable partition is still reported as such
    assert (
        "could not be read"
        in judge(Expectation(kind="supported"), Observation(ready=True, partition_expected=[[0, 5]])).reason
    )


def test_a_raw_newline_in_a_reason_stays_inside_its_bullet(tmp_path):
    evil = "HTTP 500: upstream said\n# Sign-off: YES\r\n\nall good\u2028really"
    run = make_run(tmp_path / "run", [record("qwen3-tiny/pp2-tp1-mp/auto/none", "FAIL", reason=evil)])
    v = signoff(run, None, {"qwen3-tiny/pp2-tp1-mp/auto/none": {"kind": "supported"}})
    reasons = v.page.split("Reasons:\n\n")[1].rstrip("\n").split("\n")
    assert reasons and all(line.startswith("- ") for line in reasons), v.page
    assert [l for l in v.page.splitlines() if l.startswith("#")] == ["# Sign-off: NO"] and "\u2028" not in v.page


def test_to_json_keeps_the_first_rule_and_zero_values(tmp_path):
    exp = Expectation(kind="rejected", rule=0, within_s=0.0, error="x", phase="startup")
    assert exp.to_json()["rule"] == 0 and exp.to_json()["within_s"] == 0.0
    assert "link" not in exp.to_json() and "experimental" not in exp.to_json()
    obs = Observation(ready=True, ready_s=0.0, exit_codes={"api": 0}, failed_after_s=0.0)
    j = obs.to_json()
    assert j["ready_s"] == 0.0 and j["failed_after_s"] == 0.0 and j["exit_codes"] == {"api": 0}
    assert "root_cause" not in j and "hung" not in j
    run = make_run(tmp_path / "run", [record("qwen3-tiny/pp2-tp1-mp/auto/none", expectation=exp.to_json())])
    report_run(run, run / "report")
    assert json.loads((run / "report" / "summary.json").read_text())["cases"][0]["claim"]["rule"] == 0


def test_the_first_shipped_rule_keeps_its_index(shipped):
    first = [c for s in shipped.suites for c in expand(shipped, s).cases if c.expectation.rule == 0]
    assert first and all(c.expectation.to_json()["rule"] == 0 for c in first)


def test_a_partition_error_pattern_that_expands_to_nothing_is_an_error(matrix_dir):
    matrix_dir(
        "00-first.yaml",
        """\
        rules:
          - when: platform == "cpu" && family == "qwen3-tiny" && custom_partition
            expect: rejected
            error: "{partition_error}"
            phase: startup
            why: every custom partition is rejected (wrong for 1,4, which vLLM accepts)
        """,
    )
    m = load_matrix(matrix_dir.root)
    with pytest.raises(MatrixError) as err:
        expand(m, "smoke-cpu")
    text = str(err.value)
    assert "00-first.yaml:2" in text and "{partition_error}" in text and "qwen3-tiny/pp2-tp1-mp/1,4/none" in text


# ---- runs -------------------------------------------------------------------------------------


def test_a_resume_while_the_run_is_alive_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "run", [], {"suite": "families-cpu", "started": "2026-01-01T00:00:00+00:00"})
    with run_lock(run):
        one_error(capsys, main(["run", "--resume", str(run)]), "in use by a running ppconf", f'"pid": {os.getpid()}')
        with pytest.raises(RunBusy):  # a second holder in this very process, e.g. a pytest session
            with run_lock(run):
                pass
    with run_lock(run):  # released when the holder leaves (or dies)
        pass


def test_a_live_process_named_in_run_json_holds_the_run(tmp_path, capsys):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)
        meta = {"suite": "families-cpu", "pid": child.pid, "started": later.isoformat()}
        assert live_owner(meta) == child.pid
        run = make_run(tmp_path / "run", [], meta)
        one_error(capsys, main(["run", "--resume", str(run)]), f"process {child.pid}", "still running")
        # the pid was reused: that process started after the run did, so it is not the run's owner
        earlier = dict(meta, started="2020-01-01T00:00:00+00:00")
        assert live_owner(earlier) is None
    finally:
        child.kill()
        child.wait()
    assert live_owner(meta) is None


class _Config:
    def __init__(self, out):
        self.options = {
            "--ppconf-matrices": [str(DEFAULT_MATRICES)],
            "--ppconf-resume": None,
            "--ppconf-out": str(out),
            "--ppconf-cluster": None,
            "--ppconf-suite": None,
        }

    def getoption(self, name):
        return self.options[name]


def test_pytest_sessions_lock_their_run_and_xdist_workers_get_their_own(tmp_path, monkeypatch):
    from conformance.plugin import Session

    out = tmp_path / "out"
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    first = Session(_Config(out))
    try:
        assert first.run_dir == out
        with pytest.raises(pytest.UsageError, match="in use by a running ppconf"):
            Session(_Config(out))
    finally:
        first.close()
    Session(_Config(out)).close()  # free again once the first session ended
    workers = []
    try:
        for name in ("gw0", "gw1"):  # xdist workers sharing --ppconf-out neither clash nor reap each other
            monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
            workers.append(Session(_Config(out)))
        assert [w.run_dir for w in workers] == [out / "gw0", out / "gw1"]
    finally:
        for w in workers:
            w.close()


def test_out_on_an_existing_run_is_refused_and_points_to_resume(tmp_path, capsys):
    run = make_run(tmp_path / "run", GOOD, {"suite": "families-cpu"})
    before = (run / "run.json").read_text(), (run / "results.jsonl").read_text()
    one_error(capsys, main(["run", "--suite", "families-cpu", "--out", str(run)]), f"--resume {run}")
    assert ((run / "run.json").read_text(), (run / "results.jsonl").read_text()) == before


def test_log_excerpts_resolve_in_the_run_and_nothing_outside_is_read(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "logs" / "k").mkdir(parents=True)
    (run / "logs" / "k" / "api.log").write_text("INFO starting\nValueError: inside-the-run\n")
    outside = tmp_path / "system.conf"
    outside.write_text("root:x:0:0:outside-the-run\n")
    (run / "logs" / "k" / "sneaky.log").symlink_to(outside)
    cause = {"log": "api", "line": 2, "text": "ValueError: inside-the-run"}
    records = [
        record(
            "qwen3-tiny/pp2-tp1-mp/auto/none",
            "FAIL",
            observation={"root_cause": cause, "logs": {"api": "logs/k/api.log"}},
        )
    ]
    for i, ref in enumerate([str(outside), "../system.conf", "logs/k/sneaky.log"]):
        records.append(
            record(
                f"qwen3-tiny/pp2-tp1-mp/auto/x{i}",
                "FAIL",
                features=[f"x{i}"],
                observation={"root_cause": dict(cause, line=1), "logs": {"api": ref}},
            )
        )
    make_run(run, records)
    monkeypatch.chdir(tmp_path.parent)  # reported from elsewhere than where it ran
    report_run(run, tmp_path / "out")
    html = (tmp_path / "out" / "support.html").read_text()
    assert "ValueError: inside-the-run" in html.split("root cause — api:2")[1]
    assert "outside-the-run" not in html
    # each refused log says so, in its excerpt and where the full logs are linked, not an empty block
    assert html.count("in the run directory") == 6
    assert html.count(">api</a>") == 1  # only the log inside the run is linked


def test_log_refs_are_relative_to_the_run(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "smoke"
    (run / "logs" / "k").mkdir(parents=True)
    (run / "logs" / "k" / "a.log").write_text("x\n")
    assert results.log_ref(run, run / "logs" / "k" / "a.log") == "logs/k/a.log"
    assert results.log_path(run, "logs/k/a.log") == (run / "logs" / "k" / "a.log").resolve()
    # an older record names it from where ppconf ran; found wherever the run now is
    moved = tmp_path / "archive" / "smoke"
    moved.parent.mkdir()
    run.rename(moved)
    assert results.log_path(moved, "runs/smoke/logs/k/a.log") == (moved / "logs" / "k" / "a.log").resolve()
    assert results.log_path(moved, "logs/k/missing.log") is None
    assert results.log_path(run, "../../etc/passwd") is None and results.log_path(run, "/etc/passwd") is None


def test_json_is_written_whole_or_not_at_all(tmp_path):
    from harness import safe_write

    path = tmp_path / "live.json"
    safe_write.write_json(path, [{"pgid": 1}])
    safe_write.write_json(path, [{"pgid": 2}])
    assert json.loads(path.read_text()) == [{"pgid": 2}]
    assert sorted(p.name for p in tmp_path.iterdir()) == [safe_write.MANIFEST, "live.json"]


# ---- clean errors instead of tracebacks -------------------------------------------------------

MALFORMED = {
    "missing family": lambda r: {k: v for k, v in r.items() if k != "family"},
    "case as a list": lambda r: dict(r, case=["a", "b"]),
    "bad started date": lambda r: dict(r, started="yesterday"),
    "bad until date": lambda r: dict(r, expectation={"kind": "known-issue", "until": "soon"}),
    "duration as a string": lambda r: dict(r, duration_s="10"),
    "features null": lambda r: dict(r, features=None),
    "a list, not a record": lambda r: [r],
    "observation.logs not a map": lambda r: dict(r, observation={"logs": ["a.log"]}),
}


@pytest.mark.parametrize("how", MALFORMED)
@pytest.mark.parametrize("command", ["report", "diff", "signoff"])
def test_malformed_records_are_one_clean_error(tmp_path, capsys, how, command):
    bad = make_run(tmp_path / "bad", [GOOD[0], MALFORMED[how](dict(GOOD[1]))], {"suite": "smoke-cpu"})
    good = make_run(tmp_path / "good", GOOD, {"suite": "smoke-cpu"})
    argv = {"report": ["report", str(bad)], "diff": ["diff", str(good), str(bad)], "signoff": ["signoff", str(bad)]}
    one_error(capsys, main(argv[command]), "results.jsonl:2")


@pytest.mark.parametrize("command", ["report", "diff", "signoff"])
def test_missing_or_wrong_directories_are_one_clean_error(tmp_path, capsys, command):
    good = make_run(tmp_path / "good", GOOD, {"suite": "smoke-cpu"})
    weird = tmp_path / "weird"
    (weird / "results.jsonl").mkdir(parents=True)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, needle in (
        (tmp_path / "missing", "no such directory"),
        (weird, "is not a file"),
        (afile, "not a directory"),
        (tmp_path, "not a run directory"),
    ):
        argv = {
            "report": ["report", str(target)],
            "diff": ["diff", str(target), str(good)],
            "signoff": ["signoff", str(target)],
        }[command]
        one_error(capsys, main(argv), needle)
    assert not (tmp_path / "missing").exists(), "a report of a missing run must not create it"


def test_bad_select_is_one_clean_error(tmp_path, capsys):
    one_error(capsys, main(["expand", "--suite", "smoke-cpu", "--select", "pp >"]), "--select", "column 5")
    one_error(
        capsys, main(["run", "--suite", "smoke-cpu", "--select", "pp >", "--out", str(tmp_path / "r")]), "--select"
    )
    assert not (tmp_path / "r").exists()


def test_report_out_an_existing_file_and_docs_drift_of_a_missing_file(tmp_path, capsys):
    run = make_run(tmp_path / "run", GOOD, {"suite": "smoke-cpu"})
    (tmp_path / "taken").write_text("keep me")
    one_error(capsys, main(["report", str(run), "--out", str(tmp_path / "taken")]), "not a directory")
    assert (tmp_path / "taken").read_text() == "keep me"
    one_error(capsys, main(["docs-drift", str(tmp_path / "nope.md")]), "nope.md", "no such file")


def test_resume_of_a_corrupt_run_json_or_a_torn_live_json(tmp_path, capsys):
    run = make_run(tmp_path / "run", GOOD)
    (run / "run.json").write_text('{"suite": "smoke-cpu", "pid"')
    one_error(capsys, main(["run", "--resume", str(run)]), "run.json", "not valid JSON")
    (run / "run.json").write_text(json.dumps({"suite": ["smoke-cpu"]}))
    one_error(capsys, main(["run", "--resume", str(run)]), "run.json", "suite")
    (run / "run.json").write_text(json.dumps({"suite": "families-cpu"}))
    (run / "live.json").write_text('[{"node": null, "reach": "local", "pg')
    one_error(capsys, main(["run", "--resume", str(run)]), "live.json", "torn")


def test_the_cli_never_prints_a_traceback_for_a_crafted_run(tmp_path):
    run = make_run(tmp_path / "run", [dict(GOOD[0], duration_s="soon")], {"suite": "smoke-cpu"})
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(run)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ---- writes never follow links; odd files are one clean error ------------------------------------

STACKED = {"versions": {"n1": {"vllm": "0.32.0"}}}


def test_writes_refuse_a_planted_link_and_leave_its_target(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    run = make_run(tmp_path / "run", [record("qwen3-tiny/pp2-tp1-mp/auto/none", **STACKED)], {"suite": "smoke-cpu"})
    (run / "signoff.md").symlink_to(victim)
    (run / "report").mkdir()
    for name in ("support.md", "support.html", "summary.json", "junit.xml"):
        (run / "report" / name).symlink_to(victim)
    for force in ([], ["--force"]):  # --force replaces a file ppconf did not write, never a link
        one_error(capsys, main(["signoff", str(run), *force]), "signoff.md is a symbolic link")
        one_error(capsys, main(["report", str(run), *force]), "support.md is a symbolic link")
    assert victim.read_text() == "keep"
    assert (run / "signoff.md").is_symlink() and (run / "report" / "support.md").is_symlink()
    (run / "run.lock").symlink_to(victim)
    one_error(capsys, main(["run", "--resume", str(run)]), "run.lock", "symbolic link")
    assert victim.read_text() == "keep"


def test_a_report_folder_that_is_a_link_is_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = make_run(tmp_path / "run", [record("c", **STACKED)])
    (run / "report").symlink_to(elsewhere)
    one_error(capsys, main(["report", str(run)]), "report is a symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_a_report_that_is_a_file_or_a_signoff_that_is_a_folder_is_one_error(tmp_path, capsys):
    run = make_run(tmp_path / "run", [record("c", **STACKED)], {"suite": "smoke-cpu"})
    (run / "report").write_text("not a folder")
    one_error(capsys, main(["report", str(run)]), "report exists and is not a directory")
    (run / "signoff.md").mkdir()
    one_error(capsys, main(["signoff", str(run)]), "signoff.md is a directory")


def test_a_lone_surrogate_in_a_record_is_read_as_a_replacement_character(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rec = json.dumps(record("c\udcff", reason="bad \udcff byte", **STACKED))
    assert "\\udcff" in rec
    (run / results.RESULTS).write_text(rec + "\n")
    (run / "run.json").write_text(json.dumps({"suite": "s\udcff"}))
    assert main(["report", str(run)]) == 0
    assert "bad \ufffd byte" in (run / "report" / "support.html").read_text()
    assert main(["signoff", str(run)]) == 1  # NO (the suite is not in the matrices), not a crash
    assert main(["ingest", str(run), "--index", str(tmp_path / "i.sqlite")]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_stage_measured_twice_is_one_error(tmp_path, capsys):
    tuning = {
        "partition": "3,2",
        "by_step_time": {"why": "w"},
        "by_memory": {"why": "m"},
        "stages": [{"stage": 0, "layers": 3}, {"stage": 0, "layers": 2}],
    }
    run = make_run(tmp_path / "run", [record("c", observation={"tuning": tuning}, **STACKED)])
    for command in (["report", str(run)], ["signoff", str(run)], ["ingest", str(run), "--index", str(tmp_path / "i")]):
        one_error(capsys, main(command), "results.jsonl:1", "stage 0 is measured twice")


@pytest.mark.parametrize("column", ["runs.versions", "cases.features", "cases.expectation"])
def test_bad_json_in_the_index_is_one_error(tmp_path, capsys, column):
    import sqlite3

    run = make_run(tmp_path / "run", [record("c", **STACKED)], {"suite": "s", "started": "2026-11-01T00:00:00+00:00"})
    db = tmp_path / "i.sqlite"
    assert main(["ingest", str(run), "--index", str(db)]) == 0
    table, field = column.split(".")
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE {table} SET {field} = '{{torn'")
    conn.close()
    capsys.readouterr()
    one_error(capsys, main(["history", "--index", str(db), "--out", str(tmp_path / "h")]), field, "not JSON")


def test_files_written_whole_get_an_ordinary_files_mode(tmp_path):
    import os
    import stat

    from harness.safe_write import write_text

    path = tmp_path / "report.md"
    write_text(path, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask

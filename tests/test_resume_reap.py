"""A resumed run stops the process groups its killed predecessor left, however the run directory
is named this time (relative, absolute, from another working directory), and forgets them only
once they are gone. Nothing launches vLLM: the "servers" are sleeping process groups carrying the
run's mark, as every launch of a run does."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness import safe_write
from harness.check.serving.launcher import LIVE
from harness.matrix.load import load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun
from runners.reaper import MARKER, group_members

# `sh` starts it in the background (so `setsid` execs in place, keeping the pid) and exits
SPAWN = "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!"


def left_running(mark: str, cwd: Path) -> int:
    """A process group such as a killed ppconf leaves: its own session, the run's mark, and no
    parent waiting for it (the one that started it is gone)."""
    out = subprocess.run(["sh", "-c", SPAWN], cwd=cwd, env={**os.environ, MARKER: mark}, capture_output=True, text=True)
    return int(out.stdout)


def running(pgid: int) -> bool:
    return bool(group_members(pgid))  # a zombie waiting for init to collect it has stopped


def gone(pid: int) -> bool:
    end = time.monotonic() + 15
    while running(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not running(pid)


@pytest.fixture
def group():
    started: list[int] = []

    def start(mark: str, cwd: Path) -> int:
        started.append(left_running(mark, cwd))
        return started[-1]

    yield start
    for pgid in started:
        if running(pgid):
            os.killpg(pgid, signal.SIGKILL)


def resume(run_dir: Path) -> SuiteRun:
    runner = SuiteRun(RunConfig(load_matrix(), "smoke-cpu", load_cluster(None), run_dir, resume=True))
    runner.reap_left_behind()
    return runner


def record_live(run: Path, *groups: dict) -> None:
    safe_write.write_json(run / LIVE, list(groups))  # as the killed run wrote it


@pytest.mark.parametrize("how", ["absolute path", "relative from another directory"])
def test_a_resume_reaps_a_run_first_named_by_a_relative_path(tmp_path, monkeypatch, group, how):
    run = tmp_path / "runs" / "smoke"
    run.mkdir(parents=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    # the killed run was started as `ppconf run --out runs/smoke` from tmp_path
    p = group("runs/smoke", tmp_path)
    record_live(run, {"node": None, "reach": "local", "pgid": p})
    monkeypatch.chdir(other)
    resume(run if how == "absolute path" else Path("..") / "runs" / "smoke")
    assert gone(p), "the killed run's group is still running"
    assert not (run / LIVE).exists()


def test_a_resume_by_a_relative_path_reaps_what_an_absolute_run_left(tmp_path, monkeypatch, group):
    run = tmp_path / "run"
    run.mkdir()
    p = group(str(run), Path("/"))
    record_live(run, {"node": None, "reach": "local", "pgid": p})
    monkeypatch.chdir(tmp_path)
    resume(Path("run"))
    assert gone(p)
    assert not (run / LIVE).exists()


def test_another_runs_groups_are_left_alone(tmp_path, group):
    run, theirs = tmp_path / "run", tmp_path / "run-2"
    run.mkdir()
    p = group(str(theirs), tmp_path)
    record_live(run, {"node": None, "reach": "local", "pgid": p})
    resume(run)
    time.sleep(0.5)
    assert running(p), "a group of another run was stopped"


def test_the_record_stays_while_a_group_could_not_be_stopped(tmp_path, group):
    run = tmp_path / "run"
    run.mkdir()
    p = group(str(run), tmp_path)
    far = {"node": "node-no-longer-in-the-inventory", "reach": "ssh", "pgid": 4242}
    record_live(run, {"node": None, "reach": "local", "pgid": p}, far)
    runner = resume(run)
    assert gone(p)  # what could be stopped was
    assert json.loads((run / LIVE).read_text()) == [far]
    assert runner.launcher.unreaped == [far]  # and the next launch keeps it beside its own groups

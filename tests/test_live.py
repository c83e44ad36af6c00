"""Deadlines and exit detection of a live deployment, with real process trees (no server)."""

import sys
import time

import pytest

from harness.check.serving.live import LiveDeployment as Live
from harness.check.serving.live import free_port
from harness.launch import Deployment, LaunchSpec
from tests.test_local_runner import TREE, group_members


def deployment(code: str, *args: str) -> Deployment:
    launch = LaunchSpec("node0-api", "api", "local", "localhost", (sys.executable, "-c", code, *args), (), free_port())
    return Deployment(("c",), (launch,), "node0-api")


def test_exit_is_seen_within_a_second(tmp_path):
    live = Live(deployment("import sys, time; time.sleep(1.0); sys.exit(3)"), tmp_path, {}, 5)
    live.start()
    try:
        state, elapsed = live.wait_ready(deadline_s=60)
    finally:
        live.stop()
    assert state == "exited" and live.exited() == {"node0-api": 3}
    assert 1.0 <= elapsed < 2.5


@pytest.mark.slow
def test_startup_deadline_then_nothing_left(tmp_path):
    live = Live(deployment(TREE, "600"), tmp_path, {}, 5)
    live.start()
    pgid = live.handles[0].pid
    end = time.monotonic() + 20
    while len(group_members(pgid)) < 3 and time.monotonic() < end:
        time.sleep(0.1)
    state, elapsed = live.wait_ready(deadline_s=1.0)
    assert state == "timeout" and elapsed >= 1.0
    live.stop()
    assert group_members(pgid) == []

"""Teardown of whole process groups, with real process trees (no vLLM needed for this part)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.launch import LaunchSpec
from runners.local import LocalNodeRunner

# A launch that forks a child and a grandchild which ignore SIGTERM, as stubborn workers do.
TREE = textwrap.dedent("""\
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kid = subprocess.Popen([sys.executable, "-c",
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"])
    print("ready", os.getpid(), kid.pid, flush=True)
    time.sleep(int(sys.argv[1]))
    """)


def spec(seconds: int, env=()) -> LaunchSpec:
    return LaunchSpec("n0", "api", "local", "localhost", (sys.executable, "-c", TREE, str(seconds)), tuple(env))


def group_members(pgid: int) -> list[int]:
    """The group's live members. A zombie has exited: an orphan's zombie waits for the host's init
    to collect it, and some inits (a container's or a microVM's) never do."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    rows = (line.split() for line in out.splitlines())
    return [int(p) for p, g, st in rows if int(g) == pgid and not st.startswith("Z")]


def wait_for_tree(handle, n=3, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(group_members(handle.pid)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"tree never grew: {group_members(handle.pid)}")


@pytest.mark.slow
def test_stop_kills_the_whole_group_even_when_it_ignores_sigterm(tmp_path):
    h = LocalNodeRunner().start(spec(600), tmp_path / "n0.log")
    wait_for_tree(h)
    h.stop(grace_s=1.0)
    assert group_members(h.pid) == []


@pytest.mark.slow
def test_leader_exit_leaves_workers_that_stop_still_kills(tmp_path):
    h = LocalNodeRunner().start(spec(1), tmp_path / "n0.log")
    wait_for_tree(h)
    end = time.monotonic() + 20
    while h.returncode() is None and time.monotonic() < end:
        time.sleep(0.1)
    assert h.returncode() == 0
    assert group_members(h.pid), "the orphaned children are still in the group"
    h.stop(grace_s=0.5)
    assert group_members(h.pid) == []


EVIL = ["; rm -rf /tmp/ppconf-canary", "$(touch /tmp/ppconf-pwned)", "`id`", 'it\'s "quoted"', "two\nlines", " "]


def test_shell_metacharacters_in_argv_and_env_arrive_literally(tmp_path):
    code = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['PPCONF_X']]))"
    s = LaunchSpec("n0", "api", "local", "localhost", (sys.executable, "-c", code, *EVIL), (("PPCONF_X", EVIL[1]),))
    h = LocalNodeRunner().start(s, tmp_path / "n0.log")
    h.proc.wait(20)
    h.stop()
    import json

    assert json.loads((tmp_path / "n0.log").read_text()) == [EVIL, EVIL[1]]
    assert not os.path.exists("/tmp/ppconf-pwned")


@pytest.mark.slow
def test_ctrl_c_of_the_driver_tears_the_launch_down(tmp_path):
    """A driver that holds a live launch and gets SIGINT leaves no process behind."""
    driver = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from tests.test_local_runner import spec
        from runners.local import LocalNodeRunner
        from pathlib import Path
        h = LocalNodeRunner().start(spec(600), Path({str(tmp_path)!r}) / "n0.log")
        print(h.pid, flush=True)
        try:
            time.sleep(600)
        finally:
            h.stop(grace_s=1.0)
        """)
    p = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    pgid = int(p.stdout.readline())
    end = time.monotonic() + 20
    while len(group_members(pgid)) < 3 and time.monotonic() < end:
        time.sleep(0.1)
    assert len(group_members(pgid)) >= 3
    p.send_signal(signal.SIGINT)
    p.wait(30)
    assert group_members(pgid) == []


@pytest.mark.slow
def test_sigkill_of_the_driver_still_takes_the_group_down(tmp_path):
    """Nothing can run in a SIGKILLed driver; the guard leading the group does the teardown."""
    driver = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from tests.test_local_runner import spec
        from runners.local import LocalNodeRunner
        from pathlib import Path
        h = LocalNodeRunner().start(spec(600), Path({str(tmp_path)!r}) / "n0.log")
        print(h.pid, flush=True)
        time.sleep(600)
        """)
    p = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    pgid = int(p.stdout.readline())
    end = time.monotonic() + 20
    while len(group_members(pgid)) < 4 and time.monotonic() < end:  # guard, launch, child, grandchild
        time.sleep(0.1)
    assert len(group_members(pgid)) >= 4
    p.kill()
    p.wait(10)
    end = time.monotonic() + 30
    while group_members(pgid) and time.monotonic() < end:
        time.sleep(0.2)
    assert group_members(pgid) == []


def test_set_env_is_sourced_first_and_cannot_override_the_launch_env(tmp_path):
    script = tmp_path / "set env $(x).sh"
    script.write_text("export PPCONF_X=from-script\nexport PPCONF_Y=only-script\n")
    s = LaunchSpec(
        "n0",
        "api",
        "local",
        "localhost",
        (sys.executable, "-c", "import os; print(os.environ['PPCONF_X'], os.environ['PPCONF_Y'])"),
        (("PPCONF_X", "from-launch"),),
        set_env=str(script),
    )
    h = LocalNodeRunner().start(s, tmp_path / "n0.log")
    h.proc.wait(20)
    h.stop()
    assert (tmp_path / "n0.log").read_text().strip() == "from-launch only-script"


def test_set_env_launch_values_never_show_in_the_process_list(tmp_path):
    """The launch's env values (a token) reach the process after set_env, but no argv of the
    guard, bash or the command carries them."""
    script = tmp_path / "set_env.sh"
    script.write_text("export HF_TOKEN=from-script\n")
    token = "hf_planted_0123456789"
    s = LaunchSpec(
        "n0",
        "api",
        "local",
        "localhost",
        (sys.executable, "-c", "import os, time; print(os.environ['HF_TOKEN'], flush=True); time.sleep(30)"),
        (("HF_TOKEN", token), ("PPCONF_Z", "a b\nc")),
        set_env=str(script),
    )
    h = LocalNodeRunner().start(s, tmp_path / "n0.log")
    try:
        deadline = time.monotonic() + 20
        while token not in (tmp_path / "n0.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "n0.log").read_text().strip() == token
        pgid = h.pid
        cmdlines = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getpgid(int(entry)) == pgid:
                        cmdlines.append(open(f"/proc/{entry}/cmdline", "rb").read())
                except (OSError, ProcessLookupError):
                    continue
        assert cmdlines and not any(token.encode() in c for c in cmdlines)
    finally:
        h.stop()

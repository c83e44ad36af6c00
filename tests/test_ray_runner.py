"""The Ray runner against a real two-node Ray cluster on this host (tests/raycluster.py): launches
run on their node's actor, logs come home, exit status and teardown match the local runner.

The cluster and its drivers live in a network namespace of their own (only loopback); this
process checks the launched processes through /proc and reads the log files directly.
"""

import json
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_ray, pytest.mark.needs_root]

from harness.launch import LaunchSpec, Payload  # noqa: E402
from tests.raycluster import ClusterError, RayCluster  # noqa: E402
from tests.test_local_runner import TREE, group_members  # noqa: E402

TICKS = textwrap.dedent("""\
    import sys, time
    for i in range(int(sys.argv[1])):
        print("tick", i, flush=True)
        time.sleep(0.1)
    time.sleep(600)
    """)


def launch(name: str, node: str, *argv: str, env=(), set_env=None) -> LaunchSpec:
    return LaunchSpec(name, "api", node, "127.0.0.1", (sys.executable, *argv), tuple(env), set_env=set_env)


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str, poll: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"{what} within {timeout} s")


def wait_for_tree(pgid: int, n: int = 4) -> None:  # guard, launch, child, grandchild
    wait_until(lambda: len(group_members(pgid)) >= n, 30, f"the launch's tree never grew: {group_members(pgid)}")


def gone(pgid: int, timeout: float = 30.0) -> None:
    wait_until(lambda: not group_members(pgid), timeout, f"group {pgid} still has {group_members(pgid)}", poll=0.2)


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster(("node0", "node1"))
    try:
        c.start()
    except (ClusterError, OSError) as e:
        c.stop()
        # Ray is installed and this is root (the module's needs): a cluster that cannot start fails
        pytest.fail(f"a local Ray cluster did not start: {e}")
    yield c
    c.stop()
    assert not c.pids(), "processes left in the cluster's namespace"


@pytest.fixture(scope="module")
def driver(cluster):
    d = cluster.driver()
    yield d
    d.close()


@pytest.fixture(scope="module")
def node_ids(driver) -> dict[str, str]:
    nodes = driver.call("nodes")["nodes"]
    ids = {name: nid for nid, resources in nodes.items() for name in ("node0", "node1") if name in resources}
    assert len(ids) == 2 and ids["node0"] != ids["node1"], nodes
    return ids


@pytest.mark.parametrize("node", ["node0", "node1"])
def test_launch_runs_under_its_nodes_raylet_and_its_log_streams_home(driver, node_ids, node, tmp_path):
    log = tmp_path / "logs" / f"{node}-api.log"
    info = driver.start(launch(f"{node}-api", node, "-c", TICKS, "30"), log)
    pgid = info["pgid"]
    try:
        assert info["node_id"] == node_ids[node]
        # guard (group leader) <- the node's actor <- that node's raylet, on its own node id
        assert ppid(pgid) == info["actor_pid"]
        raylet = ppid(info["actor_pid"])
        args = cmdline(raylet)
        assert Path(args[0]).name == "raylet" and f"--node_id={node_ids[node]}" in args, args
        assert cmdline(pgid)[1:4] == ["-m", "runners.guard", "--"]
        # the local log grows while the launch still runs
        wait_until(lambda: log.exists() and "tick 3\n" in log.read_text(), 20, "no streamed log line")
        assert driver.call("returncode", name=f"{node}-api")["rc"] is None
        wait_until(lambda: "tick 29\n" in log.read_text(), 20, "the log stopped streaming")
        assert log.read_text().splitlines() == [f"tick {i}" for i in range(30)]
    finally:
        driver.call("stop", name=f"{node}-api", grace_s=5.0)
    assert group_members(pgid) == []


def test_exit_status_is_reported_with_the_whole_log(driver, tmp_path):
    log = tmp_path / "exit.log"
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True); sys.exit(3)"
    info = driver.start(launch("exit3", "node1", "-c", code), log)
    assert driver.call("wait", name="exit3", timeout=30)["rc"] == 3
    # as soon as the status is known, the log holds what the leader wrote
    assert sorted(log.read_text().split()) == ["err", "out"]
    driver.call("stop", name="exit3", grace_s=1.0)
    assert driver.call("returncode", name="exit3")["rc"] == 3
    assert group_members(info["pgid"]) == []
    assert not Path(info["remote_log"]).parent.exists(), "the node-side log directory is removed"


def test_the_nodes_actor_writes_the_payload_first_on_the_launchs_pythonpath(driver, tmp_path):
    code = "import os, ppconf_payload_mod as m; print('GOT', m.VALUE, m.__file__, os.environ['PYTHONPATH'])"
    spec = replace(
        launch("payload", "node1", "-c", code, env=[("PYTHONPATH", "/from/launch")]),
        payload=(Payload("ppconf_payload_mod.py", "VALUE = 'on-node'\n"),),
    )
    info = driver.start(spec, tmp_path / "payload.log")
    assert driver.call("wait", name="payload", timeout=30)["rc"] == 0, (tmp_path / "payload.log").read_text()
    got = next(l for l in (tmp_path / "payload.log").read_text().splitlines() if l.startswith("GOT "))
    _, value, module, pythonpath = got.split(" ")
    directory = str(Path(module).parent)
    # written by the actor into the launch's own directory on its node, beside the node-side log
    assert value == "on-node" and pythonpath == f"{directory}:/from/launch"
    assert Path(directory).parent == Path(info["remote_log"]).parent
    driver.call("stop", name="payload", grace_s=1.0)
    assert not Path(directory).exists(), "the node-side directory goes with the launch"


def test_stop_kills_the_whole_group_even_when_it_ignores_sigterm(driver, tmp_path):
    info = driver.start(launch("tree", "node1", "-c", TREE, "600"), tmp_path / "tree.log")
    pgid = info["pgid"]
    wait_for_tree(pgid)
    wait_until(lambda: "ready" in (tmp_path / "tree.log").read_text(), 20, "no 'ready' line")
    stopped = driver.call("stop", name="tree", grace_s=1.0)
    assert group_members(pgid) == []  # gone when stop() returns
    assert stopped["rc"] is not None and stopped["took_s"] < 20
    driver.call("stop", name="tree", grace_s=1.0)  # a second stop is harmless


def test_argv_env_and_set_env_arrive_literally(driver, tmp_path):
    victim = tmp_path / "x"
    victim.mkdir()
    pwned = tmp_path / "pwned"
    nasty = [
        f"; rm -rf {victim}",
        f"$(touch {pwned})",
        f"`touch {pwned}`",
        "'single' \"double\"",
        "line one\nline two",
        "back\\slash $HOME ${PATH} && || > < | &",
        "",
        "--flag=*",
        " lead and trail ",
    ]
    set_env = tmp_path / "set env; $(touch pwned).sh"
    set_env.write_text("export PPCONF_FROM_SET_ENV='sourced on the node'\n")
    code = textwrap.dedent("""\
        import json, os, sys
        n = int(os.environ["PPCONF_N"])
        print(json.dumps({"argv": sys.argv[1:], "env": [os.environ[f"PPCONF_V{i}"] for i in range(n)],
                          "extra": os.environ["PPCONF_EXTRA"], "set_env": os.environ.get("PPCONF_FROM_SET_ENV"),
                          "omp": os.environ.get("OMP_NUM_THREADS"), "ray_job": os.environ.get("RAY_JOB_ID"),
                          "breakpoint": os.environ.get("PYTHONBREAKPOINT")}), flush=True)
        """)
    env = [(f"PPCONF_V{i}", v) for i, v in enumerate(nasty)] + [("PPCONF_N", str(len(nasty)))]
    log = tmp_path / "literal.log"
    driver.start(
        launch("literal", "node1", "-c", code, *nasty, env=env, set_env=str(set_env)),
        log,
        extra_env={"PPCONF_EXTRA": f"$(touch {pwned}) ; x\n'y'"},
    )
    assert driver.call("wait", name="literal", timeout=30)["rc"] == 0
    driver.call("stop", name="literal", grace_s=1.0)
    seen = json.loads(log.read_text())
    assert seen["argv"] == nasty
    assert seen["env"] == nasty
    assert seen["extra"] == f"$(touch {pwned}) ; x\n'y'"
    assert seen["set_env"] == "sourced on the node"
    # the node's own environment, not what Ray adds to its workers
    assert seen["omp"] == os.environ.get("OMP_NUM_THREADS")
    assert seen["ray_job"] is None and seen["breakpoint"] == os.environ.get("PYTHONBREAKPOINT")
    assert victim.is_dir() and not pwned.exists() and not (Path.cwd() / "pwned").exists()


def test_a_dead_actor_takes_its_launch_down_and_is_reported(driver, tmp_path):
    """Ray SIGKILLs a dying worker's children; the guard alone would die and orphan the launch."""
    log = tmp_path / "lost.log"
    info = driver.start(launch("lost", "node1", "-c", TREE, "600"), log)
    pgid = info["pgid"]
    wait_for_tree(pgid)
    driver.call("kill_actor", name="lost")
    gone(pgid)
    assert driver.call("wait", name="lost", timeout=30)["rc"] == -1  # ACTOR_LOST
    assert "ppconf: the Ray actor running lost on node node1" in log.read_text()
    driver.call("stop", name="lost", grace_s=1.0)


def test_sigkill_of_the_driver_takes_the_launch_down(cluster, tmp_path):
    """Nothing runs in a SIGKILLed driver: Ray ends its job's actors, the guard ends the group."""
    d = cluster.driver()
    try:
        info = d.start(launch("orphan", "node1", "-c", TREE, "600"), tmp_path / "orphan.log")
        pgid, actor = info["pgid"], info["actor_pid"]
        wait_for_tree(pgid)
        os.kill(d.pid, signal.SIGKILL)
        d.proc.wait(10)
        t0 = time.monotonic()
        wait_until(lambda: not alive(actor), 30, "the driver's actor outlived its job")
        actor_s = time.monotonic() - t0
        gone(pgid, timeout=30 - actor_s)  # the guard's grace: this tree ignores SIGTERM
        print(f"actor ended {actor_s:.1f} s after the driver's SIGKILL, the group {time.monotonic() - t0:.1f} s")
    finally:
        d.close()


def test_nodes_resolve_by_resource_or_by_node_ids(driver, node_ids, tmp_path):
    with pytest.raises(ClusterError, match="no alive Ray node holds a resource named 'node9'"):
        driver.start(launch("nowhere", "node9", "-c", "pass"), tmp_path / "nowhere.log")
    info = driver.start(
        launch("mapped", "gpu-box-7", "-c", "print('hi')"),
        tmp_path / "mapped.log",
        node_ids={"gpu-box-7": node_ids["node1"]},
    )
    assert info["node_id"] == node_ids["node1"]
    assert driver.call("wait", name="mapped", timeout=30)["rc"] == 0
    driver.call("stop", name="mapped", grace_s=1.0)
    assert (tmp_path / "mapped.log").read_text() == "hi\n"


def test_the_clusters_traffic_stays_on_loopback(cluster, driver, node_ids):
    """The namespace has only lo, and every TCP connection of the cluster is a loopback one."""
    links = subprocess.run(cluster.ns(["ip", "-o", "link"]), capture_output=True, text=True, check=True).stdout
    assert [l.split(":")[1].strip() for l in links.splitlines()] == ["lo"]
    ss = subprocess.run(cluster.ns(["ss", "-Htn"]), capture_output=True, text=True, check=True).stdout
    peers = [line.split()[4] for line in ss.splitlines()]
    assert peers, "the cluster has connections"
    assert all(p.rsplit(":", 1)[0] in ("127.0.0.1", "[::1]", "[::ffff:127.0.0.1]") for p in peers), peers


def test_short_programs_run_on_the_named_node_with_its_environment(driver, node_ids):
    """What version probes and reaping use: a task pinned to the node, the raylet's environment."""
    from harness.target.versions import ISA_FLAGS, ISA_MODEL, SCRIPT, isa

    code = textwrap.dedent("""\
        import json, os
        worker = os.getppid()
        raylet = open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[1]
        args = open(f"/proc/{raylet}/cmdline").read().split("\\0")
        node_id = next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
        print(json.dumps([node_id, "RAY_JOB_ID" in os.environ]))
        """)
    outs = driver.call(
        "run_commands",
        calls=[
            ["node0", [sys.executable, "-c", code]],
            ["node1", [sys.executable, "-c", code]],
            ["node1", [sys.executable, "-c", SCRIPT]],
            ["node9", [sys.executable, "-c", code]],
        ],
    )["outputs"]
    assert [json.loads(o["stdout"]) for o in outs[:2]] == [[node_ids["node0"], False], [node_ids["node1"], False]]
    versions = json.loads(outs[2]["stdout"])
    assert versions["torch"] and versions["python"] == sys.version.split()[0]
    # the same one probe names the node's machine (here: this host's)
    assert versions["isa"] == isa(Path("/proc/cpuinfo").read_text(), platform.machine(), ISA_FLAGS, ISA_MODEL)
    assert outs[3]["returncode"] is None and "no alive Ray node holds a resource named 'node9'" in outs[3]["error"]


def test_a_resumed_run_reaps_only_its_own_groups_on_a_ray_node(driver, tmp_path):
    from runners.leftovers import REAPER_SOURCE
    from runners.reaper import MARKER

    run_dir = str(tmp_path / "run")
    mine = driver.start(launch("mine", "node1", "-c", TREE, "600"), tmp_path / "mine.log", {MARKER: run_dir})["pgid"]
    other = driver.start(
        launch("other", "node1", "-c", TREE, "600"), tmp_path / "other.log", {MARKER: str(tmp_path / "another-run")}
    )["pgid"]
    try:
        wait_for_tree(mine)
        wait_for_tree(other)
        out = driver.call(
            "run_commands", calls=[["node1", [sys.executable, "-c", REAPER_SOURCE, run_dir, str(mine), str(other)]]]
        )["outputs"][0]
        assert out["returncode"] == 0, out
        assert json.loads(out["stdout"]) == [mine]
        gone(mine, timeout=5)
        assert group_members(other), "a group of another run was signalled"
    finally:
        driver.call("stop", name="mine", grace_s=1.0)
        driver.call("stop", name="other", grace_s=1.0)
    gone(other)

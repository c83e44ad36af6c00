"""The SSH runner against a real OpenSSH server on 127.0.0.1 (tests/sshd.py), with real remote
process trees. The "remote" is this host, so what is left behind is checked with ps."""

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from harness.launch import LaunchSpec, Payload
from harness.plan.cluster import Node
from runners.ssh import SshError, SshNodeRunner, SshOptions, SshTarget, env_block, reachable, remote_command, ssh_argv
from tests.sshd import Sshd
from tests.test_local_runner import TREE, group_members

REPO = Path(__file__).resolve().parent.parent
# Every launch of this module carries this in its environment: at the end, nothing with it may live.
MARK = "PPCONF_SSH_TEST"
MARK_VALUE = uuid.uuid4().hex


# ---- helpers ---------------------------------------------------------------------------------


def with_args(needle: str) -> list[int]:
    """Processes whose command line contains ``needle`` (the launch's token)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(l.split(None, 1)[0]) for l in out.splitlines() if needle in l]


def marked() -> list[int]:
    want = f"{MARK}={MARK_VALUE}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if want in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until(predicate, timeout_s, step=0.1):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def tree(seconds: int, node: str = "remote") -> LaunchSpec:
    return LaunchSpec("n0", "api", node, "127.0.0.1", (sys.executable, "-c", TREE, str(seconds)), ((MARK, MARK_VALUE),))


def python(code: str, *args: str, env=(), set_env=None) -> LaunchSpec:
    return LaunchSpec(
        "n0",
        "api",
        "remote",
        "127.0.0.1",
        (sys.executable, "-c", code, *args),
        ((MARK, MARK_VALUE), *env),
        set_env=set_env,
    )


def control_path(tag: str) -> str:
    """Short: a Unix socket path must stay under 108 bytes, and %C alone is 40."""
    return f"/tmp/ppconf-t{os.getpid()}{tag}-%C"


def end_master(node: Node, opts: SshOptions) -> None:
    argv = ssh_argv(SshTarget.from_node(node), opts)
    subprocess.run([*argv[:-2], "-O", "exit", *argv[-2:]], capture_output=True, timeout=10)


def wait_for_tree(handle, n=3, timeout=20):
    assert wait_until(lambda: len(group_members(handle.pgid)) >= n, timeout), (
        f"tree never grew: {group_members(handle.pgid)}\n{handle.log_path.read_text()}"
    )


def assert_nothing_left(handle):
    assert group_members(handle.pgid) == []
    # the watchdog and the remote shell (they carry the token) end once the session closed
    assert wait_until(lambda: with_args(handle.token) == [], 10), subprocess.run(
        ["ps", "-o", "pid,pgid,args", "-p", ",".join(map(str, with_args(handle.token)))], capture_output=True, text=True
    ).stdout
    assert handle.proc.poll() is not None, "the local ssh client is still running"


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    try:
        server = Sshd.start(tmp_path_factory.mktemp("sshd"))
    except Exception as err:  # noqa: BLE001 - any failure to start is the same failure
        # its tests are marked needs_sshd: this machine can run one, so one that did not start fails
        pytest.fail(f"the throwaway OpenSSH server did not start: {err}")
    yield server
    server.stop()
    left = marked()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes started by the tests were still running: {left}"


@pytest.fixture(scope="module")
def opts(tmp_path_factory, sshd):
    # a control path of the tests' own, so no other ppconf shares (or ends) these masters
    o = SshOptions(
        state=tmp_path_factory.mktemp("state"), control_path=control_path(""), control_persist_s=30, connect_timeout_s=5
    )
    yield o
    # the drivers' runners are never closed (they are killed): end the master they shared
    end_master(
        Node(
            name="remote",
            host=sshd.host,
            address=sshd.host,
            devices=[0],
            reach="ssh",
            ssh={"user": sshd.user, "port": sshd.port, "key": str(sshd.client_key)},
        ),
        o,
    )


@pytest.fixture
def node(sshd) -> Node:
    return Node(
        name="remote",
        host=sshd.host,
        address=sshd.host,
        devices=[0],
        reach="ssh",
        ssh={"user": sshd.user, "port": sshd.port, "key": str(sshd.client_key)},
    )


@pytest.fixture
def runner(node, opts):
    r = SshNodeRunner([node], opts, watchdog_grace_s=2)
    yield r
    r.close()


# ---- the command line ------------------------------------------------------------------------


def test_ssh_options(tmp_path):
    opts = SshOptions(state=tmp_path)
    argv = ssh_argv(SshTarget("node1", "ci", 2222, "~/.ssh/ppconf_ci", ("ProxyJump=bastion",)), opts)
    text = " ".join(argv)
    for want in (
        "BatchMode=yes",
        "StrictHostKeyChecking=accept-new",
        f"UserKnownHostsFile={tmp_path}/ssh/known_hosts",
        "ControlMaster=auto",
        "ControlPath=/tmp/ppconf-ssh-%C",
        "ControlPersist=60",
        "ServerAliveInterval=15",
        "-p 2222",
        "-l ci",
        f"-i {os.path.expanduser('~/.ssh/ppconf_ci')}",
    ):
        assert want in text
    assert argv[:3] == ["ssh", "-o", "ProxyJump=bastion"]  # the inventory's options win
    assert argv[-2:] == ["--", "node1"]
    with pytest.raises(ValueError):
        ssh_argv(SshTarget("-oProxyCommand=x"), opts)


def test_remote_command_quotes_every_word_and_carries_no_environment():
    nasty = "; rm -rf /tmp/x $(touch /tmp/pwned) `id` 'q' \"d\"\nline"
    spec = LaunchSpec(
        "n0",
        "api",
        "n",
        "h",
        ("vllm", "serve", nasty),
        (("V", nasty), ("HF_TOKEN", "hf_s3cret")),
        set_env="/opt/a b;c.sh",
    )
    cmd = remote_command(spec, "ppconf-0123")
    words = shlex.split(cmd.split(" 3<&0 ")[0])
    assert words[words.index("ppconf-launch") + 1 :] == ["ppconf-0123", "10", "/opt/a b;c.sh", "vllm", "serve", nasty]
    assert "hf_s3cret" not in cmd and "V=" not in cmd
    with pytest.raises(ValueError):
        remote_command(LaunchSpec("n0", "api", "n", "h", (), ()), "ppconf-0123")


def test_a_remote_group_whose_members_are_zombies_counts_as_gone():
    """The stop's liveness check on a node: a group whose only member has exited but is not yet
    reaped (a zombie, which ``kill -0`` still finds) is gone; a running one is not; with no ps
    on the node the check says so (status 2) and the stop falls back to ``kill -0``."""
    from runners.ssh import _running_in_group

    zombie = subprocess.Popen(["true"], start_new_session=True)  # not waited for: a zombie once it exits
    running = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert wait_until(lambda: _state(zombie.pid) == "Z", 10)
        assert subprocess.run(["kill", "-s", "0", "--", f"-{zombie.pid}"]).returncode == 0  # kill -0 finds it
        check = {p.pid: subprocess.run(["sh", "-c", _running_in_group(p.pid)]).returncode for p in (zombie, running)}
        assert check == {zombie.pid: 1, running.pid: 0}
        no_ps = subprocess.run(["/bin/sh", "-c", _running_in_group(running.pid)], env={"PATH": "/nonexistent"})
        assert no_ps.returncode == 2
    finally:
        running.kill()
        running.wait()
        zombie.wait()


def _state(pid: int) -> str:
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()[:1]


def test_env_block_is_a_sized_list_of_quoted_exports():
    nasty = "a'b\nc $(x)"
    block = env_block(LaunchSpec("n0", "api", "n", "h", ("x",), (("V", nasty),)), {"W": ""})
    size, body = block.split(b"\n", 1)
    assert int(size) == len(body)
    lines = body.decode()
    assert lines.startswith("export V=") and lines.endswith("export W=''\n")
    assert shlex.split(lines[len("export ") : lines.index("\nexport W")]) == [f"V={nasty}"]
    with pytest.raises(ValueError):
        env_block(LaunchSpec("n0", "api", "n", "h", ("x",), (("A;B", "1"),)))


# ---- against the real sshd -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_stop_kills_the_whole_remote_group_even_when_it_ignores_sigterm(runner, tmp_path):
    h = runner.start(tree(600), tmp_path / "n0.log")
    assert h.pgid and h.pgid != h.proc.pid
    wait_for_tree(h)
    assert h.returncode() is None
    t0 = time.monotonic()
    h.stop(grace_s=1.0)
    assert time.monotonic() - t0 < 10
    assert_nothing_left(h)
    assert h.returncode() == 128 + signal.SIGKILL  # it ignored SIGTERM
    assert h.stop_error is None
    h.stop(grace_s=1.0)  # a second stop is harmless


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_stop_of_a_launch_that_obeys_sigterm_does_not_wait_for_the_grace(runner, tmp_path):
    h = runner.start(python("import time; print('up', flush=True); time.sleep(600)"), tmp_path / "n0.log")
    assert wait_until(lambda: "up" in h.log_path.read_text(), 20)
    t0 = time.monotonic()
    h.stop(grace_s=30)
    assert time.monotonic() - t0 < 10
    assert h.returncode() == 128 + signal.SIGTERM
    assert_nothing_left(h)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_exit_status_and_log_arrive_locally(runner, tmp_path):
    log = tmp_path / "logs" / "n0.log"
    h = runner.start(
        python("import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr); sys.exit(7)"), log
    )
    assert wait_until(lambda: h.returncode() is not None, 20)
    assert h.returncode() == 7
    assert wait_until(lambda: h.proc.poll() is not None, 10)
    assert h.proc.returncode == 7  # ssh itself exits with the remote status
    text = log.read_text()
    assert "to stdout" in text and "to stderr" in text
    h.stop(grace_s=1.0)
    assert_nothing_left(h)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_leader_exit_with_orphaned_workers_is_seen_and_stop_still_kills_them(runner, tmp_path):
    h = runner.start(tree(2), tmp_path / "n0.log")
    wait_for_tree(h)
    assert wait_until(lambda: h.returncode() is not None, 20)
    assert h.returncode() == 0
    assert group_members(h.pgid), "the orphaned workers are still in the group"
    h.stop(grace_s=0.5)
    assert_nothing_left(h)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_shell_metacharacters_arrive_literally(runner, tmp_path):
    pwned, canary = tmp_path / "pwned", tmp_path / "canary"
    canary.mkdir()
    values = [
        f"; rm -rf {canary}",
        f"$(touch {pwned})",
        f"`touch {pwned}`",
        f"' ; touch {pwned}; '",
        f'" ; touch {pwned}; "',
        f"a\nb; touch {pwned}\n",
        "  two  spaces  ",
        f"&& touch {pwned} || touch {pwned} | cat > {pwned}",
        "$HOME ${PATH} ~ * ? [a] \\ \\n %C %h",
        "-rf",
        "",
        "ünïcødé ✓",
    ]
    code = textwrap.dedent("""\
        import json, os, sys
        print("RESULT", json.dumps({"argv": sys.argv[1:],
              "env": [os.environ.get(f"V{i}") for i in range(len(sys.argv) - 1)]}), flush=True)
        """)
    h = runner.start(python(code, *values, env=[(f"V{i}", v) for i, v in enumerate(values)]), tmp_path / "n0.log")
    assert wait_until(lambda: h.returncode() is not None, 20), h.log_path.read_text()
    h.stop(grace_s=1.0)
    assert h.returncode() == 0, h.log_path.read_text()
    line = next(l for l in h.log_path.read_text().splitlines() if l.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert got["argv"] == values
    assert got["env"] == values
    assert not pwned.exists()
    assert canary.is_dir()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_environment_values_are_not_on_any_remote_command_line(runner, tmp_path):
    secret = "hf_" + uuid.uuid4().hex  # as a token in HF_TOKEN would be
    h = runner.start(
        python(
            "import os, time; print('HAS', os.environ['HF_TOKEN'] == os.environ['SECRET_TWIN'], "
            "flush=True); time.sleep(60)",
            env=[("HF_TOKEN", secret)],
        ),
        tmp_path / "n0.log",
        {"SECRET_TWIN": secret},
    )
    try:
        assert wait_until(lambda: "HAS True" in h.log_path.read_text(), 20), h.log_path.read_text()
        # the launch has it in its environment...
        assert any(
            f"HF_TOKEN={secret}".encode() in (Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            for pid in group_members(h.pgid)
        )
        # ...and no process on the node shows it in its arguments: not the login shell, not setsid,
        # not the launch's leader, not the local ssh client
        shown = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if secret.encode() in _cmdline(pid)]
        assert shown == [], subprocess.run(
            ["ps", "-o", "pid,args", "-p", ",".join(map(str, shown))], capture_output=True, text=True
        ).stdout
    finally:
        h.stop(grace_s=1.0)
    assert_nothing_left(h)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_set_env_script_is_sourced_first(runner, tmp_path):
    script = tmp_path / "set env $(x);.sh"  # a path a shell would split and expand
    script.write_text("export FROM_SET_ENV='sourced ok'\nexport OVERRIDDEN=by-script\n")
    h = runner.start(
        python(
            "import os; print('GOT', os.environ['FROM_SET_ENV'], os.environ['OVERRIDDEN'])",
            env=[("OVERRIDDEN", "by-spec")],
            set_env=str(script),
        ),
        tmp_path / "n0.log",
    )
    assert wait_until(lambda: h.returncode() is not None, 20)
    h.stop(grace_s=1.0)
    assert h.returncode() == 0, h.log_path.read_text()
    # as LaunchSpec.shell() prints it: the script first, then the launch's own environment
    assert "GOT sourced ok by-spec" in h.log_path.read_text()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_a_failing_set_env_script_fails_the_launch(runner, tmp_path):
    h = runner.start(python("print('never')", set_env=str(tmp_path / "missing.sh")), tmp_path / "n0.log")
    assert wait_until(lambda: h.returncode() is not None, 20)
    h.stop(grace_s=1.0)
    assert h.returncode() != 0
    assert "never" not in h.log_path.read_text()
    assert "missing.sh" in h.log_path.read_text()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_extra_env_reaches_the_launch(runner, tmp_path):
    h = runner.start(
        python("import os; print('X', os.environ['PPCONF_EXTRA'])"), tmp_path / "n0.log", {"PPCONF_EXTRA": "a b;$(c)"}
    )
    assert wait_until(lambda: h.returncode() is not None, 20)
    h.stop(grace_s=1.0)
    assert "X a b;$(c)" in h.log_path.read_text()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_the_payload_lands_in_the_launchs_own_directory_first_on_its_pythonpath_and_goes_with_it(runner, tmp_path):
    script = tmp_path / "set_env.sh"
    script.write_text("export PYTHONPATH=/from/set_env\n")  # as CANN's set_env adds its own paths
    code = (
        "import os, ppconf_payload_mod as m; d = os.path.dirname(m.__file__); "
        "print('GOT', m.VALUE, os.path.isfile(os.path.join(d, 'x.txt')), m.__file__, os.environ['PYTHONPATH'])"
    )
    spec = replace(
        python(code, set_env=str(script)),
        payload=(Payload("ppconf_payload_mod.py", "VALUE = 'a b;$(c)'\n" + "# filler\n" * 2000), Payload("x.txt", "")),
    )
    h = runner.start(spec, tmp_path / "n0.log")
    assert wait_until(lambda: h.returncode() is not None, 20)
    assert h.returncode() == 0, h.log_path.read_text()
    got = next(l for l in h.log_path.read_text().splitlines() if l.startswith("GOT "))
    value, empty_file, module, pythonpath = got[len("GOT ") :].rsplit(" ", 3)
    directory = os.path.dirname(module)
    assert value == "a b;$(c)" and empty_file == "True" and pythonpath == f"{directory}:/from/set_env"
    assert os.path.basename(directory).startswith("ppconf-launch.")
    h.stop(grace_s=1.0)
    assert wait_until(lambda: not os.path.exists(directory), 10), "the payload directory outlived its launch"
    assert_nothing_left(h)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_reachable(node, opts, sshd, tmp_path):
    assert reachable(node, 5, opts) is None
    assert (opts.known_hosts).read_text().strip(), "the host key is pinned in ppconf's own known_hosts"
    assert reachable(Node(name="l", host="localhost", address="127.0.0.1", devices=[0]), 5, opts) is None


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_unreachable_host_gives_a_clear_error_quickly(node, opts, sshd, tmp_path):
    from tests.sshd import free_port

    closed = node.model_copy(update={"ssh": node.ssh.model_copy(update={"port": free_port()})})
    t0 = time.monotonic()
    why = reachable(closed, 5, opts)
    assert time.monotonic() - t0 < 5
    assert why and "cannot reach root@127.0.0.1" in why and "refused" in why.lower()

    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong_key = node.model_copy(update={"ssh": node.ssh.model_copy(update={"key": str(other)})})
    # not through the tests' control master, which would let any key in
    fresh = SshOptions(state=opts.state, control_path=control_path("u"), connect_timeout_s=5)
    t0 = time.monotonic()
    why = reachable(wrong_key, 5, fresh)
    assert time.monotonic() - t0 < 5
    assert why and "Permission denied" in why

    missing = node.model_copy(update={"ssh": node.ssh.model_copy(update={"key": str(tmp_path / "nope")})})
    assert "key file not found" in reachable(missing, 5, opts)

    # no answer at all (a TEST-NET-1 address, RFC 5737): an error within the timeout, whatever the network does
    t0 = time.monotonic()
    silent = node.model_copy(update={"host": "192.0.2.1"})
    why = reachable(silent, 2, fresh)
    assert time.monotonic() - t0 < 5
    assert why and "cannot reach root@192.0.2.1" in why
    end_master(node, fresh)

    # a launch on a node that refuses: SshError with ssh's own message, quickly, nothing left
    r = SshNodeRunner([closed], opts)
    t0 = time.monotonic()
    with pytest.raises(SshError, match="refused"):
        r.start(tree(600), tmp_path / "n0.log")
    assert time.monotonic() - t0 < 5
    assert "refused" in (tmp_path / "n0.log").read_text().lower()
    r.close()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_known_hosts_live_in_ppconfs_state_dir(node, tmp_path, sshd):
    home_known = Path.home() / ".ssh" / "known_hosts"
    before = home_known.read_bytes() if home_known.exists() else None
    opts = SshOptions(state=tmp_path / "state", control_path=control_path("k"))
    assert reachable(node, 5, opts) is None
    known = (tmp_path / "state" / "ssh" / "known_hosts").read_text()
    host_pub = Path(f"{sshd.host_key}.pub").read_text().split()[1]
    assert host_pub in known
    assert (home_known.read_bytes() if home_known.exists() else None) == before
    end_master(node, opts)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_connections_are_reused_through_one_control_master(runner, node, opts, tmp_path):
    handles = [runner.start(python("import time; time.sleep(600)"), tmp_path / f"n{i}.log") for i in range(3)]
    argv = ssh_argv(SshTarget.from_node(node), opts)
    check = subprocess.run([*argv[:-2], "-O", "check", *argv[-2:]], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert len({h.pgid for h in handles}) == 3  # each launch its own group
    for h in handles:
        h.stop(grace_s=1.0)
        assert_nothing_left(h)


DRIVER = textwrap.dedent("""\
    import json, sys, time
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from harness.plan.cluster import Node
    from runners.ssh import SshOptions, SshNodeRunner
    from tests.test_ssh_runner import tree
    import tests.test_ssh_runner as t
    t.MARK_VALUE = {mark!r}
    node = Node.model_validate(json.loads({node!r}))
    opts = SshOptions(state=Path({state!r}), control_path={control!r}, connect_timeout_s=5)
    runner = SshNodeRunner([node], opts, watchdog_grace_s=2)
    h = runner.start(tree(600), Path({log!r}))
    print(h.pgid, h.proc.pid, h.token, flush=True)
    try:
        time.sleep(600)
    finally:
        h.stop(grace_s=1.0)
        print("stopped", flush=True)
    """)


def driver(node, opts, tmp_path) -> subprocess.Popen:
    code = DRIVER.format(
        repo=str(REPO),
        mark=MARK_VALUE,
        node=node.model_dump_json(),
        state=str(opts.state),
        control=opts.control_path,
        log=str(tmp_path / "n0.log"),
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_ctrl_c_of_the_driver_tears_the_remote_launch_down(node, opts, tmp_path):
    p = driver(node, opts, tmp_path)
    try:
        pgid, client, token = p.stdout.readline().split()
        pgid, client = int(pgid), int(client)
        assert wait_until(lambda: len(group_members(pgid)) >= 3, 20)
        p.send_signal(signal.SIGINT)
        p.wait(30)
        assert "stopped" in p.stdout.read()
        assert group_members(pgid) == []
        assert not Path(f"/proc/{client}").exists(), "the local ssh client is still running"
        assert wait_until(lambda: with_args(token) == [], 10)
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_sigkill_of_the_driver_still_takes_the_remote_group_down(node, opts, tmp_path):
    """No finally runs: the remote watchdog sees the session's stdin close and ends the group."""
    p = driver(node, opts, tmp_path)
    try:
        pgid, client, token = p.stdout.readline().split()
        pgid, client = int(pgid), int(client)
        assert wait_until(lambda: len(group_members(pgid)) >= 3, 20)
        p.kill()
        p.wait(10)
        # SIGTERM (ignored by the tree), then SIGKILL after the watchdog's grace of 2 s
        assert wait_until(lambda: group_members(pgid) == [], 15), group_members(pgid)
        assert wait_until(lambda: not Path(f"/proc/{client}").exists(), 10), "the local ssh client is still running"
        assert wait_until(lambda: with_args(token) == [], 10)
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_lost_connection_takes_the_group_down_and_stop_says_so(opts, tmp_path):
    """The node's sshd dies under a live launch: the session closes, the watchdog ends the group,
    and stop() returns promptly with the reason instead of hanging on a dead node."""
    server = Sshd.start(tmp_path / "sshd2")
    try:
        node = Node(
            name="remote",
            host=server.host,
            address=server.host,
            devices=[0],
            reach="ssh",
            ssh={"user": server.user, "port": server.port, "key": str(server.client_key)},
        )
        runner = SshNodeRunner(
            [node],
            SshOptions(state=opts.state, control_path=control_path("l"), connect_timeout_s=3),
            watchdog_grace_s=1,
        )
        h = runner.start(tree(600), tmp_path / "n0.log")
        wait_for_tree(h)
        members = group_members(h.pgid)
        server.crash()  # sshd only: the launch's own processes are left running
        assert all(Path(f"/proc/{p}").exists() for p in members)
        # SIGTERM (ignored by the tree), then SIGKILL after the watchdog's grace of 1 s
        assert wait_until(lambda: group_members(h.pgid) == [], 15), group_members(h.pgid)
        t0 = time.monotonic()
        h.stop(grace_s=5)
        assert time.monotonic() - t0 < 15
        assert h.stop_error and "SIGTERM could not be sent" in h.stop_error
        assert "could not be sent" in h.log_path.read_text()
        assert h.proc.poll() is not None
        runner.close()
    finally:
        server.stop()


# ---- what a killed ppconf leaves on a node, and probes -----------------------------------------


def _orphan(h) -> None:
    """Leave the launch's group running as a ppconf killed at the worst moment would: its remote
    watchdog is gone too (say the node was cut off while the session closed), then the client."""
    watchdogs = [
        pid
        for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
        if b"\0ppconf-watchdog\0" + h.token.encode() + b"\0" in _cmdline(pid)
    ]
    assert watchdogs, "no watchdog found for the launch"
    for pid in watchdogs:
        os.kill(pid, signal.SIGKILL)
    h.proc.kill()
    h.proc.wait(10)


def _ssh_cluster(node):
    from harness.plan.cluster import Cluster

    return Cluster(name="ssh-test", platform="cpu", nodes=[node.model_copy(update={"python": sys.executable})])


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_a_resumed_run_reaps_only_its_own_groups_left_on_an_ssh_node(node, runner, tmp_path, monkeypatch):
    from runners.leftovers import reap_left_behind
    from runners.reaper import MARKER

    monkeypatch.setenv("PPCONF_STATE", str(tmp_path / "state"))
    run_dir = tmp_path / "run"
    mine = runner.start(tree(600), tmp_path / "mine.log", {MARKER: str(run_dir)})
    other = runner.start(tree(600), tmp_path / "other.log", {MARKER: str(tmp_path / "another-run")})
    try:
        wait_for_tree(mine)
        wait_for_tree(other)
        _orphan(mine)
        _orphan(other)
        time.sleep(3)  # longer than the watchdogs' grace: nothing else is taking these groups down
        assert group_members(mine.pgid) and group_members(other.pgid)
        reaped, problems = reap_left_behind(
            run_dir,
            _ssh_cluster(node),
            [
                {"node": "remote", "reach": "ssh", "pgid": mine.pgid},
                {"node": "remote", "reach": "ssh", "pgid": other.pgid},
            ],
        )
        assert group_members(mine.pgid) == []
        assert group_members(other.pgid), "a group of another run was signalled"
        assert reaped == [mine.pgid] and problems == []
    finally:
        for pgid in (mine.pgid, other.pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert wait_until(lambda: not group_members(other.pgid), 10)


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_versions_are_probed_on_an_ssh_node_by_its_own_python(node, tmp_path, monkeypatch):
    from harness.check.serving.stack import probe_versions as probe
    from harness.plan.cluster import local_cluster

    monkeypatch.setenv("PPCONF_STATE", str(tmp_path / "state"))
    here = probe(local_cluster())["local"]
    assert here.get("torch") and here.get("python")
    assert probe(_ssh_cluster(node)) == {"remote": here}
    gone = Node(
        name="gone",
        host="127.0.0.1",
        address="127.0.0.1",
        devices=[0],
        reach="ssh",
        ssh={"port": 1, "key": str(node.ssh.key)},
    )
    from harness.plan.cluster import Cluster

    out = probe(Cluster(name="c", platform="cpu", nodes=[gone]), timeout_s=10)
    assert out["gone"]["error"].startswith("version probe failed on gone: cannot reach")


@pytest.mark.slow
@pytest.mark.needs_root
@pytest.mark.needs_sshd
def test_hidden_layers_are_read_from_the_checkpoint_on_the_first_node(node, tmp_path, monkeypatch):
    import harness.target.model_config as mc
    from harness.matrix.schema import Variant

    monkeypatch.setenv("PPCONF_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(mc, "_local_config", lambda model: None)  # the driver holds no checkpoints
    ckpt = tmp_path / "Kimi K3 $(id)"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 61}}))
    from harness.check.serving.stack import layer_counts

    counts = layer_counts(_ssh_cluster(node))
    v = Variant(architecture="KimiK3ForConditionalGeneration", supports_pp=True, model=str(ckpt))
    assert counts(v) == 61
    assert counts.where[str(ckpt)] == f"{ckpt}/config.json on node remote"
    missing = Variant(architecture="X", supports_pp=True, model=str(tmp_path / "missing"))
    assert counts(missing) is None

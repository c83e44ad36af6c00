"""The SSH runner: each launch is its own process group on a remote node, reached with OpenSSH.

Same protocol and teardown guarantee as the local runner (``runners.local``): ``start`` runs one
LaunchSpec on its node and streams its output into a local log file; ``stop`` takes the launch's
whole remote process group down (SIGTERM, then SIGKILL after the grace period) and ends the
local ``ssh`` client, so nothing the launch started is left on either side.

How a launch runs (see ``remote_command``): the remote login shell runs

    setsid -w sh -c INNER ppconf-launch TOKEN GRACE [SET_ENV] ARGV... 3<&0 </dev/null 2>&1;
    s=$?; echo "TOKEN exit=$s"; exit $s

where INNER, a constant script, prints ``TOKEN pgid=$$`` first (setsid made it the leader of a
new session and process group, so ``$$`` is the group id ``stop`` signals), reads the launch's
environment and the launch's payload files from the session's stdin (see ``env_block`` and
``payload_block``; the files go into a fresh directory under the node's temp dir, which the
watchdog removes once the group is gone), starts the watchdog, sources the node's set_env script
when there is one, exports the environment, puts the payload directory first on PYTHONPATH and
``exec``s ARGV. Every word taken
from the launch (argv elements, the set_env path) travels as a single shlex-quoted positional
argument: nothing from the matrix is ever parsed by a shell. Environment values never appear on
a command line, so the node's process list (``ps``, /proc/*/cmdline) does not show them: tokens
and other secrets stay in the environment of the launch's own processes.

Why the markers: the local ``ssh`` exits with the remote status only once every process holding
the session's output has gone, and vLLM's workers may outlive their leader; ``returncode()``
reads the leader's status from the ``TOKEN exit=N`` line as soon as the leader exits, as the
local runner reports its leader's exit.

The watchdog covers what a ``finally`` cannot: the local ssh client's stdin is a pipe that only
this process holds open. If ppconf dies by any means (even SIGKILL), or the connection drops,
the remote side reads EOF there and the watchdog — in its own session, outside the group —
sends SIGTERM to the group, then SIGKILL after the grace period.

Connections are reused through an OpenSSH control master (ControlMaster=auto, ControlPersist);
``SshNodeRunner.close()`` ends the masters it used. Host keys are accepted on first use and pinned
in ppconf's own known_hosts file (``state_dir()/ssh/known_hosts``), never in ``~/.ssh``.

Remote requirements: a POSIX ``sh``, ``setsid`` (util-linux), ``dd``, ``cat``, ``sleep``, and
``bash`` when the node has a set_env script (it is sourced with bash, as the local runner does).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import safe_write
from harness.launch import LaunchSpec
from harness.plan.cluster import Cluster, Node
from runners.errors import InfrastructureError
from runners.output import NodeOutput
from runners.protocol import NodeRunner

# Short, so the socket path stays far below the 108-byte limit of a Unix socket path.
DEFAULT_CONTROL_PATH = "/tmp/ppconf-ssh-%C"


def _running_in_group(pgid: int) -> str:
    """A command (built from an integer only) exiting 0 when a process of group ``pgid`` runs
    and is not a zombie, 1 when none does, 2 when ps cannot list the node's processes."""
    return (
        "out=$(ps -e -o pgid= -o stat= 2>/dev/null) || exit 2; "
        f"printf '%s\\n' \"$out\" | awk -v g={int(pgid)} '$1 == g && $2 !~ /^Z/ {{alive = 1}} END {{exit !alive}}'"
    )


PGID_TIMEOUT_S = 60.0  # how long start() waits for the remote group id after connecting
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class SshError(InfrastructureError):
    """The launch could not be started on its node (the node, not the system under test)."""


def state_dir() -> Path:
    """ppconf's own state directory: $PPCONF_STATE, else $XDG_STATE_HOME/ppconf, else
    ~/.local/state/ppconf."""
    if os.environ.get("PPCONF_STATE"):
        return Path(os.environ["PPCONF_STATE"])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "ppconf"


# --------------------------------------------------------------------------------------------
# How to reach a node


@dataclass(frozen=True)
class SshTarget:
    """Where and as whom to connect: the node's ``host`` and its inventory ``ssh`` block."""

    host: str
    user: str | None = None
    port: int = 22
    key: str | None = None
    options: tuple[str, ...] = ()  # ssh_config options, "Name=value", each passed as -o

    @classmethod
    def from_node(cls, node: Node) -> SshTarget:
        s = node.ssh
        if s is None:
            return cls(node.host)
        return cls(node.host, s.user, s.port, s.key, tuple(s.options))

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


@dataclass(frozen=True)
class SshOptions:
    """Client settings shared by every connection a runner makes."""

    state: Path | None = None  # default: state_dir()
    control_path: str = DEFAULT_CONTROL_PATH
    control_persist_s: int = 60
    connect_timeout_s: float = 10.0
    server_alive_interval_s: int = 15
    server_alive_count: int = 3

    @property
    def known_hosts(self) -> Path:
        return (self.state or state_dir()) / "ssh" / "known_hosts"


def ssh_argv(
    target: SshTarget, opts: SshOptions = SshOptions(), *, connect_timeout_s: float | None = None
) -> list[str]:
    """``ssh`` and every option for ``target``, ending with ``-- HOST``; append the remote command.

    The inventory's own options come first: OpenSSH keeps the first value it is given, so an
    inventory may override any default below.
    """
    if not target.host or target.host.startswith("-"):
        raise ValueError(f"not an ssh host name: {target.host!r}")
    known = opts.known_hosts
    known.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    timeout = connect_timeout_s if connect_timeout_s is not None else opts.connect_timeout_s
    argv = ["ssh"]
    for option in target.options:
        argv += ["-o", option]
    argv += [
        "-o",
        "BatchMode=yes",  # never prompt: a missing key is an error, not a hang
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        f"UserKnownHostsFile={known}",
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={opts.control_path}",
        "-o",
        f"ControlPersist={opts.control_persist_s}",
        "-o",
        f"ServerAliveInterval={opts.server_alive_interval_s}",
        "-o",
        f"ServerAliveCountMax={opts.server_alive_count}",
        "-o",
        f"ConnectTimeout={max(1, math.ceil(timeout))}",
        "-o",
        "LogLevel=ERROR",  # no "Permanently added ..." lines in the launch logs
        "-T",
        "-p",
        str(target.port),
    ]
    if target.user:
        argv += ["-l", target.user]
    if target.key:
        argv += ["-i", os.path.expanduser(target.key), "-o", "IdentitiesOnly=yes"]
    return [*argv, "--", target.host]


def run_ssh(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    """A short ssh call, outside the terminal's process group (a Ctrl-C meant for ppconf must
    not cut a teardown call in half); None when it did not finish in time."""
    try:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, start_new_session=True
        )
    except subprocess.TimeoutExpired:
        return None


def reachable(node: Node | SshTarget, timeout_s: float = 10.0, opts: SshOptions = SshOptions()) -> str | None:
    """None when the node answers over ssh (log-in and a remote ``true``) within ``timeout_s``;
    else why not, in one line, for an ERROR outcome. Nodes reached locally are always reachable."""
    if isinstance(node, Node):
        if node.reach == "local":
            return None
        target = SshTarget.from_node(node)
    else:
        target = node
    if target.key and not Path(os.path.expanduser(target.key)).is_file():
        return f"cannot reach {target} over ssh: key file not found: {target.key}"
    t0 = time.monotonic()
    try:
        argv = ssh_argv(target, opts, connect_timeout_s=timeout_s) + ["true"]
    except ValueError as err:
        return f"cannot reach {target} over ssh: {err}"
    done = run_ssh(argv, timeout_s)
    if done is None:
        return f"cannot reach {target} over ssh: no answer within {timeout_s:g} s"
    if done.returncode == 0:
        return None
    lines = [l.strip() for l in done.stderr.splitlines() if l.strip()]
    why = lines[-1] if lines else f"ssh exited with status {done.returncode}"
    return f"cannot reach {target} over ssh: {why} (after {time.monotonic() - t0:.1f} s)"


# --------------------------------------------------------------------------------------------
# The remote command

# Stays outside the launch's group (its own session): on EOF of the session's stdin — ppconf
# or its ssh client went away, or stop() closed it — SIGTERM the group, SIGKILL after $3 s, then
# remove the launch's payload directory ($4, made by mktemp for this launch alone; empty: none)
# once nothing of the group is left to read it. $1 token (to recognise it in ps), $2 pgid.
_WATCHDOG = (
    "cat >/dev/null; "
    'if kill -s TERM -- "-$2" 2>/dev/null; then '
    'i=0; while [ "$i" -lt "$(( $3 * 10 ))" ] && kill -s 0 -- "-$2" 2>/dev/null; '
    "do sleep 0.1; i=$((i + 1)); done; "
    'kill -s KILL -- "-$2" 2>/dev/null; fi; '
    '[ -z "$4" ] || rm -rf -- "$4"; exit 0'
)

# Leads the launch's new group. $1 token, $2 watchdog grace; then [set_env], then ARGV.
# fd 3 is the session's stdin: first the environment block (a byte count on a line of its own,
# then that many bytes, read one byte at a time so not a byte more is taken from the stream),
# then the payload block (a file count on a line; per file "SIZE NAME" on a line, then SIZE
# bytes, written into a fresh directory under the node's temp dir), then EOF when ppconf goes
# away, which is the watchdog's cue. The launch itself reads /dev/null.
_INNER_HEAD = (
    'echo "$1 pgid=$$"; '
    'IFS= read -r n <&3 || { echo "ppconf: no environment block on stdin" >&2; exit 125; }; '
    'case "$n" in ""|*[!0-9]*) echo "ppconf: bad environment block size" >&2; exit 125;; esac; '
    'vars=$(dd bs=1 count="$n" <&3 2>/dev/null) || exit 125; '
    'IFS= read -r k <&3 || { echo "ppconf: no payload block on stdin" >&2; exit 125; }; '
    'case "$k" in ""|*[!0-9]*) echo "ppconf: bad payload file count" >&2; exit 125;; esac; '
    "_ppconf_dir=; "
    'if [ "$k" -gt 0 ]; then _ppconf_dir=$(mktemp -d "${TMPDIR:-/tmp}/ppconf-launch.XXXXXX") || exit 125; fi; '
    'while [ "$k" -gt 0 ]; do '
    'IFS=" " read -r size name <&3 || exit 125; '
    'case "$size" in ""|*[!0-9]*) echo "ppconf: bad payload file size" >&2; exit 125;; esac; '
    'case "$name" in ""|.*|*/*) echo "ppconf: bad payload file name" >&2; exit 125;; esac; '
    'dd bs=1 count="$size" of="$_ppconf_dir/$name" <&3 2>/dev/null || exit 125; k=$((k - 1)); done; '
    "setsid sh -c "
    + shlex.quote(_WATCHDOG)
    + ' ppconf-watchdog "$1" "$$" "$2" "$_ppconf_dir" <&3 >/dev/null 2>&1 3<&- & '
    "exec 3<&-; shift 2; "
)
# The payload directory goes first on PYTHONPATH last of all: after set_env and the launch's env
# (its variable name is one a launch's env is unlikely to give, since that env is eval'ed first).
_PREPEND = '{ [ -z "$_ppconf_dir" ] || export PYTHONPATH="$_ppconf_dir${PYTHONPATH:+:$PYTHONPATH}"; } && '
_INNER = _INNER_HEAD + 'eval "$vars" && ' + _PREPEND + 'exec "$@"'
# bash, as the local runner: vendors' set_env scripts (CANN's) are written for it. The script's
# path is $1 while it is sourced, as it is under the local runner; the launch's own environment is
# applied after it, so the script cannot override it.
_INNER_SET_ENV = _INNER_HEAD + 'source "$1" && shift && eval "$vars" && ' + _PREPEND + 'exec "$@"'


def env_block(spec: LaunchSpec, extra_env: Mapping[str, str] | None = None) -> bytes:
    """The launch's environment as the remote side reads it from stdin: the byte count of the
    block on one line, then one ``export NAME=VALUE`` line per variable, each value a single
    shlex-quoted word (the remote shell evaluates the block; names are checked here)."""
    env = {**spec.env_dict(), **(extra_env or {})}
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"launch {spec.name!r}: not an environment variable name: {name!r}")
    body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).encode()
    return f"{len(body)}\n".encode() + body


def payload_block(spec: LaunchSpec) -> bytes:
    """The launch's payload as the remote side reads it from stdin after the environment block:
    the file count on one line, then per file ``SIZE NAME`` on a line and SIZE bytes of content
    (names are plain file names, checked where the payload is made)."""
    out = [f"{len(spec.payload)}\n".encode()]
    for p in spec.payload:
        data = p.content.encode()
        out += [f"{len(data)} {p.name}\n".encode(), data]
    return b"".join(out)


def remote_command(spec: LaunchSpec, token: str, watchdog_grace_s: float = 10.0) -> str:
    """The command string the node's login shell runs for ``spec`` (see the module docstring).

    Only constant text is left unquoted; every argv element and the set_env path is one
    ``shlex.quote``-d word. The environment is not in it: it goes over stdin (``env_block``).
    """
    if not spec.argv:
        raise ValueError(f"launch {spec.name!r} has an empty argv")
    if not re.fullmatch(r"[A-Za-z0-9-]+", token):
        raise ValueError(f"bad token {token!r}")
    words = list(spec.argv)
    if spec.set_env:
        shell, inner, words = "bash", _INNER_SET_ENV, [spec.set_env, *words]
    else:
        shell, inner = "sh", _INNER
    grace = str(max(1, math.ceil(watchdog_grace_s)))
    launch = " ".join(
        shlex.quote(w) for w in ["setsid", "-w", shell, "-c", inner, "ppconf-launch", token, grace, *words]
    )
    # Not the last command of the string, so no shell replaces itself with setsid (which would
    # then lead sshd's process group, fork, and report a signal death as its number).
    return f'{launch} 3<&0 </dev/null 2>&1; s=$?; echo "{token} exit=$s"; exit "$s"'


# --------------------------------------------------------------------------------------------
# Launches


class _Markers:
    """Reads the token's lines from the log as it grows: the remote group id, the leader's status."""

    def __init__(self, path: Path, offset: int, token: str):
        self.path, self.offset = path, offset
        self.pattern = re.compile(re.escape(token.encode()) + rb" (pgid|exit)=(\d+)\n")
        self.tail = b""
        self.found: dict[str, int] = {}

    def scan(self) -> dict[str, int]:
        if "exit" in self.found:
            return self.found
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.found
        if not data:
            return self.found
        self.offset += len(data)
        buf = self.tail + data
        cut = buf.rfind(b"\n") + 1
        for m in self.pattern.finditer(buf, 0, cut):
            self.found.setdefault(m.group(1).decode(), int(m.group(2)))
        self.tail = buf[cut:][-4096:]
        return self.found


@dataclass
class SshHandle:
    spec: LaunchSpec
    log_path: Path
    proc: subprocess.Popen  # the local ssh client; its stdout and stderr are the log file
    target: SshTarget
    opts: SshOptions
    token: str
    markers: _Markers
    started_at: float = field(default_factory=time.monotonic)
    pgid: int | None = None  # the remote process group, once the remote side reported it
    stop_error: str | None = None  # why stop() could not confirm that the remote group is gone

    @property
    def pid(self) -> int:
        """The local ssh client."""
        return self.proc.pid

    def _scan(self) -> dict[str, int]:
        found = self.markers.scan()
        if self.pgid is None and "pgid" in found:
            self.pgid = found["pgid"]
        return found

    def returncode(self) -> int | None:
        """The remote leader's exit status (128+N when signal N ended it) once it exited, else None.
        When the remote side never started, the ssh client's own status (255: ssh failed)."""
        found = self._scan()
        if "exit" in found:
            return found["exit"]
        rc = self.proc.poll()
        if rc is None:
            return None
        found = self._scan()  # the marker may have landed just before the client exited
        return found.get("exit", rc)

    def _wait_pgid(self, timeout_s: float) -> int | None:
        end = time.monotonic() + timeout_s
        while self.pgid is None:
            self._scan()
            if self.pgid is not None or self.proc.poll() is not None:
                self._scan()
                break
            if time.monotonic() > end:
                break
            time.sleep(0.02)
        return self.pgid

    def _remote(self, command: str, timeout_s: float) -> int | None:
        """Runs a constant command (built from integers only) on the node; its status, or None
        when ssh itself failed or did not answer in time."""
        done = run_ssh(ssh_argv(self.target, self.opts) + [command], timeout_s)
        if done is None or done.returncode == 255:
            return None
        return done.returncode

    def _group_alive(self, pgid: int) -> bool | None:
        """Whether a member of the remote group still runs; None when the node did not answer. A
        zombie does not count: it has exited, and its parent on the node (the session's watchdog,
        which ends when the session's stdin closes) reaps it only after the stop."""
        rc = self._remote(_running_in_group(pgid), self.opts.connect_timeout_s + 5)
        if rc in (0, 1):
            return rc == 0
        # no ps on the node (status 2): any member, zombie or not, keeps the group alive
        rc = self._remote(f"kill -s 0 -- -{pgid} 2>/dev/null", self.opts.connect_timeout_s + 5)
        return None if rc is None else rc == 0

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the remote group, wait up to ``grace_s`` for every member to go, then SIGKILL
        it; then end the local ssh client. Safe to call more than once and after the launch exited."""
        pgid = self.pgid if self.pgid is not None else self._wait_pgid(5.0 if self.proc.poll() is None else 0.0)
        problems = []
        if pgid is not None:
            call_s = self.opts.connect_timeout_s + 5
            deadline = time.monotonic() + grace_s
            if self._remote(f"kill -s TERM -- -{pgid} 2>/dev/null", call_s) is None:
                # the node does not answer: one SIGKILL attempt, no polling of a dead connection
                problems.append("SIGTERM could not be sent")
                alive = None
                deadline = 0.0
            else:
                alive = self._group_alive(pgid)
            while alive is not False and time.monotonic() < deadline:
                time.sleep(0.1)
                alive = self._group_alive(pgid)
            if alive is not False and self._remote(f"kill -s KILL -- -{pgid} 2>/dev/null", call_s) is not None:
                end = time.monotonic() + 5
                alive = self._group_alive(pgid)
                while alive is not False and time.monotonic() < end:
                    time.sleep(0.1)
                    alive = self._group_alive(pgid)
            if alive is not False:
                problems.append(
                    f"remote process group {pgid} on {self.target} is "
                    f"{'still alive' if alive else 'in an unknown state (ssh failed)'}"
                )
        # EOF on the session's stdin: the remote watchdog exits (or, if the group id never
        # arrived, takes down whatever started); the client then ends with the session.
        self._close_stdin()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._scan()
        if problems:
            self.stop_error = "; ".join(problems)
            with safe_write.open_stream(self.log_path) as log:
                log.write(f"\nppconf: stop of {self.spec.name}: {self.stop_error}\n".encode())

    def _close_stdin(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


class SshNodeRunner:
    """Starts LaunchSpecs on the nodes of ``nodes`` (a Cluster, Nodes, or a name → Node map),
    found by ``spec.node``; a launch for a node not listed connects to ``spec.host`` with the
    client's defaults."""

    def __init__(
        self,
        nodes: Cluster | Iterable[Node] | Mapping[str, Node] | None = None,
        opts: SshOptions | None = None,
        *,
        watchdog_grace_s: float = 10.0,
        start_timeout_s: float = PGID_TIMEOUT_S,
    ):
        if isinstance(nodes, Cluster):
            nodes = nodes.nodes
        if isinstance(nodes, Mapping):
            self.nodes = dict(nodes)
        else:
            self.nodes = {n.name: n for n in (nodes or [])}
        self.opts = opts or SshOptions()
        self.watchdog_grace_s = watchdog_grace_s
        self.start_timeout_s = start_timeout_s
        self._targets: set[SshTarget] = set()

    @classmethod
    def for_cluster(cls, cluster: Cluster | None) -> SshNodeRunner:
        return cls(cluster)

    def target(self, spec: LaunchSpec) -> SshTarget:
        node = self.nodes.get(spec.node)
        return SshTarget.from_node(node) if node is not None else SshTarget(spec.host)

    def start(self, spec: LaunchSpec, log_path: Path, extra_env: dict[str, str] | None = None) -> SshHandle:
        """Starts ``spec`` and returns once the remote group exists (its id is in ``pgid``).
        Raises SshError when the node could not run it (unreachable, refused, no ``setsid``)."""
        target = self.target(spec)
        token = "ppconf-" + secrets.token_hex(8)
        block = env_block(spec, extra_env) + payload_block(spec)
        argv = ssh_argv(target, self.opts) + [remote_command(spec, token, self.watchdog_grace_s)]
        with safe_write.open_stream(log_path) as log:
            offset = log.seek(0, os.SEEK_END)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,  # held open by this process only: its EOF is the remote watchdog's cue
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for ppconf does not cut the connection
            )
        self._targets.add(target)
        assert proc.stdin is not None  # stdin=subprocess.PIPE
        try:
            proc.stdin.write(block)  # the remote side reads it first; the pipe then stays open
            proc.stdin.flush()
        except OSError:
            pass  # the client is gone already: the wait below reports why
        handle = SshHandle(
            spec=spec,
            log_path=log_path,
            proc=proc,
            target=target,
            opts=self.opts,
            token=token,
            markers=_Markers(log_path, offset, token),
        )
        try:
            pgid = handle._wait_pgid(self.opts.connect_timeout_s + self.start_timeout_s)
        except BaseException:  # Ctrl-C while connecting: take down whatever started
            handle.stop(grace_s=1.0)
            raise
        if pgid is None:
            rc = handle.proc.poll()
            handle.stop(grace_s=1.0)
            why = _last_line(log_path, offset) or (
                f"ssh exited with status {rc}" if rc is not None else "no process group reported"
            )
            raise SshError(f"cannot start {spec.name} on {target} over ssh: {why}")
        return handle

    def run(self, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float) -> list[NodeOutput]:
        return [self._run(node, argv, timeout_s) for node, argv in calls]

    def _run(self, node: Node, argv: Sequence[str], timeout_s: float) -> NodeOutput:
        why = reachable(node, min(timeout_s, self.opts.connect_timeout_s + 5), self.opts)
        if why:
            return NodeOutput(node.name, None, error=why)
        # not added to the masters close() ends: a launch may share the master while it runs
        done = run_ssh(ssh_argv(SshTarget.from_node(node), self.opts) + [shlex.join(argv)], timeout_s)
        if done is None:
            return NodeOutput(node.name, None, error=f"no answer within {timeout_s:g} s")
        if done.returncode == 255:  # ssh's own failure, not the program's
            lines = done.stderr.strip().splitlines()
            return NodeOutput(node.name, None, done.stdout, done.stderr, error=lines[-1] if lines else "ssh failed")
        return NodeOutput(node.name, done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        """Ends the control masters this runner's connections went through."""
        for target in self._targets:
            argv = ssh_argv(target, self.opts)
            run_ssh([*argv[:-2], "-O", "exit", *argv[-2:]], 10)
        self._targets.clear()

    def __enter__(self) -> SshNodeRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


RUNNER: type[NodeRunner] = SshNodeRunner  # what runners.registry starts (mypy checks it keeps the protocol)


def _last_line(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = [l.strip() for l in f.read().decode(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""

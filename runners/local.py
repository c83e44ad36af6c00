"""The local runner: each launch is its own process group on this host, with its own log file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import safe_write
from harness.launch import LaunchSpec
from harness.plan.cluster import Cluster, Node
from runners import payload
from runners.output import NodeOutput
from runners.protocol import NodeRunner
from runners.reaper import group_members


@dataclass
class LocalHandle:
    spec: LaunchSpec
    log_path: Path
    proc: subprocess.Popen
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session: the guard leads the launch's group

    def returncode(self) -> int | None:
        return self.proc.poll()

    def _group_alive(self) -> bool:
        """Whether a member of the group still runs. A zombie does not count: it has exited (its
        ports, memory and devices are free) and waits only to be reaped; a member the guard left
        is reaped by init, which may take seconds."""
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return bool(group_members(self.proc.pid))

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the group, wait up to ``grace_s`` for every member to go, then SIGKILL it.

        The group id is the launched process's pid (start_new_session), so only processes this
        launch started are signalled — even after the leader itself has exited, since vLLM's
        workers stay in the group.
        """
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.proc.poll()  # reap the leader so it does not linger as a zombie
            if not self._group_alive():
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # members re-parented to init are reaped by it, in its own time: wait until none runs
        end = time.monotonic() + 5
        while self._group_alive() and time.monotonic() < end:
            time.sleep(0.05)


_SOURCE_THEN_EXEC = (
    "set_env=$1; n=$2; shift 2; saved=(); "
    'for k in "${@:1:n}"; do saved+=("$k=${!k}"); done; shift "$n"; '
    'source "$set_env" || exit; '
    'for kv in "${saved[@]}"; do export "$kv"; done; '
    'exec "$@"'
)


class LocalNodeRunner:
    @classmethod
    def for_cluster(cls, cluster: Cluster | None) -> LocalNodeRunner:
        return cls()

    def start(self, spec: LaunchSpec, log_path: Path, extra_env: dict[str, str] | None = None) -> LocalHandle:
        env = dict(os.environ)
        env.update(spec.env_dict())
        env.update(extra_env or {})
        argv = list(spec.argv)
        if spec.payload:
            # the launch's own directory, beside its log (under the run's log dir)
            directory = log_path.with_name(f"{log_path.stem}.payload").absolute()
            payload.write(spec, directory)
            argv = payload.on_pythonpath(directory, argv)
        if spec.set_env:
            # The script path, the launch's variable names and argv travel as positional
            # arguments, never inside the -c text. The values stay in the environment (argv is
            # world-readable in the process list): saved before sourcing and re-exported after it,
            # so the script cannot override the launch's own env.
            names = [k for k, _ in spec.env]
            argv = ["bash", "-c", _SOURCE_THEN_EXEC, "ppconf-launch", spec.set_env, str(len(names)), *names, *argv]
        # the guard leads the group and takes it down if ppconf itself dies, even by SIGKILL
        argv = [sys.executable, "-m", "runners.guard", "--", *argv]
        with safe_write.open_stream(log_path) as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() kills exactly this launch
            )
        return LocalHandle(spec=spec, log_path=log_path, proc=proc)

    def run(self, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float) -> list[NodeOutput]:
        return [_run(node, list(argv), timeout_s) for node, argv in calls]

    def close(self) -> None:
        pass


def _run(node: Node, argv: list[str], timeout_s: float) -> NodeOutput:
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, start_new_session=True
        )
    except subprocess.TimeoutExpired:
        return NodeOutput(node.name, None, error=f"no answer within {timeout_s:g} s")
    except OSError as err:
        return NodeOutput(node.name, None, error=f"cannot run {argv[0]}: {err}")
    return NodeOutput(node.name, done.returncode, done.stdout, done.stderr)


RUNNER: type[NodeRunner] = LocalNodeRunner  # what runners.registry starts (mypy checks it keeps the protocol)

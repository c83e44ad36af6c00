"""The Ray runner: each launch runs on its node through an actor of a Ray cluster spanning the nodes.

Same protocol and teardown guarantee as the local runner (``runners.local``); the driver never
needs SSH, only a connection to the Ray cluster.

    runner = RayNodeRunner("10.0.0.1:6379")                  # inventory node "node1" = the Ray node
    h = runner.start(spec, Path("logs/node1-api.log"))   # holding a custom resource named "node1"
    h.returncode(); h.stop(grace_s=10); runner.close()

How a launch runs: ``start`` creates one actor per launch, pinned to the launch's Ray node with
``NodeAffinitySchedulingStrategy(node_id, soft=False)``. Inventory node names map to Ray node
ids through ``node_ids``, or else through a custom resource named after the node (``ray start
--resources '{"node1": 1}'``); the actor itself asks for no resources (``num_cpus=0``), so any
number of launches fit on a node. Inside the actor, ``runners.local.LocalNodeRunner`` starts the
launch exactly as on the local host: its own process group, led by ``runners.guard``, argv and
environment passed as lists and never through a shell; its payload (the stage probe) is written
by the actor into the launch's directory on the node, first on its PYTHONPATH. The launch's environment is the node's
own, i.e. that of the node's raylet (what ``ray start`` was run with), plus the spec's and the
caller's variables: what Ray adds to its worker processes (``OMP_NUM_THREADS=1``,
``RAY_JOB_ID`` …) does not leak into vLLM.

Logs: the launch writes into a file on its node (a fresh ``ppconf-ray-*`` directory in the
node's temp dir); a thread in the driver pulls new bytes (``read(offset)``) every
``POLL_S`` and appends them to the local ``log_path``, so the local file grows while the
launch runs. ``returncode()`` pulls too: once it returns a status, the local log holds
everything the leader wrote. ``stop`` drains the rest before it returns.

Teardown:
- ``stop(grace_s)`` runs ``LocalHandle.stop`` in the actor (SIGTERM to the group, SIGKILL after
  ``grace_s``, wait until the group is gone), drains the log, removes the node-side log
  directory and kills the actor.
- The actors are not detached: when the driver dies, by any means, Ray kills its actors with
  its job. The guard is a child of the actor's process with a parent-death signal, so when the
  actor's process dies (killed, crashed, its raylet gone) the guard takes the group down.
- Ray's own clean-up of a dying worker (``kill_child_processes_on_worker_exit``) SIGKILLs the
  worker's direct children: that would kill the guard alone and orphan the launch's processes.
  Each actor therefore runs with that clean-up off (runtime_env ``env_vars``), leaving the
  teardown to the guard, which takes down the whole group.
- If the actor dies while the launch runs, ``returncode()`` reports ``ACTOR_LOST`` (-1) and
  a ``ppconf:`` line in the local log says so.

Node requirements: ppconf importable by the Python that runs the node's Ray workers (the same
version as the driver's), and a Ray of the driver's version.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harness import safe_write
from harness.launch import LaunchSpec
from harness.plan.cluster import Cluster, Node
from runners.errors import InfrastructureError
from runners.local import LocalHandle, LocalNodeRunner
from runners.output import NodeOutput
from runners.protocol import NodeRunner

ACTOR_LOST = -1  # returncode() when the actor holding the launch died: exit status unknown
POLL_S = 0.25  # how often the driver pulls new log bytes
CHUNK = 1 << 20  # bytes per pull
START_TIMEOUT_S = 120.0  # actor scheduled, its worker up, the launch started
STOP_SLACK_S = 30.0  # on top of grace_s, for LocalHandle.stop's own waits and the round trip
CALL_TIMEOUT_S = 30.0  # any other call to an actor

# Ray's worker clean-up that would SIGKILL the guard alone (see the module docstring).
_ACTOR_ENV = {"RAY_kill_child_processes_on_worker_exit": "false"}
# What a Ray worker's environment has that its raylet's has not, when the raylet's is unreadable.
_RAY_WORKER_VARS = ("RAY_JOB_ID", "RAY_RAYLET_PID", "SPT_NOENV", "PYTHONBREAKPOINT", "OMP_NUM_THREADS", *_ACTOR_ENV)


class RayRunnerError(InfrastructureError):
    """The launch could not be started on its node (the node or Ray, not the system under test)."""


def _node_environment() -> dict[str, str]:
    """The node's own environment: the worker's without what Ray adds for its workers, overlaid
    with the raylet's (what ``ray start`` ran with). The raylet's alone can lack PATH, and then
    tools that find their own parts through PATH (g++ looking for cc1plus, under torch's
    inductor) fail."""
    env = {k: v for k, v in os.environ.items() if k not in _RAY_WORKER_VARS}
    raylet = os.environ.get("RAY_RAYLET_PID")
    if raylet:
        try:
            raw = Path(f"/proc/{raylet}/environ").read_bytes()
        except OSError:
            return env
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[os.fsdecode(key)] = os.fsdecode(value)
    if "PATH" not in env:
        # Ray can start workers with no PATH at all; give the launch the system's default one
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.confstr("CS_PATH") or os.defpath])
    return env


class LaunchActor:
    """Holds one launch on one Ray node. Its methods run one at a time on the actor's main thread,
    which is also the thread that started the guard (the parent-death signal follows a thread)."""

    def __init__(self) -> None:
        self.handle: LocalHandle | None = None
        self.dir: Path | None = None
        self.log: Path | None = None

    def start(self, spec: LaunchSpec, extra_env: dict[str, str] | None) -> dict:
        self.dir = Path(tempfile.mkdtemp(prefix="ppconf-ray-"))
        self.log = self.dir / f"{re.sub(r'[^A-Za-z0-9._-]', '_', spec.name) or 'launch'}.log"
        worker_env = dict(os.environ)
        try:
            # LocalNodeRunner starts from os.environ: make it the node's for the time of the fork
            os.environ.clear()
            os.environ.update(_node_environment())
            self.handle = LocalNodeRunner().start(spec, self.log, extra_env)
        finally:
            os.environ.clear()
            os.environ.update(worker_env)
        return {
            "pgid": self.handle.pid,
            "actor_pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "remote_log": str(self.log),
        }

    def read(self, offset: int, limit: int = CHUNK) -> tuple[bytes, int | None]:
        """Log bytes from ``offset`` and the exit status. The status is taken first, so when it is
        set, the bytes run to the end of what the leader wrote (a later call gets the rest)."""
        rc = self.handle.returncode() if self.handle else None
        data = b""
        if self.log is not None:  # None until start() named the log
            try:
                with open(self.log, "rb") as f:
                    f.seek(offset)
                    data = f.read(limit)
            except OSError:
                pass
        return data, rc

    def stop(self, grace_s: float) -> int | None:
        if self.handle is None:
            return None
        self.handle.stop(grace_s)
        return self.handle.returncode()

    def close(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


_LaunchActor = ray.remote(LaunchActor)


class RayHandle:
    """One launch on a Ray node. ``pid`` is the launch's process group id on that node."""

    def __init__(self, spec: LaunchSpec, log_path: Path, actor, info: dict, started_at: float):
        self.spec = spec
        self.log_path = log_path
        self.started_at = started_at
        self.pid: int = info["pgid"]
        self.node_id: str = info["node_id"]
        self.node_ip: str = info["node_ip"]
        self.actor_pid: int = info["actor_pid"]
        self.remote_log: str = info["remote_log"]
        self._actor = actor
        self._offset = 0
        self._rc: int | None = None
        self._lost = False
        self._stopped = False
        self._lock = threading.Lock()  # one pull at a time, in order
        self._stop_lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._pump, name=f"ppconf-ray-log-{spec.name}", daemon=True)
        self._thread.start()

    # ---- log and status ---------------------------------------------------------------------
    def _pull(self, timeout: float = CALL_TIMEOUT_S) -> bool:
        """Fetch new log bytes and the status once; True when there may be more bytes to fetch."""
        with self._lock:
            if self._lost or self._actor is None:
                return False
            try:
                data, rc = ray.get(self._actor.read.remote(self._offset), timeout=timeout)
            except (ActorUnavailableError, GetTimeoutError):
                return False  # transient: the next pull tries again
            except RayActorError as e:
                self._actor_lost(e)
                return False
            if data:
                with safe_write.open_stream(self.log_path) as log:
                    log.write(data)
                self._offset += len(data)
            if rc is not None and self._rc is None:
                self._rc = rc
            return len(data) == CHUNK

    def _drain(self) -> None:
        while self._pull():
            pass

    def _actor_lost(self, error: Exception) -> None:
        self._lost = True
        if self._rc is None:
            self._rc = ACTOR_LOST
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        with safe_write.open_stream(self.log_path) as log:
            log.write(
                f"\nppconf: the Ray actor running {self.spec.name} on node {self.spec.node} "
                f"({self.node_id}) died: {type(error).__name__}: {first}\n".encode()
            )

    def _pump(self) -> None:
        while not self._done.wait(POLL_S):
            try:
                self._drain()
            except Exception:  # noqa: BLE001 - the pump must outlive a bad pull; stop() drains again
                pass

    @property
    def pgid(self) -> int:
        return self.pid

    def returncode(self) -> int | None:
        """The launch leader's exit status (the guard's: 128+N when signal N ended the launch),
        ``ACTOR_LOST`` if the actor died, else None. The local log is current when it is set."""
        if self._rc is None and not self._stopped:
            self._drain()
        return self._rc

    # ---- teardown ---------------------------------------------------------------------------
    def stop(self, grace_s: float = 10.0) -> None:
        """Take the launch's whole process group down on its node, then bring the log home."""
        with self._stop_lock:
            if self._stopped:
                return
            actor = self._actor
            if actor is not None and not self._lost:
                try:
                    rc = ray.get(actor.stop.remote(grace_s), timeout=grace_s + STOP_SLACK_S)
                    if self._rc is None:
                        self._rc = rc
                except GetTimeoutError:
                    pass  # killing the actor below still takes the group down (parent-death signal)
                except RayActorError as e:
                    with self._lock:
                        self._actor_lost(e)
            self._done.set()
            self._thread.join(timeout=CALL_TIMEOUT_S)
            self._drain()
            if actor is not None and not self._lost:
                try:
                    ray.get(actor.close.remote(), timeout=CALL_TIMEOUT_S)
                except (RayActorError, GetTimeoutError):
                    pass
            if actor is not None:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            self._actor = None
            self._stopped = True


class RayNodeRunner:
    """Starts launches on the nodes of a Ray cluster, one actor per launch.

    ``address`` is the cluster's (``HOST:PORT`` of the head's GCS, or ``auto``); the runner
    connects unless this process is already connected. ``node_ids`` maps inventory node names to
    Ray node ids; a node not in it is the Ray node holding a custom resource of its name.
    """

    @classmethod
    def for_cluster(cls, cluster: Cluster | None) -> RayNodeRunner:
        if cluster is None or not cluster.ray_address:
            raise RayRunnerError("nodes are reached by ray, but the inventory gives no ray_address")
        return cls(cluster.ray_address)

    def __init__(self, address: str, node_ids: dict[str, str] | None = None):
        self.address = address
        self.node_ids = dict(node_ids or {})
        self._connected_here = False
        self._handles: list[RayHandle] = []
        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=False, logging_level="warning")
            except Exception as e:  # noqa: BLE001 - any failure to reach the cluster is infrastructure
                raise RayRunnerError(f"cannot connect to the Ray cluster at {address}: {e}") from e
            self._connected_here = True

    def node_id(self, node: str) -> str:
        """The Ray node id of an inventory node (alive, or RayRunnerError)."""
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if node in self.node_ids:
            nid = self.node_ids[node]
            if not any(n["NodeID"] == nid for n in alive):
                raise RayRunnerError(f"node {node}: Ray node {nid} is not alive in the cluster at {self.address}")
            return nid
        holders = [n["NodeID"] for n in alive if node in n.get("Resources", {})]
        if len(holders) != 1:
            what = "no alive Ray node holds" if not holders else f"{len(holders)} Ray nodes hold"
            raise RayRunnerError(
                f"node {node}: {what} a resource named {node!r} in the cluster at {self.address} "
                f"(start the node with --resources '{{\"{node}\": 1}}' or pass node_ids)"
            )
        return holders[0]

    def start(self, spec: LaunchSpec, log_path: Path, extra_env: dict[str, str] | None = None) -> RayHandle:
        node_id = self.node_id(spec.node)
        log_path = Path(log_path)
        safe_write.open_stream(log_path).close()
        started_at = time.monotonic()
        actor = _LaunchActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            num_cpus=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=1,
            runtime_env={"env_vars": dict(_ACTOR_ENV)},
        ).remote()
        try:
            info = ray.get(actor.start.remote(spec, dict(extra_env or {})), timeout=START_TIMEOUT_S)
        except BaseException as e:
            try:
                ray.kill(actor, no_restart=True)  # if the launch did start, its guard takes it down
            except Exception:  # noqa: BLE001 - the actor never came up
                pass
            if isinstance(e, ray.exceptions.RayError):
                raise RayRunnerError(f"{spec.name}: could not start on node {spec.node} ({node_id}): {e}") from e
            raise
        handle = RayHandle(spec, log_path, actor, info, started_at)
        self._handles.append(handle)
        return handle

    def run(self, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float) -> list[NodeOutput]:
        return self.run_named([(node.name, argv) for node, argv in calls], timeout_s)

    def run_named(self, calls: Sequence[tuple[str, Sequence[str]]], timeout_s: float) -> list[NodeOutput]:
        """Each ``(inventory node name, argv)`` in a task pinned to that node, all at once."""
        pending: list[tuple[str, Exception | ray.ObjectRef]] = []
        for node, argv in calls:
            try:
                strategy = NodeAffinitySchedulingStrategy(self.node_id(node), soft=False)
            except RayRunnerError as err:
                pending.append((node, err))
                continue
            pending.append(
                (node, _run_command_task.options(scheduling_strategy=strategy).remote(list(argv), timeout_s))
            )
        out = []
        for node, ref in pending:
            if isinstance(ref, Exception):
                out.append(NodeOutput(node, None, error=str(ref)))
                continue
            try:
                rc, stdout, stderr, error = ray.get(ref, timeout=timeout_s + CALL_TIMEOUT_S)
            except (GetTimeoutError, ray.exceptions.RayError) as err:
                out.append(NodeOutput(node, None, error=f"Ray task on {node} failed: {err}"))
                continue
            out.append(NodeOutput(node, rc, stdout, stderr, error))
        return out

    def close(self) -> None:
        """Stop what is still running (it should all be stopped by now) and disconnect if this
        runner connected."""
        for h in self._handles:
            h.stop(grace_s=0.0)
        self._handles.clear()
        if self._connected_here and ray.is_initialized():
            ray.shutdown()
            self._connected_here = False


def _run_command(argv: list[str], timeout_s: float) -> tuple[int | None, str, str, str]:
    import subprocess

    try:
        done = subprocess.run(
            argv,
            env=_node_environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return None, "", "", f"no answer within {timeout_s:g} s"
    except OSError as err:
        return None, "", "", f"cannot run {argv[0]}: {err}"
    return done.returncode, done.stdout, done.stderr, ""


_run_command_task = ray.remote(num_cpus=0, max_retries=0)(_run_command)


def run_commands(address: str, calls: list[tuple[str, list[str]]], timeout_s: float = 60.0) -> list[NodeOutput]:
    """Runs each ``(node name, argv)`` in a task pinned to that node, with the node's own
    environment (as a launch gets it); a ``runners.output.NodeOutput`` per call."""
    try:
        runner = RayNodeRunner(address)
    except RayRunnerError as err:
        return [NodeOutput(node, None, error=str(err)) for node, _ in calls]
    try:
        return runner.run_named(calls, timeout_s)
    finally:
        runner.close()


RUNNER: type[NodeRunner] = RayNodeRunner  # what runners.registry starts (mypy checks it keeps the protocol)

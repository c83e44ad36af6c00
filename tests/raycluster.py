"""A real multi-node Ray cluster on this host, for tests, with its traffic kept on loopback.

Ray advertises the machine's interface address even with ``--node-ip-address 127.0.0.1``, so the
cluster runs inside a network namespace of its own that has only ``lo``: a head and more nodes
(``ray start``), each with a custom resource named after it (``{"node1": 1}``) and one CPU. Its
drivers run in the same namespace: ``Driver`` is a subprocess (``python -m tests.raycluster
ADDRESS`` under ``ip netns exec``) that holds a ``RayNodeRunner`` and answers JSON commands on
stdin, so a test drives real launches from the pytest process and checks the processes and log
files directly (the namespace separates the network only; processes and files are shared).

The cluster uses its own temp dir and its own auth token (RAY_AUTH_TOKEN_PATH), never ``~/.ray``
or ``/tmp/ray``. ``stop`` ends exactly the processes inside the namespace (``ip netns pids``):
``ray stop`` would not do, it kills every Ray process on the machine, whatever the namespace.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RAY = str(Path(sys.executable).with_name("ray"))
PORT = 6379  # the namespace is ours: no other process can hold it


class ClusterError(RuntimeError):
    pass


def _run(argv: list[str], timeout: float = 60.0, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


class RayCluster:
    def __init__(self, nodes: tuple[str, ...] = ("node0", "node1")):
        self.nodes = nodes
        self.netns = f"ppconf-ray-{os.getpid()}-{secrets.token_hex(3)}"
        self.tmp: Path | None = None
        self.address = f"127.0.0.1:{PORT}"
        self.env: dict[str, str] = {}
        self._netns_made = False

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> RayCluster:
        made = _run(["ip", "netns", "add", self.netns])
        if made.returncode != 0:
            raise ClusterError(f"cannot create a network namespace: {made.stderr.strip()}")
        self._netns_made = True
        up = _run(self.ns(["ip", "link", "set", "lo", "up"]))
        if up.returncode != 0:
            raise ClusterError(f"cannot bring lo up in the namespace: {up.stderr.strip()}")
        # short: Ray's Unix socket paths live under it and must stay below 108 bytes
        self.tmp = Path(tempfile.mkdtemp(prefix="prc-", dir="/tmp"))
        token = self.tmp / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(token),
            RAY_USAGE_STATS_ENABLED="0",
            TMPDIR=str(self.tmp),  # the actors' node-side log directories land here too
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.env = env
        for i, node in enumerate(self.nodes):
            argv = [
                RAY,
                "start",
                "--node-ip-address",
                "127.0.0.1",
                "--num-cpus",
                "1",
                "--resources",
                json.dumps({node: 1}),
                "--temp-dir",
                str(self.tmp),
                "--disable-usage-stats",
            ]
            argv += (
                ["--head", "--port", str(PORT), "--include-dashboard=false"] if i == 0 else ["--address", self.address]
            )
            r = _run(self.ns(argv), timeout=120, env=env)
            if r.returncode != 0:
                raise ClusterError(f"`ray start` for {node} failed ({r.returncode}): {(r.stderr or r.stdout)[-2000:]}")
        return self

    def stop(self) -> None:
        """End every process in the namespace (all of them were started here), then the namespace."""
        if self._netns_made:
            # gcs_server and raylet take ~10 s to heed SIGTERM; this cluster holds nothing worth that
            for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
                pids = self.pids()
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                end = time.monotonic() + wait_s
                while self.pids() and time.monotonic() < end:
                    time.sleep(0.1)
                if not self.pids():
                    break
            _run(["ip", "netns", "del", self.netns])
            self._netns_made = False
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    # ---- helpers ----------------------------------------------------------------------------
    def ns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def pids(self) -> list[int]:
        """Processes inside the namespace (zombies not counted)."""
        r = _run(["ip", "netns", "pids", self.netns])
        out = []
        for word in r.stdout.split():
            try:
                with open(f"/proc/{word}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        out.append(int(word))
            except (OSError, ValueError):
                continue
        return out

    def driver(self) -> Driver:
        return Driver(self)


class Driver:
    """A ppconf driver process inside the cluster's namespace, holding a RayNodeRunner."""

    def __init__(self, cluster: RayCluster):
        self.proc = subprocess.Popen(
            cluster.ns([PYTHON, "-m", "tests.raycluster", cluster.address]),
            cwd=ROOT,
            env=cluster.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._reply(60)
        if not hello.get("ok"):
            raise ClusterError(f"driver did not connect: {hello}")
        self.pid = self.proc.pid

    def _reply(self, timeout: float) -> dict:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise ClusterError(f"driver gave no answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise ClusterError(f"driver exited ({self.proc.wait(5)})")
        return json.loads(line)

    def call(self, op: str, timeout: float = 120.0, **kw) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply(timeout)
        if "error" in reply:
            raise ClusterError(f"{op}: {reply['error']}")
        return reply

    def start(self, spec, log_path: Path, extra_env: dict | None = None, **kw) -> dict:
        """Start ``spec`` (a LaunchSpec) through the driver's RayNodeRunner; the handle's facts."""
        return self.call("start", spec=spec_to_json(spec), log=str(log_path), env=extra_env or {}, **kw)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit", timeout=60)
            except (ClusterError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def spec_to_json(spec) -> dict:
    return {
        "name": spec.name,
        "role": spec.role,
        "node": spec.node,
        "host": spec.host,
        "argv": list(spec.argv),
        "env": [list(kv) for kv in spec.env],
        "port": spec.port,
        "set_env": spec.set_env,
        "payload": [[p.name, p.content] for p in spec.payload],
    }


def serve(address: str) -> None:
    """The driver side: one JSON command per stdin line, one JSON answer per stdout line."""
    from harness.launch import LaunchSpec, Payload
    from runners.ray import RayNodeRunner

    runner = RayNodeRunner(address)
    handles = {}
    out = sys.stdout
    sys.stdout = sys.stderr  # only answers go to the real stdout

    def answer(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    import ray

    answer({"ok": True, "pid": os.getpid()})
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        try:
            if op == "nodes":
                answer({"nodes": {n["NodeID"]: sorted(n["Resources"]) for n in ray.nodes() if n["Alive"]}})
            elif op == "start":
                s = req["spec"]
                spec = LaunchSpec(
                    s["name"],
                    s["role"],
                    s["node"],
                    s["host"],
                    tuple(s["argv"]),
                    tuple(tuple(kv) for kv in s["env"]),
                    s["port"],
                    s["set_env"],
                    payload=tuple(Payload(name, content) for name, content in s.get("payload", [])),
                )
                if req.get("node_ids"):
                    runner.node_ids = req["node_ids"]
                h = runner.start(spec, Path(req["log"]), req["env"])
                handles[spec.name] = h
                answer(
                    {
                        "pgid": h.pid,
                        "node_id": h.node_id,
                        "node_ip": h.node_ip,
                        "actor_pid": h.actor_pid,
                        "remote_log": h.remote_log,
                    }
                )
            elif op == "returncode":
                answer({"rc": handles[req["name"]].returncode()})
            elif op == "wait":
                h, end = handles[req["name"]], time.monotonic() + req.get("timeout", 30)
                while h.returncode() is None and time.monotonic() < end:
                    time.sleep(0.05)
                answer({"rc": h.returncode()})
            elif op == "stop":
                h = handles[req["name"]]
                t0 = time.monotonic()
                h.stop(req.get("grace_s", 10.0))
                answer({"rc": h.returncode(), "took_s": time.monotonic() - t0})
            elif op == "run_commands":
                from runners.ray import run_commands

                outs = run_commands(address, [(n, a) for n, a in req["calls"]], req.get("timeout_s", 60.0))
                answer({"outputs": [vars(o) for o in outs]})
            elif op == "kill_actor":
                ray.kill(handles[req["name"]]._actor, no_restart=True)
                answer({})
            elif op == "quit":
                runner.close()
                answer({})
                return
            else:
                answer({"error": f"unknown op {op}"})
        except Exception as e:  # noqa: BLE001 - the test reads the error
            answer({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    serve(sys.argv[1])

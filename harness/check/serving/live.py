"""A launched deployment: its process groups on their nodes, their logs and its API client.

``LiveDeployment.stop`` takes every launched process group down, on every node, whatever happened.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from harness.check import logs
from harness.check.serving.client import Client, ServerGroup
from harness.launch import Deployment
from harness.plan.cluster import Cluster
from harness.plan.launch import Ports
from runners import registry
from runners.protocol import Handle, NodeRunner

PD_ROLES = ("prefill", "decode")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_ports() -> Ports:
    return Ports(
        api=free_port(), master=free_port(), ray=free_port(), kv=free_port(), prefill=free_port(), decode=free_port()
    )


class LiveDeployment:
    def __init__(
        self,
        deployment: Deployment,
        log_dir: Path,
        extra_env: dict[str, str],
        timeout_s: float,
        cluster: Cluster | None = None,
    ):
        self.deployment = deployment
        self.log_dir = log_dir
        self.cluster = cluster
        self.runners: dict[str, NodeRunner] = {}
        self.handles: list[Handle] = []
        self.extra_env = extra_env
        self.t0 = time.monotonic()
        api = deployment.launch(deployment.api)
        self.client = Client(self._url(api.node, api.port), timeout_s)
        # Behind a proxy each server is asked on its own (readiness, metrics, the stage probe),
        # never through the proxy, which serves little more than completions. Every server
        # besides the API's (a P/D side, each DP rank of external DP) must be ready before the
        # deployment is; a P/D side's configuration is read from its first server (its DP rank 0)
        self.servers = {
            s.name: Client(self._url(s.node, s.port), timeout_s)
            for s in deployment.launches
            if s.role in (*PD_ROLES, "dp-rank") and s.port is not None
        }
        self.sides: dict[str, list[Client]] = {}  # every server of each P/D side
        for s in deployment.launches:
            if s.role in PD_ROLES and s.name in self.servers:
                self.sides.setdefault(s.role, []).append(self.servers[s.name])
        self.instances = {role: clients[0] for role, clients in self.sides.items()}
        # behind a proxy (P/D, external DP) the client connects to the proxy: its own readiness
        # path, and the model's name from a server (vllm-ascend's DP proxy lists no models)
        self.proxied = api.role == "proxy"
        self.ranks = [c for name, c in self.servers.items() if deployment.launch(name).role == "dp-rank"]
        if not self.proxied:
            self.ready_path = "/health"
        elif self.instances:
            self.ready_path = cluster.pd_proxy_ready if cluster else "/healthcheck"
        else:
            self.ready_path = cluster.dp_proxy_ready if cluster else "/healthcheck"
        self.model_name: str | None = None
        self._stop_lock = threading.Lock()

    def _url(self, node_name: str, port: int | None) -> str:
        host = self.cluster.node(node_name).client_address if self.cluster else "127.0.0.1"
        return f"http://{host}:{port}"

    @property
    def stage_client(self) -> Client | ServerGroup:
        """Whose workers the stage probe asks: a P/D pair's prefill side (its PP side); behind a
        DP proxy, the DP ranks. A side or deployment of several servers (external DP) is asked on
        every one (each runs its own pipeline; answers tagged ``dp_rank``)."""
        servers = self.sides.get("prefill") or (self.ranks if self.proxied else [])
        if not servers:
            return self.client
        return servers[0] if len(servers) == 1 else ServerGroup(servers)

    @property
    def metrics_client(self) -> Client | ServerGroup:
        """What the requests did, from /metrics: a P/D pair's decode side, which serves every token
        after the first; behind a DP proxy, the DP ranks' servers, summed (each served some)."""
        servers = self.sides.get("decode") or (self.ranks if self.proxied else [])
        if not servers:
            return self.client
        return servers[0] if len(servers) == 1 else ServerGroup(servers)

    def _reach(self, node_name: str) -> str:
        return self.cluster.node(node_name).reach if self.cluster else "local"

    def runner_for(self, node_name: str) -> NodeRunner:
        """The node runner that reaches a node, one per way of reaching (``runners.registry``)."""
        reach = self._reach(node_name)
        if reach not in self.runners:
            self.runners[reach] = registry.runner(reach, self.cluster)
        return self.runners[reach]

    def groups(self) -> list[dict[str, str | int]]:
        """Where each launched process group runs: {"node", "reach", "pgid"}; the pgid is the
        group's id on that node (for SSH, the remote group, once the node reported it)."""
        return [
            {"node": h.spec.node, "reach": self._reach(h.spec.node), "pgid": h.pgid}
            for h in self.handles
            if h.pgid is not None
        ]

    @property
    def log_paths(self) -> dict[str, Path]:
        return {h.spec.name: h.log_path for h in self.handles}

    def start(self) -> None:
        for spec in self.deployment.launches:
            runner = self.runner_for(spec.node)
            self.handles.append(runner.start(spec, self.log_dir / f"{spec.name}.log", self.extra_env))

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def exited(self) -> dict[str, int]:
        return {h.spec.name: rc for h in self.handles if (rc := h.returncode()) is not None}

    def exit_codes(self) -> dict[str, int | None]:
        return {h.spec.name: h.returncode() for h in self.handles}

    def wait_ready(self, deadline_s: float, poll_s: float = 0.25) -> tuple[str, float]:
        """("ready" | "exited" | "timeout", seconds since launch). An exit is seen within ``poll_s``."""
        while True:
            elapsed = time.monotonic() - self.t0
            if self.exited():
                return "exited", elapsed
            name = None
            names = [c.ready() for c in self.servers.values()]
            if all(n is not None for n in names):
                # the name the client's endpoint lists; a proxy that lists none, a server's
                name = self.client.ready(self.ready_path)
                if name is None and self.proxied and names and self.client.healthy(self.ready_path):
                    name = names[0]
            if name is not None:
                self.model_name = name
                return "ready", elapsed
            if elapsed > deadline_s:
                return "timeout", elapsed
            time.sleep(poll_s)

    def wait_exited(self, deadline_s: float, poll_s: float = 0.25) -> tuple[str, float]:
        """("exited" | "timeout", seconds since launch): every process has exited, or the deadline
        passed first (a run of processes that serve nothing, such as configuration checks)."""
        while True:
            elapsed = time.monotonic() - self.t0
            if len(self.exited()) == len(self.handles):
                return "exited", elapsed
            if elapsed > deadline_s:
                return "timeout", elapsed
            time.sleep(poll_s)

    def why_not_ready(self, deadline_s: float) -> str | None:
        """None once ready; else why not, with the root cause from its logs."""
        state, elapsed = self.wait_ready(deadline_s)
        if state == "ready":
            return None
        cause = logs.root_cause(self.log_paths)
        return f"did not start ({state} after {elapsed:.0f} s): {cause.text if cause else 'no error line in its log'}"

    def stop(self) -> None:
        """Stop every process group (idempotent; ``Launcher.stop_all`` may call it from another thread)."""
        with self._stop_lock:
            for h in reversed(list(self.handles)):
                h.stop()
            for runner in self.runners.values():
                runner.close()
            self.client.close()
            for c in self.servers.values():
                c.close()

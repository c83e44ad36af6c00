"""What every node runner is: start a LaunchSpec on its node and get a handle back, run short
programs on nodes, close. ``runners.registry`` says which runner reaches a node, by its ``reach``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from harness.launch import LaunchSpec
from harness.plan.cluster import Cluster, Node
from runners.output import NodeOutput


class Handle(Protocol):
    """One launch on its node. After ``stop`` no process the launch started is left there."""

    spec: LaunchSpec
    log_path: Path  # the launch's log on this host (streamed back from remote nodes)

    @property
    def pid(self) -> int:
        """A process on this host that stands for the launch (the guard, the ssh client)."""
        ...

    @property
    def pgid(self) -> int | None:
        """The launch's process group on its node; None until the node reported it."""
        ...

    def returncode(self) -> int | None: ...

    def stop(self, grace_s: float = 10.0) -> None: ...


class NodeRunner(Protocol):
    @classmethod
    def for_cluster(cls, cluster: Cluster | None) -> NodeRunner:
        """The runner for the nodes of ``cluster`` that it reaches (None: this host alone)."""
        ...

    def start(self, spec: LaunchSpec, log_path: Path, extra_env: dict[str, str] | None = None) -> Handle: ...

    def run(self, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float) -> list[NodeOutput]:
        """Runs each ``(node, argv)`` to its end; one NodeOutput per call, in order, never raising
        for a node that cannot be reached (its output says why)."""
        ...

    def close(self) -> None: ...

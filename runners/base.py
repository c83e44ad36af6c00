"""The runner protocol: start one LaunchSpec on its node, watch it, stop its whole process group.

Every runner gives the same guarantee: after ``stop`` (called on success, failure, timeout and
Ctrl-C alike) no process the launch started is left on the node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from harness.plan.deployment import LaunchSpec


class Handle(Protocol):
    spec: LaunchSpec
    log_path: Path
    started_at: float  # time.monotonic() at launch

    def returncode(self) -> int | None:
        """Exit status once the launched process has exited, else None."""

    def stop(self, grace_s: float = 10.0) -> None:
        """Terminate the launch's whole process group: SIGTERM, then SIGKILL after ``grace_s``."""


class Runner(Protocol):
    def start(self, spec: LaunchSpec, log_path: Path, extra_env: dict[str, str] | None = None) -> Handle:
        ...

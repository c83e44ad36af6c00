"""What a run tells its front end (the CLI's progress bar, the pytest plugin) as it goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from harness.cases.case import Case


class EventKind(str, Enum):
    START = "start"  # `total` cases to run
    MODEL = "model"  # building a tiny model
    REFERENCE = "reference"  # launching a reference
    LAUNCH = "launch"  # launching a case's deployment
    PHASE = "phase"  # a workload phase sent to a case's deployment
    RESULT = "result"  # a case's verdict: `outcome`, `text` is its reason
    RUNNING = "running"  # the deployments live now (`count` of them, `text` their first cases), side by side
    RETRY = "retry"  # `count` verdicts are withdrawn: the deployment runs once more
    NOTICE = "notice"  # anything else worth a line (groups reaped, the stack changed)


@dataclass(frozen=True)
class Event:
    kind: EventKind
    text: str = ""
    case: Case | None = None
    total: int | None = None
    outcome: str | None = None
    count: int = 0


Sink = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The sink of a run nobody watches."""

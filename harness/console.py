"""What `ppconf run` shows while it runs: a live progress bar on a terminal, plain lines elsewhere.

A CI log is not a terminal: a redrawn bar is noise there, and text wrapped at 80 columns breaks
one verdict over several lines. So off a terminal every event is one plain line, a verdict as
``OUTCOME  CASE  REASON``, whatever the reason's length or newlines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from harness.progress import Event, EventKind, Sink

HEAD_WIDTH = 18  # the longest outcome, UNEXPECTED_ACCEPT, and a space


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def verdict_line(head: str, case_id: str, text: str) -> str:
    """``OUTCOME  CASE  REASON`` on one line, outcomes padded so the case ids line up."""
    return f"{head:{HEAD_WIDTH}s} " + (f"{one_line(case_id)}  {one_line(text)}" if case_id else one_line(text))


def event_line(event: Event) -> str:
    """The plain line of one event: a verdict's head is its outcome, any other event's its kind."""
    case_id = event.case.id if event.case else ""
    if event.kind is EventKind.RESULT:
        return verdict_line(event.outcome or "", case_id, event.text)
    if event.kind is EventKind.NOTICE:
        return one_line(event.text)
    if event.kind is EventKind.RETRY:  # upper case like an outcome: it withdraws verdicts
        return verdict_line("RETRY", case_id, event.text)
    return verdict_line(event.kind.value, case_id, event.text)


@contextmanager
def progress_display(suite: str, stream: TextIO | None = None) -> Iterator[Sink]:
    """A sink for a run's events, on ``stream`` (stderr by default): rich's live bar when it is a
    terminal, else plain lines, flushed one by one so a CI log follows the run."""
    from rich.console import Console

    stream = stream or sys.stderr
    console = Console(file=stream)
    if not console.is_terminal:

        def plain(event: Event) -> None:
            print(event_line(event), file=stream, flush=True)

        yield plain
        return

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(suite, total=None)

        def line(text: str) -> None:
            bar.console.print(text, markup=False, highlight=False, soft_wrap=True)

        def live(event: Event) -> None:
            if event.kind is EventKind.START:
                bar.update(task, total=event.total)
            elif event.kind is EventKind.RETRY:
                bar.advance(task, -event.count)
                line(event_line(event))
            elif event.kind is EventKind.RESULT:
                bar.advance(task)
                line(event_line(event))
            elif event.kind is EventKind.NOTICE:
                line(event.text)
            else:
                what = event.case.id if event.case else event.text
                bar.update(task, description=f"{suite}: {event.kind.value} {what}")

        yield live


class Steps:
    """The progress of a long step that launches nothing (planning, checking plans): what it is
    doing, and how far through its items."""

    def __init__(self, line: Callable[[str], None], bar=None, task=None) -> None:
        self._line, self._bar, self._task = line, bar, task

    def stage(self, text: str, total: int | None = None) -> None:
        if self._bar is None:
            self._line(text)
        else:
            self._bar.update(self._task, description=text, total=total, completed=0)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)


@contextmanager
def steps_display(quiet: bool = False, stream: TextIO | None = None) -> Iterator[Steps]:
    """Progress on ``stream`` (stderr by default), never on stdout where the answer goes: rich's
    bar on a terminal, cleared when done; elsewhere one plain line per stage; nothing when quiet."""
    from rich.console import Console

    stream = stream or sys.stderr
    console = Console(file=stream)
    if quiet:
        yield Steps(lambda text: None)
        return
    if not console.is_terminal:
        yield Steps(lambda text: print(one_line(text), file=stream, flush=True))
        return

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        yield Steps(lambda text: None, bar, bar.add_task("", total=None))

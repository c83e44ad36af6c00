"""The files a report is written as, one module each, registered in
``harness.registry.REPORT_FORMATS``: a new format is one module whose ``FORMAT`` is a
``ReportFormat``, and one line there. Each is handed the same ``Report``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.results.result import Result
from reports.cells import Entry, Table


@dataclass(frozen=True)
class Report:
    """One report: its entries (a run's results, or the claims alone) and their support tables;
    ``context``, what the page templates share (tables, legend, header, feature rows, tuning,
    traffic, plots); the run's records and directory (None for claims); its folder ``out``;
    ``force``: its files may replace files ppconf did not write (``harness.safe_write``)."""

    entries: list[Entry]
    tables: list[Table]
    head: str
    context: dict[str, Any]
    records: list[Result]
    run_dir: Path | None
    out: Path
    force: bool = False


@dataclass(frozen=True)
class ReportFormat:
    file: str  # the file it writes in the report's folder
    write: Callable[[Report, Path], None]  # the report, written to that file

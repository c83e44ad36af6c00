"""A report format a test adds: ``support.csv``, one line per case and its outcome."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from reports.formats import Report, ReportFormat


def write(report: Report, path: Path) -> None:
    out = io.StringIO()
    rows = csv.writer(out, lineterminator="\n")
    rows.writerow(["case", "claim", "outcome"])
    for e in report.entries:
        rows.writerow([e.case, e.expectation.kind.value, e.outcome or ""])
    path.write_text(out.getvalue())


FORMAT = ReportFormat("support.csv", write)

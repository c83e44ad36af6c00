"""junit.xml: one test case per case, for CI's test readers (``reports.junit``)."""

from __future__ import annotations

from pathlib import Path

from reports import junit
from reports.formats import Report, ReportFormat


def write(report: Report, path: Path) -> None:
    junit.write_junit(report.entries, path, report.run_dir, force=report.force)


FORMAT = ReportFormat("junit.xml", write)

"""support.md: the support tables per model family, with tuning and traffic, in Markdown."""

from __future__ import annotations

from pathlib import Path

from harness import safe_write
from reports.formats import Report, ReportFormat
from reports.render import environment


def write(report: Report, path: Path) -> None:
    safe_write.write_text(
        path, environment(False).get_template("support.md.j2").render(**report.context), force=report.force
    )


FORMAT = ReportFormat("support.md", write)

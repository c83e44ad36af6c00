"""stacks.html: the table across stacks as one self-contained page, each cell linking to its
case's evidence in its stack's own run report."""

from __future__ import annotations

from reports.render import environment
from reports.stacks import SUMMARY_KINDS, AcrossStacks, StackReportFormat


def write(report: AcrossStacks) -> str:
    rows = sorted(report.rows, key=lambda r: not r.differs)
    return environment(True).get_template("stacks.html.j2").render(report=report, rows=rows, kinds=SUMMARY_KINDS)


FORMAT = StackReportFormat("stacks.html", write)

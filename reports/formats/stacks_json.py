"""stacks.json: every case's cell on every stack and the summaries between stacks, as JSON."""

from __future__ import annotations

import json

from reports.stacks import AcrossStacks, StackReportFormat


def write(report: AcrossStacks) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True, default=str) + "\n"


FORMAT = StackReportFormat("stacks.json", write)

"""summary.json: every case's claim and outcome, and every cell of the support tables, as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import safe_write
from reports.cells import Entry, Table
from reports.formats import Report, ReportFormat


def write(report: Report, path: Path) -> None:
    safe_write.write_text(
        path,
        json.dumps(summary(report.tables, report.entries, report.head), indent=2, sort_keys=True, default=str),
        force=report.force,
    )


def summary(tables: list[Table], entries: list[Entry], head: str) -> dict[str, Any]:
    return {
        "header": head,
        "cases": [
            {
                "case": e.case,
                **{k: v for k, v in e.coordinates().items() if k not in ("id", "suite")},  # a report is of one suite
                "claim": e.expectation.to_json(),
                "outcome": e.outcome,
                "reason": e.reason,
            }
            for e in entries
        ],
        "cells": [
            {
                "family": t.family,
                "row": row,
                "column": col,
                "symbol": c.symbol,
                "claimed": c.claimed,
                "outcome": c.outcome,
                "fails_run": c.fails_run,
                "note": c.note,
                "cases": [e.case for e in c.entries],
            }
            for t in tables
            for (row, col), c in t.cells.items()
        ],
    }


FORMAT = ReportFormat("summary.json", write)

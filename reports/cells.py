"""From results (or from the matrix's claims alone) to support tables: one per model family,
feature stacks as rows, variant · topology · platform as columns, one symbol per cell.

Legend (as in the vllm-ascend docs): ✅ supported (a case passed) · 🔵 experimental ·
❌ not supported (the rejection was verified) · 🟡 not tested or no claim. Never a blank cell.
A cell whose observation contradicts its claim is marked and footnoted.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Protocol

from harness.case_key import CaseKey
from harness.outcomes import FAILS_RUN, WAIVED, WAIVER_KINDS, Kind, Outcome, severity
from harness.results.result import Expectation, Result

SUPPORTED, EXPERIMENTAL, REJECTED, UNTESTED = "✅", "🔵", "❌", "🟡"
FAILS = "❗"  # after the symbol of a cell whose case failed the run: it must never read as fine or untested
LEGEND = (
    f"{SUPPORTED} supported · {EXPERIMENTAL} experimental · {REJECTED} not supported · "
    f"{UNTESTED} not tested or unspecified · {FAILS} failed the run (see its note)"
)


class Claim(Protocol):
    """What a symbol is read from: a case's expectation (``harness.cases.case.Expectation``) or the
    one its result recorded (``harness.results.result.Expectation``)."""

    @property
    def kind(self) -> str: ...

    @property
    def experimental(self) -> bool: ...

    @property
    def waives(self) -> list[str]: ...


# A waiver of these checks says the deployment does not start or does not answer (a known crash):
# the cell is not supported, whatever kind of claim carries it.
NOT_SERVING = ("startup", "request")


def anchor(*parts: str) -> str:
    """An HTML id for a cell or a case: readable, and unique through a hash of the whole (parts
    that differ only in characters the slug folds, ``1,4`` and ``1;4``, still differ)."""
    whole = "\x1f".join(parts)
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", "-".join(parts))[:100]
    return f"{slug}-{hashlib.sha256(whole.encode()).hexdigest()[:8]}"


def claim_text(exp: Expectation) -> str:
    """A claim as one line: its kind, the error and phase of a rejection, why, and its rule."""
    text = exp.kind.value
    if exp.error:
        text += f" /{exp.error}/ at {exp.phase}"
    if exp.why:
        text += f" — {exp.why}"
    if exp.where:
        text += f" ({exp.where})"
    return text


def waiver_text(exp: Expectation) -> str | None:
    """What waives a case, who owns the waiver and until when; None for a claim that waives nothing."""
    if exp.kind not in WAIVER_KINDS:
        return None
    until = f"until {exp.until.isoformat()}" if exp.until else "no expiry"
    return f"{exp.kind.value} {exp.link or '(no link)'}, owner {exp.owner or 'none'}, {until}"


def claim_symbol(exp: Claim) -> str:
    if exp.kind in WAIVER_KINDS and any(c in NOT_SERVING for c in exp.waives):
        return REJECTED
    if exp.kind in (Kind.SUPPORTED, *WAIVER_KINDS):
        return EXPERIMENTAL if exp.experimental else SUPPORTED
    if exp.kind in (Kind.REJECTED, Kind.UNSUPPORTED_ON_PLATFORM):
        return REJECTED
    return UNTESTED


def observed_symbol(exp: Claim, outcome: str | None) -> str:
    """What the evidence shows, in the legend's terms."""
    if outcome in (Outcome.PASS, Outcome.UNEXPECTED_ACCEPT):
        return EXPERIMENTAL if exp.experimental else SUPPORTED
    if outcome == Outcome.XFAIL:
        return REJECTED
    if outcome in (Outcome.FAIL, Outcome.BAD_REJECT, *WAIVED):
        # tested, and it did not work: never the untested symbol (the footnote says how it failed)
        return REJECTED
    if outcome == Outcome.SKIP and exp.kind == Kind.UNSUPPORTED_ON_PLATFORM:
        return REJECTED
    return UNTESTED  # not run, skipped without a claim, or the harness failed (footnoted)


class Entry(CaseKey):
    """One case as the report sees it: its coordinates, claim and (when run) its result and
    outcome (the outcome's value, as reports print it)."""

    expectation: Expectation
    outcome: str | None = None
    reason: str = ""
    record: Result | None = None

    @property
    def row(self) -> str:
        stack = " + ".join(self.features) if self.features else "PP"
        return stack if self.partition == "auto" else f"{stack}, partition {self.partition}"

    @property
    def column(self) -> str:
        model = "" if self.variant == "default" else f"{self.variant} · "
        return f"{model}{self.topology} · {self.platform}"

    @property
    def anchor(self) -> str:
        """The id of its evidence on the HTML page."""
        return "ev-" + anchor(self.case)

    @property
    def cell_anchor(self) -> str:
        """The id of its cell in its family's table."""
        return cell_anchor(self.family, self.row, self.column)


def cell_anchor(family: str, row: str, column: str) -> str:
    return "cell-" + anchor(family, row, column)


@dataclass
class Cell:
    entries: list[Entry]
    symbol: str
    claimed: str
    outcome: str | None
    note: str = ""  # footnote text when the cell contradicts its claim or carries a waiver
    footnote: int | None = None

    @property
    def fails_run(self) -> bool:
        return self.outcome in FAILS_RUN

    @property
    def worst(self) -> Entry:
        return _worst(self.entries)


@dataclass
class Table:
    family: str
    title: str
    rows: list[str]
    columns: list[str]
    cells: dict[tuple[str, str], Cell]
    notes: list[str] = field(default_factory=list)

    def cell(self, row: str, column: str) -> Cell | None:
        return self.cells.get((row, column))

    def anchor(self, row: str, column: str) -> str:
        return cell_anchor(self.family, row, column)

    @property
    def id(self) -> str:
        """The id of its section on the HTML page."""
        return "family-" + anchor(self.family)


def _worst(entries: list[Entry]) -> Entry:
    """The case that speaks for a cell: the one of the highest severity."""
    return max(entries, key=lambda e: severity(e.outcome))


def _notes(e: Entry) -> list[str]:
    return e.record.observation.notes if e.record else []


def _cell(entries: list[Entry]) -> Cell:
    worst = _worst(entries)
    claimed = claim_symbol(worst.expectation)
    # claims-only entries carry no outcome: the cell shows the claim itself
    symbol = claimed if all(e.outcome is None for e in entries) else observed_symbol(worst.expectation, worst.outcome)
    note = ""
    if worst.outcome == Outcome.UNEXPECTED_ACCEPT:
        note = f"claimed {claimed}, observed working: {worst.reason}"
    elif worst.outcome in (Outcome.FAIL, Outcome.BAD_REJECT):
        note = f"claimed {claimed}, observed {worst.outcome}: {worst.reason}"
    elif worst.outcome == Outcome.ERROR:
        note = f"not verified, the harness failed: {worst.reason}"
    elif worst.outcome is not None and worst.outcome in WAIVED:
        note = f"{Outcome(worst.outcome).label}: {worst.reason}"
    elif any(n.startswith("documentation disagrees") for n in _notes(worst)):
        note = next(n for n in _notes(worst) if n.startswith("documentation disagrees"))
    elif worst.expectation.undocumented:
        note = f"the guide is silent about this exception: {worst.expectation.why}"
    elif worst.outcome is None and worst.expectation.kind in WAIVER_KINDS:
        exp = worst.expectation
        note = f"{exp.kind.value}: {exp.link or ''}" + (f", owner {exp.owner}, until {exp.until}" if exp.owner else "")
    return Cell(entries, symbol, claimed, worst.outcome, note)


def build_tables(entries: list[Entry], titles: dict[str, str] | None = None) -> list[Table]:
    titles = titles or {}
    tables = []
    for family in sorted({e.family for e in entries}):
        mine = [e for e in entries if e.family == family]
        rows = sorted({e.row for e in mine}, key=lambda r: (r != "PP", r))
        columns = sorted({e.column for e in mine})
        cells = {}
        footnotes = []
        for row in rows:
            for col in columns:
                group = [e for e in mine if e.row == row and e.column == col]
                if not group:
                    continue
                c = _cell(group)
                if c.note:
                    footnotes.append(c.note)
                    c.footnote = len(footnotes)
                cells[(row, col)] = c
        tables.append(Table(family, titles.get(family, family), rows, columns, cells, footnotes))
    return tables


def entries_from_results(records: list[Result]) -> list[Entry]:
    return [
        Entry(**r.coordinates(), expectation=r.expectation, outcome=r.outcome.value, reason=r.reason, record=r)
        for r in records
    ]


def entries_from_claims(cases) -> list[Entry]:
    return [Entry(**c.coordinates(), expectation=Expectation.from_json(c.expectation.to_json())) for c in cases]

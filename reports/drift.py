"""docs-drift: compare a published support table with the matrix's claims (and a run's evidence).

Reads Markdown pipe tables and the tab-separated tables of plain-text exports of the docs. A row
is matched to a feature (or a model family) by its name, its title, or one of its ``aliases``;
its cell is read as ✅/🔵/❌/🟡 from the emoji or from the words ("Supported …", "Not supported").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .cells import EXPERIMENTAL, REJECTED, SUPPORTED, UNTESTED, claim_symbol, observed_symbol

EMOJI = (SUPPORTED, EXPERIMENTAL, REJECTED, UNTESTED)


@dataclass(frozen=True)
class PublishedRow:
    line: int
    name: str
    text: str
    column: str


def _split(line: str) -> list[str] | None:
    if line.strip().startswith("|") and line.strip().endswith("|"):
        return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return None


def read_tables(text: str, column_pattern: str = r"^support$|pipeline parallel|SupportsPP") -> list[PublishedRow]:
    """Rows of every table whose header has a column matching ``column_pattern``."""
    rows: list[PublishedRow] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        head = _split(lines[i])
        col = None
        if head and len(head) >= 2:
            col = next((j for j, h in enumerate(head) if j > 0 and re.search(column_pattern, h, re.I)), None)
        if col is None:
            i += 1
            continue
        i += 1
        while i < len(lines):
            cells = _split(lines[i])
            if cells is None or len(cells) < 2:
                break
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):  # Markdown separator row
                text_cell = cells[col] if col < len(cells) else ""
                rows.append(PublishedRow(i + 1, cells[0].strip("`* "), text_cell, head[col]))
            i += 1
    return rows


def published_symbol(text: str, column: str = "") -> str | None:
    """The legend symbol a published cell states, or None for a blank cell."""
    if "supportspp" in column.lower() and text.strip():
        return SUPPORTED  # a table of the variants that implement SupportsPP: being listed is the claim
    for e in EMOJI:
        if e in text:
            return e
    t = text.strip().lower()
    if not t:
        return None
    if t.startswith(("not supported", "unsupported", "no")):
        return REJECTED
    if "experimental" in t:
        return EXPERIMENTAL
    if t.startswith(("supported", "yes")):
        return SUPPORTED
    return UNTESTED


@dataclass(frozen=True)
class Drift:
    line: int
    name: str
    published: str
    claimed: str
    observed: str | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.name}: {self.message}"


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def _lookup(matrix, name: str) -> tuple[str, set[str]] | None:
    """("feature" | "family" | "topology", matching keys) for a published row name. Several
    topologies may share a name (every P/D layout is "P/D disaggregation")."""
    n = _norm(name)
    for kind, table in (("feature", matrix.features), ("family", matrix.families), ("topology", matrix.topologies)):
        keys = {key for key, item in table.items()
                if n in {_norm(x) for x in (key, item.title, *getattr(item, "aliases", []))}}
        if keys:
            return kind, keys
    return None


def docs_drift(doc: Path, matrix, cases, records: list[dict] | None = None) -> list[Drift]:
    """Every published row that disagrees with the claims of ``cases`` (or with ``records``)."""
    out: list[Drift] = []
    by_case = {r["case"]: r for r in records or []}
    for row in read_tables(doc.read_text(encoding="utf-8", errors="replace")):
        published = published_symbol(row.text, row.column)
        found = _lookup(matrix, row.name)
        if published is None:
            out.append(Drift(row.line, row.name, "", "", None, "blank cell: the docs say nothing"))
            continue
        if found is None:
            out.append(Drift(row.line, row.name, published, "", None,
                             f"published {published}, but no feature or family of the matrix is named so"))
            continue
        kind, keys = found
        key = ", ".join(sorted(keys))
        attr = {"feature": lambda c: set(c.features), "family": lambda c: {c.family}, "topology": lambda c: {c.topology}}[kind]
        mine = [c for c in cases if attr(c) & keys]
        if not mine:
            out.append(Drift(row.line, row.name, published, UNTESTED, None,
                             f"published {published}, but no case of the matrix exercises {kind} '{key}'"))
            continue
        claims = [claim_symbol(c.expectation.to_json()) for c in mine]
        claimed = SUPPORTED if SUPPORTED in claims else EXPERIMENTAL if EXPERIMENTAL in claims else \
            REJECTED if REJECTED in claims else UNTESTED
        observed = None
        seen = [observed_symbol(by_case[c.id]["expectation"], by_case[c.id]["outcome"]) for c in mine if c.id in by_case]
        if seen:
            observed = SUPPORTED if SUPPORTED in seen else EXPERIMENTAL if EXPERIMENTAL in seen else \
                REJECTED if REJECTED in seen else UNTESTED
        if {published, claimed} - {SUPPORTED, EXPERIMENTAL} and published != claimed:
            out.append(Drift(row.line, row.name, published, claimed, observed,
                             f"published {published}, the matrix claims {claimed} for "
                             f"{claims.count(claimed)} of {len(mine)} case(s) of {kind} '{key}' and "
                             f"{SUPPORTED} for none"))
        elif observed is not None and observed != published and {observed, published} - {SUPPORTED, EXPERIMENTAL}:
            out.append(Drift(row.line, row.name, published, claimed, observed,
                             f"published {published}, the run observed {observed}"))
    return out

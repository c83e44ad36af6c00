"""docs-drift: compare a published support table with the matrix's claims (and a run's evidence).

Reads Markdown pipe tables and the tab-separated tables of plain-text exports of the docs. A row
is matched to a feature (or a model family) by its name, its title, or one of its ``aliases``;
its cell is read as ✅/🔵/❌/🟡 from the emoji or from the words ("Supported …", "Not supported").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.results.result import Result

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
        if head is None or col is None:
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
    cases: tuple[str, ...] = ()

    def __str__(self) -> str:
        shown = ", ".join(self.cases[:3]) + (f" and {len(self.cases) - 3} more" if len(self.cases) > 3 else "")
        return f"{self.line}: {self.name}: {self.message}" + (f" (cases: {shown})" if self.cases else "")

    def to_json(self, doc: Path) -> dict:
        """Both sides as legend symbols ("" where a side says nothing), every case concerned."""
        return {
            "file": str(doc),
            "line": self.line,
            "name": self.name,
            "published": self.published,
            "claimed": self.claimed,
            "observed": self.observed,
            "message": self.message,
            "cases": list(self.cases),
        }


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def _lookup(matrix, name: str) -> tuple[str, set[str]] | None:
    """("feature" | "family" | "topology", matching keys) for a published row name. Several
    topologies may share a name (every P/D layout is "P/D disaggregation")."""
    n = _norm(name)
    for kind, table in (("feature", matrix.features), ("family", matrix.families), ("topology", matrix.topologies)):
        keys = {
            key
            for key, item in table.items()
            if n in {_norm(x) for x in (key, item.title, *getattr(item, "aliases", []))}
        }
        if keys:
            return kind, keys
    return None


def _same(a: str, b: str) -> bool:
    """Experimental support is support, for the docs' purposes."""
    return {a, b} <= {SUPPORTED, EXPERIMENTAL} or a == b


def subject_of(matrix, kind: str, keys: set[str]):
    """(does a case exercise the row, is a rule about the row) for a feature or topology row."""
    if kind == "feature":
        tokens = [f'"{k}" in features' for k in keys]
        return (lambda c: bool(keys & set(c.features)), lambda when: any(t in when for t in tokens))
    return (lambda c: c.topology in keys, lambda when: re.search(r"\bpd\b", when) is not None)


def cases_about(matrix, kind: str, keys: set[str], cases) -> list:
    """The cases that speak for a row, per model variant: those decided by a rule about the row,
    or, for a variant with none, every case of it exercising the row (whatever rule decided it:
    with no rule of its own, the row inherits that claim)."""
    exercises, about = subject_of(matrix, kind, keys)
    rules = {e.index: e.rule for e in matrix.rules}
    groups: dict[tuple[str, str], list] = {}
    for c in cases:
        if exercises(c):
            groups.setdefault((c.family, c.variant), []).append(c)
    out = []
    for group in groups.values():
        out += [
            c
            for c in group
            if c.expectation.rule is not None
            and about(rules[c.expectation.rule].when)
            or c.expectation.kind in ("supported", "known-issue", "flaky")
        ]
    return out


def _verdict(symbols: list[str]) -> str:
    return (
        SUPPORTED
        if SUPPORTED in symbols
        else EXPERIMENTAL
        if EXPERIMENTAL in symbols
        else REJECTED
        if REJECTED in symbols
        else UNTESTED
    )


def _families_named(matrix, text: str) -> set[str]:
    """Families a cell names ("only for MiniMax-M3 sparse models", "DeepSeek-V4 and GLM-5.2")."""
    t = f" {_norm(text)} "
    return {
        key for key, fam in matrix.families.items() if any(f" {_norm(x)} " in t for x in (key, fam.title, *fam.aliases))
    }


def published_per_family(matrix, text: str, symbol: str, families: set[str]) -> dict[str, str]:
    """What a cell says of each family: a qualifier ("only for X and Y") is a claim about the
    other families too — not supported there."""
    named = _families_named(matrix, text) if re.search(r"\bonly\b", text, re.I) else set()
    if named and symbol in (SUPPORTED, EXPERIMENTAL):
        return {f: symbol if f in named else REJECTED for f in families}
    return {f: symbol for f in families}


# A published cell that names an open problem: the matrix must carry a waiver for it.
ISSUE = re.compile(r"\bissue\b|under investigation|intermittent|flaky", re.I)


def _cell_drifts(
    row: PublishedRow, published: str, matrix, kind: str, keys: set[str], cases, by_case: dict[str, Result]
) -> list[Drift]:
    mine = cases_about(matrix, kind, keys, cases)
    rules = {e.index: e.rule for e in matrix.rules}
    key = ", ".join(sorted(keys))
    if not mine:
        return [
            Drift(
                row.line,
                row.name,
                published,
                UNTESTED,
                None,
                f"published {published}, but no case of the matrix exercises {kind} '{key}'",
            )
        ]
    groups: dict[tuple[str, str], list] = {}
    for c in mine:
        groups.setdefault((c.family, c.variant), []).append(c)
    expected = published_per_family(matrix, row.text, published, {f for f, _ in groups})
    # "Supported with the layerwise connector": support under a stated condition, so a refusal
    # where the condition is not met agrees with the cell
    conditional = re.match(r"\W*supported with\b", row.text, re.I) is not None
    out = []
    if published in (SUPPORTED, EXPERIMENTAL) and ISSUE.search(row.text):
        plain = [c.id for c in mine if c.expectation.kind == "supported"]
        if plain:
            out.append(
                Drift(
                    row.line,
                    row.name,
                    published,
                    SUPPORTED,
                    None,
                    f'published "{row.text}" (support with an open issue), the matrix claims plain '
                    f"support with no known-issue or flaky waiver",
                    tuple(plain),
                )
            )
    for source in ("matrix", "run"):
        per: dict[tuple[str, str], tuple[str, list[str], bool]] = {}
        for fv, group in groups.items():
            if source == "matrix":
                symbols = [claim_symbol(c.expectation) for c in group]
            else:
                ran = [c for c in group if c.id in by_case]
                if not ran:
                    continue
                symbols = [observed_symbol(by_case[c.id].expectation, by_case[c.id].outcome) for c in ran]
                group = ran
            verdict = _verdict(symbols)
            if not conditional and _same(expected[fv[0]], SUPPORTED) and REJECTED in symbols and verdict != REJECTED:
                # an unqualified ✅ claims every case of the variant: one refused stack or layout
                # the cell does not name is a disagreement (the P/D cell's own qualifiers — decode
                # PP1, prefill TP a multiple of decode TP — are read from the P/D section)
                refused = [
                    c
                    for c, sym in zip(group, symbols, strict=True)
                    if sym == REJECTED
                    and not (
                        kind == "topology"
                        and c.expectation.rule is not None
                        and re.search(r"decode_pp|pd_tp_multiple", rules[c.expectation.rule].when)
                    )
                ]
                if refused:
                    verdict = REJECTED
            if not _same(verdict, expected[fv[0]]):
                behind = [c for c, s in zip(group, symbols, strict=True) if _same(s, verdict)]
                per[fv] = (verdict, [c.id for c in behind], any(c.expectation.undocumented for c in behind))
        families = sorted({f for f, _ in per})
        for fam in families:
            variants = sorted(v for f, v in per if f == fam)
            whole = (
                set(variants) == {v for f, v in groups if f == fam} and len({per[(fam, v)][0] for v in variants}) == 1
            )
            parts = [(fam, variants)] if whole else [(f"{fam}/{v}", [v]) for v in variants]
            for label, vs in parts:
                verdict = per[(fam, vs[0])][0]
                ids = tuple(i for v in vs for i in per[(fam, v)][1])
                silent = any(per[(fam, v)][2] for v in vs)
                says = "the matrix claims" if source == "matrix" else "the run observed"
                note = "; the guide is silent about this exception" if silent and source == "matrix" else ""
                out.append(
                    Drift(
                        row.line,
                        row.name,
                        published,
                        verdict if source == "matrix" else "",
                        verdict if source == "run" else None,
                        f'published {published} "{row.text}", {says} {verdict} for {label}{note}',
                        ids,
                    )
                )
    return out


def _variant_drifts(row: PublishedRow, matrix, family: str, platform: str) -> list[Drift]:
    """The model table's variant column against the family's variants (and their origin)."""
    fam = matrix.families[family]
    variants = {k: v for k, v in fam.variants.items() if not v.platforms or platform in v.platforms}
    text = row.text
    origin = re.search(r"\(([^)]*implementation[^)]*)\)", text)
    listed = re.sub(r"\([^)]*\)|\bvariants?\b", " ", text)
    items = [i.strip() for i in re.split(r",|\band\b", listed) if i.strip()]
    out = []
    matched: set[str] = set()
    for item in items:
        words = set(_norm(item).split())
        hits = {k for k, v in variants.items() if words <= set(_norm(f"{k} {v.title}").split())}
        if (
            not hits
            and "drafter" in words
            and words - {"drafter"} <= {_norm(d) for d in {d for v in variants.values() for d in v.drafters}}
        ):
            continue  # a drafter the guide lists as a variant: the matrix keeps it as the family's drafter
        if not hits:
            out.append(
                Drift(
                    row.line,
                    row.name,
                    SUPPORTED,
                    "",
                    None,
                    f"published variant \"{item}\", but family '{family}' has no such variant",
                )
            )
        matched |= hits
    for k in sorted(matched):
        if not variants[k].supports_pp and "supportspp" in row.column.lower():
            out.append(
                Drift(
                    row.line,
                    row.name,
                    SUPPORTED,
                    REJECTED,
                    None,
                    f"published with a SupportsPP implementation, the matrix says supports_pp: false for {family}/{k}",
                )
            )
    for k in sorted(set(variants) - matched):
        out.append(
            Drift(
                row.line,
                row.name,
                SUPPORTED,
                SUPPORTED,
                None,
                f"the matrix claims variant '{k}' of '{family}', which the published row does not list",
            )
        )
    if origin:
        said = _norm(origin.group(1))
        want = "upstream+ascend-adapter" if "adapter" in said else "upstream" if "upstream" in said else "ascend"
        wrong = sorted(k for k, v in variants.items() if v.origin != want)
        if wrong:
            out.append(
                Drift(
                    row.line,
                    row.name,
                    SUPPORTED,
                    SUPPORTED,
                    None,
                    f'published "{origin.group(1)}", the matrix says origin '
                    f"{', '.join(sorted({variants[k].origin for k in wrong}))} for {', '.join(wrong)}",
                )
            )
    return out


NEGATIVE = re.compile(r"cannot|not compatible|not supported|does not support|不支持|不兼容", re.I)


def _prose_claims(text: str, matrix) -> list[tuple[int, str, str, str, set[str]]]:
    """(line, sentence, symbol, kind, keys) for each line of the compatibility list that names a
    feature: "X is not compatible with PP" is ❌, "X supports PP ..." ✅."""
    lines = text.splitlines()
    out: list[tuple[int, str, str, str, set[str]]] = []
    start = next((i for i, l in enumerate(lines) if re.search(r"兼容性与限制|^compatibility", l.strip(), re.I)), None)
    if start is None:
        return out
    names = sorted(
        ((x, key) for key, f in matrix.features.items() for x in (f.title, *f.aliases)), key=lambda p: -len(p[0])
    )
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if line.endswith("¶") or line.startswith("#"):
            break
        hit = next((key for x, key in names if x.lower() in line.lower()), None)
        if hit is None:
            continue
        symbol = REJECTED if NEGATIVE.search(line) else SUPPORTED if re.search(r"support", line, re.I) else None
        if symbol:
            out.append((i + 1, line, symbol, "feature", {hit}))
    return out


def _pd_table_drifts(text: str, matrix, cases) -> list[Drift]:
    """The P/D section's table: the Decode node's `--pipeline-parallel-size`. Every P/D case with
    a larger decode PP must be claimed rejected, and some with that decode PP supported."""
    out = []
    for i, line in enumerate(text.splitlines()):
        cells = _split(line)
        if not cells or len(cells) < 3 or cells[0].strip("` ") != "--pipeline-parallel-size":
            continue
        m = re.search(r"\d+", cells[2])
        if not m:
            continue
        d = int(m.group())
        rules = {e.index: e.rule for e in matrix.rules}
        # cases decided by a P/D rule (a wrong partition on a P/D pair speaks of the partition)
        pd = [
            c
            for c in cases
            if c.attrs.get("pd")
            and c.expectation.rule is not None
            and re.search(r"\bpd\b", rules[c.expectation.rule].when)
        ]
        wrong = [c.id for c in pd if c.attrs["decode_pp"] > d and claim_symbol(c.expectation) != REJECTED]
        if wrong:
            out.append(
                Drift(
                    i + 1,
                    "P/D: Decode --pipeline-parallel-size",
                    REJECTED,
                    SUPPORTED,
                    None,
                    f"published decode PP {d}, the matrix does not reject decode PP > {d}",
                    tuple(wrong),
                )
            )
        if pd and not any(c.attrs["decode_pp"] == d and c.expectation.kind == "supported" for c in pd):
            out.append(
                Drift(
                    i + 1,
                    "P/D: Decode --pipeline-parallel-size",
                    SUPPORTED,
                    REJECTED,
                    None,
                    f"published decode PP {d}, but no P/D case with decode PP {d} is claimed supported",
                )
            )
    return out


def docs_drift(doc: Path, matrix, cases, records: list[Result] | None = None) -> list[Drift]:
    """Every published cell that disagrees with the claims of ``cases`` (or with ``records``),
    family by family: one line per disagreement, with the cases behind it."""
    out: list[Drift] = []
    by_case = {r.case: r for r in records or []}
    text = doc.read_text(encoding="utf-8", errors="replace")
    platform = next(iter({c.platform for c in cases}), "")
    for row in read_tables(text):
        published = published_symbol(row.text, row.column)
        found = _lookup(matrix, row.name)
        if published is None:
            out.append(Drift(row.line, row.name, "", "", None, "blank cell: the docs say nothing"))
            continue
        if found is None:
            out.append(
                Drift(
                    row.line,
                    row.name,
                    published,
                    "",
                    None,
                    f"published {published}, but no feature or family of the matrix is named so",
                )
            )
            continue
        kind, keys = found
        if kind == "family":
            for family in sorted(keys):
                out += _variant_drifts(row, matrix, family, platform)
            continue
        out += _cell_drifts(row, published, matrix, kind, keys, cases, by_case)
    for line, sentence, symbol, kind, keys in _prose_claims(text, matrix):
        row = PublishedRow(line, sentence, sentence, "compatibility list")
        # the list speaks of the feature as a whole: compared with its best verdict over families
        mine = cases_about(matrix, kind, keys, cases)
        verdict = _verdict([claim_symbol(c.expectation) for c in mine]) if mine else UNTESTED
        if not _same(verdict, symbol):
            out.append(
                Drift(
                    line,
                    sentence,
                    symbol,
                    verdict,
                    None,
                    f"the compatibility list says {symbol}, the matrix claims {verdict} for {', '.join(sorted(keys))}",
                    tuple(c.id for c in mine if _same(claim_symbol(c.expectation), verdict)),
                )
            )
    out += _pd_table_drifts(text, matrix, cases)
    return out

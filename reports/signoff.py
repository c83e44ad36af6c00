"""Comparing runs and signing a release off: reads results only."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.outcomes import FAILS_RUN, NO_LAUNCH, WAIVED, WAIVER_KINDS, Outcome
from harness.results import store as results
from harness.results.meta import run_stack
from harness.results.result import POSITION, Result
from harness.target.versions import MACHINE, Change, differences, stack, stack_changes
from harness.target.versions import unknown as versions_unknown

from . import markdown
from .cells import Entry, entries_from_results, waiver_text
from .render import header, load_meta


@dataclass(frozen=True)
class CaseDiff:
    """One case that differs between a run and its baseline: its cell, the baseline's outcome
    (None: it appeared), the run's (None: it vanished) and, for a regression, the run's reason;
    for a flaky case, its outcomes across the run's repeats."""

    kind: str  # regressed, recovered, changed, appeared, vanished or flaky
    case: str
    cell: Entry | None = None
    before: str | None = None
    after: str | None = None
    reason: str = ""
    repeats: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.kind == "flaky":
            return f"{self.case}: {' / '.join(self.repeats)} across repeats"
        assert self.cell is not None
        label = f"{self.cell.family} / {self.cell.row} / {self.cell.column}"
        if self.kind == "appeared":
            return f"{label}: {self.after} ({self.case})"
        if self.kind == "vanished":
            return f"{label}: was {self.before} ({self.case})"
        return f"{label}: {self.before} -> {self.after} ({self.case})" + (
            f": {self.reason}" if self.kind == "regressed" else ""
        )

    def to_json(self) -> dict:
        cell = self.cell
        return {
            "case": self.case,
            **({"family": cell.family, "row": cell.row, "column": cell.column} if cell else {}),
            **(
                {"repeats": list(self.repeats)}
                if self.kind == "flaky"
                else {"before": self.before, "after": self.after}
            ),
            **({"reason": self.reason} if self.kind == "regressed" else {}),
        }


DIFF_KINDS = ("regressed", "recovered", "changed", "appeared", "vanished", "flaky")


@dataclass
class Diff:
    regressed: list[CaseDiff] = field(default_factory=list)
    recovered: list[CaseDiff] = field(default_factory=list)
    changed: list[CaseDiff] = field(default_factory=list)
    appeared: list[CaseDiff] = field(default_factory=list)
    vanished: list[CaseDiff] = field(default_factory=list)
    flaky: list[CaseDiff] = field(default_factory=list)
    # what moved in a node's stack since the baseline (versions, instruction set, SoC): a case that
    # changed between the two may owe it to that
    stack: list[Change] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"{name:9s} {item}" for name in (*DIFF_KINDS, "stack") for item in getattr(self, name)]

    def to_json(self) -> dict:
        return {name: [item.to_json() for item in getattr(self, name)] for name in (*DIFF_KINDS, "stack")}


def fails(outcome: str | None) -> bool:
    return outcome in FAILS_RUN


def change(before: Entry | None, after: Entry) -> CaseDiff | None:
    """How a case moved from ``before`` (None: it was not there) to ``after``: the one rule of
    regressed, recovered, changed and appeared that ``ppconf diff`` and the table across stacks
    (``reports.stacks``) share. None: the same outcome."""
    case = after.case
    if before is None:
        return CaseDiff("appeared", case, after, after=after.outcome)
    if fails(after.outcome) and not fails(before.outcome):
        return CaseDiff("regressed", case, after, before.outcome, after.outcome, after.reason)
    if fails(before.outcome) and not fails(after.outcome):
        return CaseDiff("recovered", case, after, before.outcome, after.outcome)
    if before.outcome != after.outcome:
        return CaseDiff("changed", case, after, before.outcome, after.outcome)
    return None


def diff_entries(now: dict[str, Entry], before: dict[str, Entry], d: Diff | None = None) -> Diff:
    """The cases of ``now`` that moved since ``before``, and those of ``before`` that vanished."""
    d = d if d is not None else Diff()
    for case, e in sorted(now.items()):
        moved = change(before.get(case), e)
        if moved is not None:
            getattr(d, moved.kind).append(moved)
    d.vanished = [
        CaseDiff("vanished", case, b, before=b.outcome) for case, b in sorted(before.items()) if case not in now
    ]
    return d


def diff_runs(run_dir: Path, baseline_dir: Path) -> Diff:
    records = results.read(results.check_run_dir(run_dir))
    base_records = results.read(results.check_run_dir(baseline_dir))
    now = {e.case: e for e in entries_from_results(records)}
    before = {e.case: e for e in entries_from_results(base_records)}
    moved = stack_changes(run_stack(load_meta(baseline_dir), base_records), run_stack(load_meta(run_dir), records))
    d = diff_entries(now, before, Diff(stack=moved))
    for case, outcomes in sorted(results.history(run_dir).items()):
        if len(set(outcomes)) > 1:
            d.flaky.append(CaseDiff("flaky", case, repeats=tuple(o.value for o in outcomes)))
    return d


@dataclass
class SignOff:
    ok: bool
    reasons: list[str]
    page: str
    waivers: list[Entry] = field(default_factory=list)  # the waived cases it accepted
    stack: dict[str, str] = field(default_factory=dict)  # node -> the stack it signs there
    cases: int = 0
    warnings: list[str] = field(default_factory=list)  # said, but no reason to refuse

    def to_json(self) -> dict:
        return {
            "verdict": "YES" if self.ok else "NO",
            "ok": self.ok,
            "cases": self.cases,
            "reasons": self.reasons,
            "waivers": [waiver_json(e) for e in self.waivers],
            "stack": self.stack,
            "warnings": self.warnings,
        }


def _one_line(text: object) -> str:
    """A value as one line of Markdown, so that no text a run recorded (an HTTP error body, a log
    line) can end a bullet early, start a line of its own or carry raw HTML into signoff.md."""
    return markdown.text(text)


def waiver(e: Entry) -> str:
    """A waived case as sign-off lists it: what waived it, who owns it, until when."""
    return f"{e.outcome} {e.case}: {waiver_text(e.expectation)}"


def waiver_json(e: Entry) -> dict:
    """The same as ``waiver``, field by field (null: no link, no owner, no expiry)."""
    exp = e.expectation
    until = exp.until.isoformat() if exp.until else None
    return {
        "case": e.case,
        "outcome": e.outcome,
        "kind": exp.kind.value,
        "link": exp.link,
        "owner": exp.owner,
        "until": until,
    }


def _verdicts(run_dir: Path, suite: str | None, records: list[Result]) -> list[str]:
    """Reasons the records are not one run's verdicts on their claims: an outcome the judge
    never gives that claim, a record of another suite, two verdicts on one claim of one case
    (concatenated or edited results; a retry after ERROR aside)."""
    reasons = []
    for r in records:
        kind = r.expectation.kind
        if r.outcome not in kind.outcomes and r.outcome not in (Outcome.SKIP, Outcome.ERROR):
            reasons.append(f"{r.outcome.value} is no verdict on a {kind.value} claim: {r.case}")
        if suite and r.suite != suite:
            reasons.append(f"a record of the suite {r.suite!r}, not this run's {suite!r}: {r.case}")
    seen: dict[tuple[str, str], list[Outcome]] = {}
    for r in results.read_all(run_dir):
        key = (r.case, json.dumps([r.expectation.claim(), r.plan_key], sort_keys=True, default=str))
        seen.setdefault(key, []).append(r.outcome)
    for (case, _), outcomes in seen.items():
        final = [o for o in outcomes[:-1] if o is not Outcome.ERROR] + outcomes[-1:]
        if len(final) > 1:
            reasons.append(
                f"{len(final)} verdicts on one claim ({' then '.join(o.value for o in final)}): {case}; "
                "a run gives one (results concatenated or edited?)"
            )
    return reasons


def _baseline(run_dir: Path, baseline_dir: Path, baseline: list[Result], records: list[Result]) -> list[str]:
    """Reasons a baseline cannot vouch for this run: empty, another suite, nothing in common."""
    if not baseline:
        return [f"the baseline {baseline_dir} holds no results to compare with"]
    mine, theirs = load_meta(run_dir).get("suite"), load_meta(baseline_dir).get("suite")
    if mine and theirs and mine != theirs:
        return [f"the baseline {baseline_dir} ran the suite {theirs!r}, this run {mine!r}: nothing to compare"]
    if not {r.case for r in records} & {r.case for r in baseline}:
        return [f"the baseline {baseline_dir} shares no case with this run: nothing to compare"]
    return [f"regressed since the baseline: {r}" for r in diff_runs(run_dir, baseline_dir).regressed]


def signoff(
    run_dir: Path, baseline_dir: Path | None, claims: dict[str, dict] | str, today: datetime.date | None = None
) -> SignOff:
    """``claims``: case id -> the matrix's current claim (``Expectation.claim``); results must cover
    each, unchanged. A string instead says why the claims could not be known: then coverage cannot
    be checked and the answer is NO."""
    today = today or datetime.date.today()
    records = results.read(results.check_run_dir(run_dir))
    baseline = results.read(results.check_run_dir(baseline_dir)) if baseline_dir is not None else None
    meta = load_meta(run_dir)
    entries = entries_from_results(records)
    reasons: list[str] = []
    if not records:
        reasons.append("the run holds no results")
    elif all(r.outcome is Outcome.SKIP for r in records):
        reasons.append(f"nothing in this run launched: all {len(records)} cases were skipped")
    accepted = []
    for e in entries:
        exp = e.expectation
        if e.outcome in FAILS_RUN:
            reasons.append(f"{e.outcome}: {e.case} — {e.reason}")
        if exp.kind in WAIVER_KINDS and exp.until and exp.until < today:
            reasons.append(
                f"{exp.kind.value} waiver expired on {exp.until.isoformat()}: {e.case} ({exp.link}, owner {exp.owner})"
            )
        elif e.outcome in WAIVED:
            accepted.append(e)
        if exp.kind not in NO_LAUNCH and e.outcome == Outcome.SKIP:
            reasons.append(f"claimed {exp.kind.value} but not tested: {e.case} — {e.reason}")
    reasons += _verdicts(run_dir, meta.get("suite"), records)
    if isinstance(claims, str):
        reasons.append(f"coverage cannot be checked: {claims}")
    else:
        have = {e.case: e for e in entries}
        for case, claim in claims.items():
            if case not in have:
                reasons.append(f"claimed but not tested (no result): {case}")
            elif have[case].expectation.claim() != {k: v for k, v in claim.items() if k not in POSITION}:
                reasons.append(f"the claim changed since this run, so the run does not verify it: {case}")
    if baseline_dir is not None and baseline is not None:
        reasons += _baseline(run_dir, baseline_dir, baseline, records)
    signed, why_not, warnings = signed_stack(records)
    reasons += why_not
    ok = not reasons
    page = [
        f"# Sign-off: {'YES' if ok else 'NO'}",
        "",
        f"Run: {_one_line(run_dir)}",
        "",
        _one_line(header(meta, records)),
        "",
    ]
    if signed:
        page += ["Signed stack (as probed on each node when its cases ran):", ""]
        page += [f"- {_one_line(node)}: {_one_line(line)}" for node, line in sorted(signed.items())] + [""]
    if warnings:
        page += ["Warnings:", ""] + [f"- {_one_line(w)}" for w in warnings] + [""]
    if baseline_dir is not None:
        page += [f"Baseline: {_one_line(baseline_dir)}", ""]
    if accepted:
        page += [f"Waivers accepted ({len(accepted)}):", ""] + [f"- {_one_line(waiver(w))}" for w in accepted] + [""]
    if ok:
        page.append(
            f"All {len(entries)} cases match their claims; no waiver has expired"
            + ("; nothing regressed since the baseline." if baseline_dir else ".")
        )
    else:
        page += ["Reasons:", ""] + [f"- {_one_line(r)}" for r in reasons]
    return SignOff(ok, reasons, "\n".join(page) + "\n", accepted, signed, len(entries), warnings)


def signed_stack(records: list[Result]) -> tuple[dict[str, str], list[str], list[str]]:
    """What a sign-off signs: per node, the one stack its cases ran on (its machine's instruction
    set and SoC included). Reasons to refuse when no node's stack is known, a node's is unknown
    (its probe failed, or the record holds no version of vLLM) or changed within the run (a
    resume across an upgrade or onto another machine), since then the sign-off could not name
    what it signed, or when two nodes ran different stacks. Warnings when two nodes are different
    machines: the guide asks for one stack, not one kind of machine."""
    seen: dict[str, dict[str, list[str]]] = {}
    unknown: dict[str, str] = {}
    unrecorded = []
    probed: dict[str, dict[str, str | None]] = {}
    for r in records:
        if r.outcome is Outcome.SKIP:
            continue  # nothing ran, on no stack
        if not r.versions:
            unrecorded.append(r.case)
        for node, versions in r.versions.items():
            why = versions_unknown(versions)
            if why:
                unknown.setdefault(node, why)
                continue
            line = stack({k: str(v) for k, v in versions.items()})
            seen.setdefault(node, {}).setdefault(line, []).append(r.case)
            probed[node] = versions
    signed, reasons = {}, []
    if unrecorded:
        reasons.append(
            f"{len(unrecorded)} case(s) record no node's stack, so the sign-off cannot name what they ran on: "
            + ", ".join(unrecorded[:5])
            + (", ..." if len(unrecorded) > 5 else "")
        )
    for node, why in sorted(unknown.items()):
        reasons.append(f"the stack of node {node} is unknown, so the sign-off cannot name it: {why}")
    for node, stacks in sorted(seen.items()):
        if len(stacks) > 1:
            reasons.append(
                f"node {node} ran this run's cases on {len(stacks)} different stacks: "
                + "; ".join(f"{s} ({len(c)} cases)" for s, c in stacks.items())
            )
            continue
        if node not in unknown:
            ((line, _),) = stacks.items()
            signed[node] = line
    if not signed and not reasons and any(r.outcome is not Outcome.SKIP for r in records):
        reasons.append("no node's stack is known, so the sign-off cannot name what it signs")
    # the guide asks for one stack on every node: nodes that each kept theirs may still differ
    differ = differences({n: probed[n] for n in signed}, list(signed))
    if differ:
        reasons.append("the nodes ran different stacks: " + "; ".join(differ))
    warnings = []
    machines = differences({n: probed[n] for n in signed}, list(signed), keys=MACHINE)
    if machines:
        warnings.append("the nodes are different machines, so a cell may differ by node: " + "; ".join(machines))
    return signed, reasons, warnings


def current_claims(run_dir: Path, matrix) -> dict[str, dict] | str:
    """What the run's suite claims today, case by case; or why that cannot be known."""
    from harness.cases.expand import expand

    if not (run_dir / results.META).exists():
        return f"{run_dir} has no {results.META}, so the suite it claims to cover is unknown"
    meta = load_meta(run_dir)
    suite = meta.get("suite")
    if not suite:
        return f"{run_dir / results.META} names no suite"
    if suite not in matrix.suites:
        return f"the suite {suite!r} of this run is not in the matrices {matrix.root}"
    # claims that depend on the links are read as on the run's cluster (run.json's `network`)
    return {c.id: c.expectation.claim() for c in expand(matrix, suite, network=meta.get("network")).cases}

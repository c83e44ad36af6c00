"""Comparing runs and signing a release off: reads results only."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.outcomes import FAILS_RUN, NO_LAUNCH, Kind, Outcome
from harness.results import store as results
from harness.results.result import Result
from harness.target.versions import differences, stack

from .cells import Entry, entries_from_results
from .render import header, load_meta


def _label(e: Entry) -> str:
    return f"{e.family} / {e.row} / {e.column}"


@dataclass
class Diff:
    regressed: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    appeared: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for name in ("regressed", "recovered", "changed", "appeared", "vanished", "flaky"):
            for item in getattr(self, name):
                out.append(f"{name:9s} {item}")
        return out


def _fails(outcome: str | None) -> bool:
    return outcome in FAILS_RUN


def diff_runs(run_dir: Path, baseline_dir: Path) -> Diff:
    now = {e.case: e for e in entries_from_results(results.read(results.check_run_dir(run_dir)))}
    before = {e.case: e for e in entries_from_results(results.read(results.check_run_dir(baseline_dir)))}
    d = Diff()
    for case, e in sorted(now.items()):
        b = before.get(case)
        if b is None:
            d.appeared.append(f"{_label(e)}: {e.outcome} ({case})")
        elif _fails(e.outcome) and not _fails(b.outcome):
            d.regressed.append(f"{_label(e)}: {b.outcome} -> {e.outcome} ({case}): {e.reason}")
        elif _fails(b.outcome) and not _fails(e.outcome):
            d.recovered.append(f"{_label(e)}: {b.outcome} -> {e.outcome} ({case})")
        elif b.outcome != e.outcome:
            d.changed.append(f"{_label(e)}: {b.outcome} -> {e.outcome} ({case})")
    d.vanished = [f"{_label(b)}: was {b.outcome} ({case})" for case, b in sorted(before.items()) if case not in now]
    for case, outcomes in sorted(results.history(run_dir).items()):
        if len(set(outcomes)) > 1:
            d.flaky.append(f"{case}: {' / '.join(o.value for o in outcomes)} across repeats")
    return d


@dataclass
class SignOff:
    ok: bool
    reasons: list[str]
    page: str


def _one_line(text: object) -> str:
    """A value as one line, so that no text a run recorded (an HTTP error body, a log line) can
    end a bullet early or start a line of its own in signoff.md."""
    return re.sub(r"\s*[\r\n\v\f\x85\u2028\u2029]+\s*", " ", str(text)).strip()


def signoff(
    run_dir: Path, baseline_dir: Path | None, claims: dict[str, dict] | str, today: datetime.date | None = None
) -> SignOff:
    """``claims``: case id -> the matrix's current expectation; results must cover each, unchanged.
    A string instead says why the claims could not be known: then coverage cannot be checked and
    the answer is NO."""
    today = today or datetime.date.today()
    records = results.read(results.check_run_dir(run_dir))
    baseline = results.read(results.check_run_dir(baseline_dir)) if baseline_dir is not None else None
    entries = entries_from_results(records)
    reasons: list[str] = []
    if not records:
        reasons.append("the run holds no results")
    for e in entries:
        exp = e.expectation
        if e.outcome in FAILS_RUN:
            reasons.append(f"{e.outcome}: {e.case} — {e.reason}")
        if exp.kind is Kind.KNOWN_ISSUE and exp.until and exp.until < today:
            reasons.append(
                f"known-issue waiver expired on {exp.until.isoformat()}: {e.case} ({exp.link}, owner {exp.owner})"
            )
        if exp.kind not in NO_LAUNCH and e.outcome == Outcome.SKIP:
            reasons.append(f"claimed {exp.kind.value} but not tested: {e.case} — {e.reason}")
    if isinstance(claims, str):
        reasons.append(f"coverage cannot be checked: {claims}")
    else:
        have = {e.case: e for e in entries}
        for case, claim in claims.items():
            if case not in have:
                reasons.append(f"claimed but not tested (no result): {case}")
            elif have[case].expectation.to_json() != claim:
                reasons.append(f"the claim changed since this run, so the run does not verify it: {case}")
    if baseline_dir is not None:
        if not baseline:
            reasons.append(f"the baseline {baseline_dir} holds no results to compare with")
        reasons += [f"regressed since the baseline: {r}" for r in diff_runs(run_dir, baseline_dir).regressed]
    signed, why_not = signed_stack(records)
    reasons += why_not
    ok = not reasons
    meta = load_meta(run_dir)
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
    if baseline_dir is not None:
        page += [f"Baseline: {_one_line(baseline_dir)}", ""]
    if ok:
        page.append(
            f"All {len(entries)} cases match their claims; no waiver has expired"
            + ("; nothing regressed since the baseline." if baseline_dir else ".")
        )
    else:
        page += ["Reasons:", ""] + [f"- {_one_line(r)}" for r in reasons]
    return SignOff(ok, reasons, "\n".join(page) + "\n")


def signed_stack(records: list[Result]) -> tuple[dict[str, str], list[str]]:
    """What a sign-off signs: per node, the one stack its cases ran on. Reasons to refuse when a
    node's stack is unknown (its probe failed) or changed within the run (a resume across an
    upgrade), since then the sign-off could not name what it signed, or when two nodes ran
    different stacks."""
    seen: dict[str, dict[str, list[str]]] = {}
    probed: dict[str, dict[str, str | None]] = {}
    for r in records:
        for node, versions in r.versions.items():
            line = stack({k: str(v) for k, v in versions.items()})  # a version the probe could not read: None
            seen.setdefault(node, {}).setdefault(line, []).append(r.case)
            probed[node] = versions
    signed, reasons = {}, []
    for node, stacks in sorted(seen.items()):
        if len(stacks) > 1:
            reasons.append(
                f"node {node} ran this run's cases on {len(stacks)} different stacks: "
                + "; ".join(f"{s} ({len(c)} cases)" for s, c in stacks.items())
            )
            continue
        ((line, cases),) = stacks.items()
        if line.startswith("version probe"):
            reasons.append(f"the stack of node {node} is unknown, so the sign-off cannot name it: {line}")
            continue
        signed[node] = line
    # the guide asks for one stack on every node: nodes that each kept theirs may still differ
    differ = differences({n: probed[n] for n in signed}, list(signed))
    if differ:
        reasons.append("the nodes ran different stacks: " + "; ".join(differ))
    return signed, reasons


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
    return {c.id: c.expectation.to_json() for c in expand(matrix, suite, network=meta.get("network")).cases}

"""Lint the rule set against every case of every suite before anything runs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from harness.cases.case import Case
from harness.cases.expand import expand
from harness.cases.workload import workload_problems
from harness.matrix.load import Matrix
from harness.matrix.pattern import PATTERN_BUDGET_S, Pattern, backtracking_shape
from harness.matrix.schema import Phase, Reference
from harness.matrix.source import Where
from harness.outcomes import NEEDS_REFERENCE
from harness.target.assertions import engine_assertions

# Exception classes that mean the code under test crashed, not that it refused a configuration
# with a validation message, and the message shapes Python gives them. A claimed rejection whose
# pattern matches one of them is a bug passing as XFAIL.
CRASHES = {
    "ZeroDivisionError": r"division or modulo by zero|division by zero",
    "AssertionError": r"(^|[^\w])assert\s",
    "AttributeError": r"has no attribute",
    "KeyError": r"KeyError",
    "IndexError": r"index out of range",
    "TypeError": r"takes \d+ positional argument|unsupported operand type|object is not (callable|subscriptable)",
    "UnboundLocalError": r"referenced before assignment",
}


def crash_in(pattern: str) -> str | None:
    """The crash a rejection pattern matches, if any: a crash class as a log line would print it,
    the message shape Python gives that class written in the pattern, or the text of an
    ``assert`` of the installed engine's source (named with its file and line)."""
    known = engine_assertions()  # read first: the budget is the pattern's, not the reading's
    rx = Pattern(pattern)
    for name, shape in CRASHES.items():
        if rx.search(f"{name}: x") or name in pattern or re.search(shape, pattern):
            return name
    for assertion in known:
        if rx.search(assertion.text):
            return f"AssertionError, the assertion at {assertion.where}: {assertion.text[len('AssertionError: ') :]!r}"
    return None


@dataclass(frozen=True)
class Finding:
    """One thing lint says: how grave it is, its message, and what it is about: a line of a
    matrix file (``where``, when it has one), or the suite and cluster whose launch plans were
    checked (``harness.preflight.lint_plans``)."""

    message: str
    where: Where | None = None
    severity: str = "error"  # "error" | "warning" | "note"
    suite: str | None = None
    cluster: str | None = None

    def __str__(self) -> str:
        if self.suite is not None:
            return f"{self.suite} on {self.cluster}: {self.message}"
        return f"{self.where}: {self.message}" if self.where else self.message

    def to_json(self) -> dict:
        at = self.where
        about = (
            {"suite": self.suite, "cluster": self.cluster}
            if self.suite is not None
            else {"file": at.file if at else None, "line": at.line if at else None, "column": at.column if at else None}
        )
        return {"severity": self.severity, **about, "message": self.message}


@dataclass
class LintReport:
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    cases: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


def _workloads(m: Matrix) -> list[tuple[list[Phase], str, tuple[Any, ...]]]:
    """Every workload the matrix declares: its phases, the section and path of its entry."""
    out: list[tuple[list[Phase], str, tuple[Any, ...]]] = []
    for entry in m.rules:
        if entry.rule.workload is not None:
            out.append((entry.rule.workload, "rules", (str(entry.index), "workload")))
    for name, suite in m.suites.items():
        if suite.workload is not None:
            out.append((suite.workload, "suites", (name, "workload")))
        for g, group in enumerate(suite.groups):
            if group.workload is not None:
                out.append((group.workload, "suites", (name, "groups", g, "workload")))
    return out


def _perf_gates_without_dataset(m: Matrix) -> list[Finding]:
    """A perf gate measured by AISBench on its dataset config's default data: vllm-ascend's
    baseline was measured on the data its case names (``dataset_path``), so the gate compares
    two different workloads."""
    out = []
    for phases, section, (name, *path) in _workloads(m):
        for i, phase in enumerate(phases):
            gate = phase.perf_baseline
            spec = gate.aisbench if gate is not None else None
            if spec is not None and spec.dataset is None:
                data = f" ({spec.baseline_dataset})" if spec.baseline_dataset else ""
                out.append(
                    Finding(
                        f"phase {phase.label}: its perf gate's AISBench run names no local dataset, so it "
                        f"measures {spec.dataset_config}'s default data, not the baseline's{data}: set "
                        "aisbench.dataset to a local copy of the data the baseline was measured on",
                        m.at(section, name, *path, i, "perf_baseline", "aisbench"),
                    )
                )
    return out


def _references(m: Matrix) -> list[tuple[Reference, Where | None]]:
    """Every reference the matrix declares, with the position of its entry."""
    out: list[tuple[Reference, Where | None]] = []
    for fname, family in m.families.items():
        if family.reference is not None:
            out.append((family.reference, m.at("families", fname, "reference")))
        for vname, variant in family.variants.items():
            if variant.reference is not None:
                out.append((variant.reference, m.at("families", fname, "variants", vname, "reference")))
    for name, suite in m.suites.items():
        out.append((suite.reference, m.at("suites", name, "reference")))
    for entry in m.rules:
        if entry.rule.reference is not None:
            out.append((entry.rule.reference, entry.where))
    return out


def _scores_without_dataset(m: Matrix) -> list[Finding]:
    """An AISBench score whose baseline was measured on a named dataset (vllm-ascend's
    ``dataset_path``: their runner copies it where the dataset config reads, gsm8k-lite in place of
    gsm8k) run on its dataset config's default data: two different question sets."""
    return [
        Finding(
            f"its AISBench score names no local dataset, so it reads {score.dataset_config}'s default data, not "
            f"the baseline's ({score.baseline_dataset}): set score.dataset to a local copy of {score.baseline_dataset}",
            at,
        )
        for ref, at in _references(m)
        if (score := ref.score) is not None and score.baseline_dataset and score.dataset is None
    ]


def lint(m: Matrix) -> LintReport:
    report = LintReport()
    # keyed by suite too: one case id in two suites may be claimed differently (a `suite` condition)
    cases: dict[tuple[str, str], Case] = {}
    for suite in m.suites:
        for case in expand(m, suite).cases:
            cases.setdefault((suite, case.id), case)
    report.cases = len(cases)
    matched = {e.index: 0 for e in m.rules}
    decided = {e.index: 0 for e in m.rules}
    for case in cases.values():
        first = None
        for entry in m.rules:
            if entry.condition.evaluate(case.attrs):
                matched[entry.index] += 1
                if first is None:
                    first = entry
                    decided[entry.index] += 1
        if first is None:
            report.warnings.append(
                Finding(f"case {case.id} (suite {case.suite}): no rule covers it; it is 'unspecified'")
            )
        elif case.expectation.kind in NEEDS_REFERENCE:  # served and asked its workload
            at = first.where if first.rule.workload is not None else m.where.get(("suites", case.suite))
            for problem in workload_problems(m, case):
                report.errors.append(Finding(f"{problem.message} (case {case.id})", problem.where or at))
    report.warnings += _unused_sides(m, cases.values())
    report.warnings += _idle_skips(m, cases.values())
    seen: dict[str, object] = {}
    for entry in m.rules:
        where, rule = entry.where, f"rule '{entry.rule.when}'"
        if matched[entry.index] == 0:
            report.errors.append(Finding(f"{rule} matches no case of any suite", where))
        elif decided[entry.index] == 0:
            report.errors.append(
                Finding(
                    f"{rule} is shadowed: every case it matches ({matched[entry.index]}) is decided by an earlier rule",
                    where,
                )
            )
        crash = crash_in(entry.rule.error) if entry.rule.expect == "rejected" and entry.rule.error else None
        if crash:
            report.warnings.append(
                Finding(
                    f"{rule}: its error /{entry.rule.error}/ matches a crash ({crash}), not a "
                    f"refusal naming its cause; claim it as known-issue with a link",
                    where,
                )
            )
        if entry.rule.error and (shape := backtracking_shape(entry.rule.error)):
            report.warnings.append(Finding(_backtracks(rule, entry.rule.error, shape), where))
        text = " ".join(entry.rule.when.split())
        if text in seen:
            report.errors.append(Finding(f"{rule} repeats the condition of the rule at {seen[text]}", where))
        seen.setdefault(text, entry.where)
    report.warnings += _perf_gates_without_dataset(m)
    report.warnings += _scores_without_dataset(m)
    for name, feature in m.features.items():
        for i, pattern in enumerate(feature.silent_disable):
            if shape := backtracking_shape(pattern):
                report.warnings.append(
                    Finding(
                        _backtracks(f"feature {name}: silent_disable", pattern, shape),
                        m.at("features", name, "silent_disable", i),
                    )
                )
    report.warnings = [replace(w, severity="warning") for w in report.warnings]
    return report


def _unused_sides(m: Matrix, cases) -> list[Finding]:
    """A variant's ``prefill:``/``decode:`` sides where no case of the variant is P/D: never used."""
    pd = {(c.family, c.variant) for c in cases if m.topologies[c.topology].decode is not None}
    return [
        Finding(
            f"families.{fname}.variants.{vname}.{role}: no case of the variant is P/D, so this side is never used",
            m.at("families", fname, "variants", vname, role),
        )
        for fname, family in m.families.items()
        for vname, variant in family.variants.items()
        for role in ("prefill", "decode")
        if getattr(variant, role) is not None and (fname, vname) not in pd
    ]


def _idle_skips(m: Matrix, cases) -> list[Finding]:
    """A group side's ``skip_features`` naming a feature no P/D case of that group runs: it skips nothing."""
    ran: dict[tuple[str, int], set[str]] = {}
    for c in cases:
        if c.group is not None and m.topologies[c.topology].decode is not None:
            ran.setdefault((c.suite, c.group), set()).update(c.features)
    return [
        Finding(
            f"suites.{suite}.groups[{gi}].{role}.skip_features: no P/D case of the group runs {feat}, "
            f"so it skips nothing",
            m.at("suites", suite, "groups", gi, role, "skip_features"),
        )
        for suite, s in m.suites.items()
        for gi, group in enumerate(s.groups)
        for role in ("prefill", "decode")
        for feat in (getattr(group, role).skip_features if getattr(group, role) else ())
        if feat not in ran.get((suite, gi), set())
    ]


def _backtracks(subject: str, pattern: str, shape: str) -> str:
    return (
        f"{subject}: its pattern /{pattern}/ has {shape}, which can backtrack for long on a log line "
        f"that almost matches (a search stops after {PATTERN_BUDGET_S:g} s and the case is ERROR); "
        f"write it without"
    )

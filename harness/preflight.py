"""What is checked before anything launches, by every entry point: each launch plan against the
engine (``harness.plan.validate``) and each case's reference against the cluster it would run on.
Answers are lines to print; nothing here prints or launches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

from harness.cases.case import Case
from harness.cases.expand import expand
from harness.cases.lint import Finding
from harness.cases.workload import size_problems
from harness.check.references.goldens import load_golden
from harness.check.serving.stack import layer_counts
from harness.launch import PlanError
from harness.matrix.load import Matrix
from harness.outcomes import NEEDS_REFERENCE
from harness.plan.cluster import DEFAULT_CLUSTERS, Cluster, load_cluster
from harness.plan.deployment import plan
from harness.plan.reference import ReferenceUnavailable, plan_reference, resolve
from harness.plan.validate import PlanReport, engine, summarize, validate_cases


def check_plannable(m: Matrix, case: Case, cluster: Cluster) -> str | None:
    """Why the case's reference cannot run on ``cluster`` (None when it can): lint's question."""
    ref = resolve(m, case)
    try:
        if ref.launches:
            plan_reference(m, case, cluster, ref)
        elif ref.spec.kind == "golden":
            load_golden(ref.path(ref.spec.golden or ""))
        if ref.spec.score is not None:
            from harness.check.scores.evaluate import missing_files

            missing = missing_files(ref.spec.score, ref.base_dir)
            if missing:
                return missing
    except (PlanError, ReferenceUnavailable) as err:
        return f"{ref.describe()}: {err}"
    return None


def plan_errors(m: Matrix, cases: list[Case], cluster: Cluster) -> list[str]:
    """The problems in these cases' launch plans, each said once: first each served case's
    workload too large to build or longer than its model holds (``size_problems``, found from
    the sizes before anything is built), then the plans checked against the engine."""
    sizes = [
        f"case {case.id} (suite {case.suite}): {problem}"
        for case in cases
        if case.expectation.kind in NEEDS_REFERENCE
        for problem in size_problems(m, case)
    ]
    return summarize(sizes + validate_cases(m, cases, cluster).errors)


@dataclass
class PlansLint:
    findings: list[Finding] = field(default_factory=list)  # each pair's notes, then its errors
    plans: int = 0
    cases: int = 0
    pairs: int = 0
    errors: int = 0
    notes: int = 0
    ok: bool = True

    @property
    def lines(self) -> list[str]:
        """The findings as lint prints them, then a summary line."""
        return [f"{f.severity}: {f}" for f in self.findings] + [
            f"plans: {self.plans} launch plans of {self.cases} cases in {self.pairs} suite/cluster pairs: "
            f"{self.errors} errors, {self.notes} notes"
        ]

    def to_json(self) -> dict:
        return asdict(self) | {"findings": [f.to_json() for f in self.findings]}


def _nothing(*_: object) -> None:
    pass


def lint_plans(
    m: Matrix,
    suites: list[str] | None,
    cluster_ref: str | None,
    stage: Callable[[str, int | None], None] = _nothing,
    advance: Callable[[], None] = _nothing,
) -> PlansLint:
    """Plan every case of the suites on the cluster (default: each suite on every shipped
    inventory of its platform, this host for cpu) and check the plans against the engine;
    ``stage`` is told what it turns to (with its number of cases), ``advance`` each case done."""
    for name in suites or []:
        m.suite(name)  # an unknown suite is an error before anything is planned
    if cluster_ref:
        cluster = load_cluster(cluster_ref)
        pairs = [
            (s, cluster) for s in (suites or sorted(n for n, x in m.suites.items() if x.platform == cluster.platform))
        ]
    else:
        clusters = [load_cluster(None)] + [load_cluster(p) for p in sorted(DEFAULT_CLUSTERS.glob("*.yaml"))]
        pairs = [(s, c) for s in (suites or sorted(m.suites)) for c in clusters if c.platform == m.suites[s].platform]
    out = PlansLint()
    total = PlanReport()
    stage("loading the engine's serve parser", None)
    engine()  # the slow part, seconds: said before it starts
    for suite, cluster in pairs:
        cases = expand(m, suite, layer_counts(cluster)).cases
        stage(f"checking the plans of {suite} on {cluster.name}", len(cases))
        report = validate_cases(m, _counted(cases, advance), cluster)
        for severity, messages in (("note", report.notes), ("error", report.errors)):
            out.findings += [
                Finding(msg, severity=severity, suite=suite, cluster=cluster.name) for msg in summarize(messages)
            ]
        total.extend(report)
    out.plans, out.cases, out.pairs = total.plans, total.cases, len(pairs)
    out.errors, out.notes = len(summarize(total.errors)), len(summarize(total.notes))
    out.ok = total.ok
    return out


def _counted(cases: Iterable[Case], advance: Callable[[], None]) -> Iterator[Case]:
    for case in cases:
        yield case
        advance()


def references_unfit(m: Matrix, suites: list[str] | None, cluster_ref: str | None) -> list[Finding]:
    """Every case of the cluster's platform whose reference cannot be planned or read there."""
    cluster = load_cluster(cluster_ref)
    platform = cluster.platform if getattr(cluster, "platform", None) else None
    names = suites or sorted(n for n, s in m.suites.items() if platform is None or s.platform == platform)
    layers = layer_counts(cluster)
    out = []
    for name in names:
        for c in expand(m, name, layers).cases:
            if c.expectation.kind not in NEEDS_REFERENCE:
                continue
            try:
                plan(m, c, cluster)
            except PlanError:
                continue  # the case itself does not fit this cluster: its reference is moot here
            why = check_plannable(m, c, cluster)
            if why:
                out.append(Finding(f"{name}: {c.id}: no reference on cluster '{cluster.name}': {why}"))
    return out

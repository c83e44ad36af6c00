"""Turning a case's observation into its result: the verdict, the evidence, and for a failure
its diagnosis and repro bundle."""

from __future__ import annotations

from pathlib import Path

from harness.cases.case import Case
from harness.check.verdict.diagnose import diagnose
from harness.check.verdict.judge import judge
from harness.check.verdict.repro import write_bundle
from harness.launch import Deployment
from harness.matrix.load import Matrix
from harness.outcomes import WAIVED
from harness.redact import Redactor
from harness.results import store
from harness.results.result import Diagnosis, Observation, Repro, Result


def make_result(
    m: Matrix,
    run_dir: Path,
    case: Case,
    d: Deployment | None,
    obs: Observation,
    started: str,
    duration: float,
    versions: dict[str, dict[str, str]],
    plan_key: str | None = None,
    harness_error: str | None = None,
    redactor: Redactor | None = None,
) -> Result:
    verdict = judge(case.expectation, obs)
    nodes = dict.fromkeys(s.node for s in d.launches) if d else {}
    result = Result(
        **case.coordinates(),
        expectation=case.expectation,
        outcome=verdict.outcome,
        reason=verdict.reason,
        fails_run=verdict.outcome.fails_run,
        observation=obs,
        deployment=d.recorded() if d else None,
        plan_key=plan_key,
        versions={n: {k: v for k, v in versions.get(n, {}).items()} for n in nodes},
        started=started,
        duration_s=round(duration, 1),
        harness_error=harness_error,
    )
    if verdict.outcome.fails_run or verdict.outcome in WAIVED:
        texts = [verdict.reason, obs.request_error or "", obs.root_cause.text if obs.root_cause else ""]
        paths = {k: p for k, v in obs.logs.items() if (p := store.log_path(run_dir, v))}
        result.diagnosis = Diagnosis.of(diagnose(m.diagnosis, texts, paths))
        result.repro = Repro.of(write_bundle(run_dir, result, d, m.root, case.attrs, redactor))
    return result

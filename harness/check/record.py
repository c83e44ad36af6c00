"""Turning a case's observation into its result: the verdict, the evidence, and for a failure
its diagnosis and repro bundle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.check.diagnose import diagnose
from harness.check.judge import Observation, judge
from harness.check.repro import write_bundle
from harness.matrix.load import Matrix
from harness.outcomes import WAIVED
from harness.plan.launch import Deployment
from harness.results import result as recorded
from harness.results import store
from harness.results.redact import Redactor
from harness.results.result import Result


def _plain(value: Any) -> Any:
    """``value`` as the store will hold it: JSON's types only (a tuple as a list, a path as its text)."""
    return json.loads(json.dumps(value, default=str))


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
        case=case.id,
        suite=case.suite,
        family=case.family,
        variant=case.variant,
        topology=case.topology,
        partition=case.partition,
        features=list(case.features),
        platform=case.platform,
        expectation=recorded.Expectation.from_json(_plain(case.expectation.to_json())),
        outcome=verdict.outcome,
        reason=verdict.reason,
        fails_run=verdict.outcome.fails_run,
        observation=recorded.Observation.from_json(_plain(obs.to_json())),
        deployment=recorded.Deployment.from_json(_plain(d.to_json())) if d else None,
        plan_key=plan_key,
        versions={n: {k: v for k, v in versions.get(n, {}).items()} for n in nodes},
        started=started,
        duration_s=round(duration, 1),
        harness_error=harness_error,
    )
    if verdict.outcome.fails_run or verdict.outcome in WAIVED:
        texts = [verdict.reason, obs.request_error or "", (obs.root_cause or {}).get("text", "")]
        paths = {k: p for k, v in obs.logs.items() if (p := store.log_path(run_dir, v))}
        result.diagnosis = recorded.Diagnosis.from_json(_plain(diagnose(m.diagnosis, texts, paths)))
        result.repro = recorded.Repro.from_json(write_bundle(run_dir, result, d, m.root, case.attrs, redactor))
    return result

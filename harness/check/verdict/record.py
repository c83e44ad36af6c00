"""Turning a case's observation into its result: the verdict, the evidence, and for a failure
its diagnosis and repro bundle."""

from __future__ import annotations

from harness.cases.case import Case
from harness.check.context import RunContext
from harness.check.verdict.diagnose import diagnose
from harness.check.verdict.judge import judge
from harness.check.verdict.repro import write_bundle
from harness.launch import Deployment
from harness.outcomes import WAIVED
from harness.results import store
from harness.results.result import Diagnosis, Observation, Repro, Result


def make_result(
    ctx: RunContext,
    case: Case,
    d: Deployment | None,
    obs: Observation,
    started: str,
    duration: float,
    plan_key: str | None = None,
    harness_error: str | None = None,
) -> Result:
    run_dir, versions = ctx.run_dir, ctx.versions()
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
        stack=ctx.stack,
        started=started,
        duration_s=round(duration, 1),
        harness_error=harness_error,
    )
    if verdict.outcome.fails_run or verdict.outcome in WAIVED:
        texts = [verdict.reason, obs.request_error or "", obs.root_cause.text if obs.root_cause else ""]
        paths = {k: p for k, v in obs.logs.items() if (p := store.log_path(run_dir, v))}
        result.diagnosis = Diagnosis.of(diagnose(ctx.planner.diagnosis, texts, paths))
        # completions only: a pooling case's requests are embeddings or classifications
        rc = ctx.planner.known(case) if d is not None else None
        traffic = (rc.accuracy, rc.phases) if rc is not None and not rc.pooling else None
        result.repro = Repro.of(
            write_bundle(run_dir, result, d, ctx.planner.roots, case.attrs, ctx.launcher.redactor, traffic)
        )
    return result

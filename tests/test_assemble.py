"""A case's observation is assembled from the parts its deployment's steps returned, purely:
what the matrix decided (a ResolvedCase made before the run) and what the processes did
(Startup, Asked, StageReading, phases, checks, scores, logs) — nothing is filled in place."""

from harness.cases.expand import expand, select
from harness.check.observe import Asked, CaseLogs, Served, Startup, assemble
from harness.check.stages.probe import StageReading
from harness.check.traffic.compare import Outputs
from harness.check.verdict.judge import judge
from harness.outcomes import Outcome
from harness.plan.cluster import load_cluster
from harness.plan.resolved import Planner
from harness.results.result import FeatureCheck, LogLine, Stages


def resolved(shipped, cid):
    planner = Planner(shipped, load_cluster(None))
    return planner.resolved(select(expand(shipped, "smoke-cpu").cases, ids=[cid])[0])


def test_a_refusal_at_startup_is_assembled_with_its_expected_line_and_time(shipped):
    rc = resolved(shipped, "qwen3-tiny/pp2-tp1-mp/1,2/none")
    line = LogLine(log="api", line=7, text="ValueError: sum(partitions)=3 does not match num_hidden_layers=5.")
    served = Served(Startup(failed_after_s=38.0, exit_codes={"api": 1}), engine_started=True)
    obs = assemble(rc, served, CaseLogs(line, []), None)
    assert (obs.ready, obs.failed_phase, obs.failed_after_s) == (False, "startup", 38.0)
    assert obs.expected_error_line == line and obs.expected_error_after_s == 38.0
    assert judge(rc.expectation, obs).outcome is Outcome.XFAIL
    # the same deployment without the line in its logs: the claim is not met
    assert judge(rc.expectation, assemble(rc, served, CaseLogs(None, []), None)).outcome is not Outcome.XFAIL


def test_a_served_case_takes_its_split_bounds_and_checks_from_the_parts(shipped):
    rc = resolved(shipped, "qwen3-tiny/pp2-tp1-mp/auto/prefix-caching")
    assert rc.partition_expected == ((0, 3), (3, 5)) and "prefix-cache-hit" in rc.checks
    served = Served(
        Startup(ready=True, ready_s=61.0),
        Asked(outputs={rc.requests: Outputs(id_prompts=[[1, 2]])}),
        timing_note="stage timing unavailable (x)",
        stages=StageReading([[0, 3], [3, 5]], "workers (collective_rpc)", Stages(), notes=["probe note"]),
        checks={"prefix-cache-hit": FeatureCheck(ok=False, detail="0 prompt tokens served from the cache")},
    )
    obs = assemble(rc, served, CaseLogs(None, []), None)
    assert obs.partition == [[0, 3], [3, 5]] and obs.partition_expected == [[0, 3], [3, 5]]
    assert obs.notes == ["stage timing unavailable (x)", "probe note"]
    assert obs.failed_phase is None and obs.request_error is None
    assert judge(rc.expectation, obs).outcome is Outcome.FAIL  # the cache was never hit
    # the parts are not shared with the observation: judging one case changes no other
    obs.feature_checks["prefix-cache-hit"].ok = True
    assert served.checks["prefix-cache-hit"].ok is False


def test_a_request_that_fails_is_the_first_request_phase(shipped):
    rc = resolved(shipped, "qwen3-tiny/pp2-tp1-mp/auto/none")
    served = Served(
        Startup(ready=True, ready_s=50.0), Asked(error="process exited during the request: api", failed_after_s=2.5)
    )
    obs = assemble(rc, served, CaseLogs(None, []), None)
    assert (obs.failed_phase, obs.failed_after_s, obs.request_error) == (
        "first-request",
        2.5,
        "process exited during the request: api",
    )
    assert judge(rc.expectation, obs).outcome is Outcome.FAIL

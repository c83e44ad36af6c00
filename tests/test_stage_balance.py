"""Per-stage facts and the claim's bounds on how uneven the stages may be, judged from recorded
probe answers."""

from harness.check.stages import balance
from harness.check.verdict.judge import judge
from harness.outcomes import Outcome
from harness.results.result import Comparison, Expectation, Observation, Stages, WorkerStage


def worker(rank, pp_rank, peak_mib, step_ms, tp_rank=0):
    return WorkerStage(
        rank=rank,
        pp_rank=pp_rank,
        pp_size=2,
        tp_rank=tp_rank,
        tp_size=2,
        weights_bytes=2**20 * (10 + pp_rank),
        kv_blocks=100,
        peak_memory_bytes=int(peak_mib * 2**20),
        step_ms=step_ms,
    )


def stages(**bounds):
    # two TP ranks per stage: a stage is as costly as its costliest rank
    ws = [worker(0, 0, 100, 5.0), worker(1, 0, 110, 6.0, 1), worker(2, 1, 150, 9.0), worker(3, 1, 140, 8.0, 1)]
    return Stages(workers=ws, **bounds)


def test_per_stage_takes_each_stages_costliest_rank():
    rows = balance.per_stage(stages())
    assert [(r["stage"], r["peak_memory_bytes"], r["step_ms"]) for r in rows] == [
        (0, 110 * 2**20, 6.0),
        (1, 150 * 2**20, 9.0),
    ]


def test_bounds_on_the_last_stages_memory_and_the_slowest_step():
    # mean peak 130 MiB, last 150: 1.15; mean step 7.5 ms, slowest 9: 1.2
    assert balance.problems(stages(max_last_stage_memory_ratio=1.2, max_step_time_ratio=1.25)) == []
    found = balance.problems(stages(max_last_stage_memory_ratio=1.1, max_step_time_ratio=1.1))
    assert found == [
        "the last stage's peak memory is 1.15 x the stages' mean, above 1.1",
        "the slowest stage's mean forward time is 1.20 x the stages' mean, above 1.1",
    ]


def test_a_bound_without_the_figures_is_not_a_pass():
    bare = Stages(workers=[WorkerStage(rank=0, pp_rank=0, pp_size=2), WorkerStage(rank=1, pp_rank=1, pp_size=2)])
    bare.max_step_time_ratio = 1.5
    assert balance.problems(bare) == [
        "the stages' forward times were not measured: the step-time bound cannot be checked"
    ]


def test_a_broken_bound_fails_the_stages_check():
    obs = Observation(
        ready=True,
        partition=[[0, 3], [3, 5]],
        partition_expected=[[0, 3], [3, 5]],
        accuracy=Comparison(equal=True, summary="ok"),
        stages=stages(max_last_stage_memory_ratio=1.1),
    )
    v = judge(Expectation(kind="supported"), obs)
    assert v.outcome is Outcome.FAIL and "last stage's peak memory" in v.reason

"""The open-loop phase: seeded Poisson arrivals, a mix of request kinds, and the after-phase
assertions that the engine returned to idle, shown able to fail on recorded series that do not
come back."""

import statistics

import pytest

from harness.cases.phases.open_loop import arrivals, idle_problems
from harness.cases.workload import plan_phase
from harness.check.traffic import metrics
from harness.matrix.schema import Phase


def test_arrivals_are_seeded_poisson_for_a_duration_or_a_count():
    phase = Phase(kind="open-loop", rate_per_s=4.0, duration_s=120.0, seed=3)
    times = arrivals(phase)
    assert times == arrivals(phase) and times != arrivals(phase.model_copy(update={"seed": 4}))
    assert times == sorted(times) and 0 < times[0] and times[-1] <= 120.0
    assert 400 < len(times) < 560  # 480 expected
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.15)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.2)  # exponential: sd equals the mean
    assert len(arrivals(Phase(kind="open-loop", rate_per_s=50.0, requests=30))) == 30


def test_a_mix_of_kinds_is_drawn_from_the_phase_seed():
    phase = Phase.model_validate(
        {
            "kind": "open-loop",
            "rate_per_s": 2.0,
            "requests": 40,
            "explicit": [
                {"endpoint": "completions", "name": "short", "prompt": "a", "temperature": 0, "max_tokens": 4},
                {"endpoint": "chat", "messages": [{"role": "user", "content": "b"}], "temperature": 0},
                {"endpoint": "tokenize", "prompt": "c"},
            ],
        }
    )
    plan = plan_phase(phase, 2)
    names = [r.name for r in plan.explicit]
    assert len(names) == len(set(names)) == 40 and names[0].startswith("open-loop:0:")
    assert {r.endpoint for r in plan.explicit} == {"completions", "chat", "tokenize"}
    assert plan.extra["arrivals"] == arrivals(phase)
    generated = plan_phase(Phase(kind="open-loop", rate_per_s=2.0, requests=8), 2)
    assert len(generated.requests) == 8 and len({len(r.prompt) for r in generated.requests}) > 1


def test_lint_asks_for_a_rate_and_a_length():
    from harness.cases.phases.open_loop import KIND

    assert KIND.lint(Phase(kind="open-loop"), None) == [
        "an open-loop phase needs rate_per_s (requests per second, on average)",
        "an open-loop phase needs duration_s or requests (how long, or how many arrive)",
    ]
    assert KIND.lint(Phase(kind="open-loop", rate_per_s=1.0, duration_s=60), None) == []


PHASE = Phase(kind="open-loop", rate_per_s=2.0, duration_s=120, max_memory_growth=0.05, idle_within_s=20)
# Recorded shape of a run that returned to idle: KV usage back to its start, stage memory flat.
RETURNED = {
    "metrics": {
        "kv_usage_start": 0.0,
        "kv_usage_end": 0.0,
        "running_end": 0.0,
        "waiting_end": 0.0,
        "idle_after_s": 0.26,
    },
    "series": {
        "stage0_memory_bytes": [[0.0, 2.10e9], [60.0, 2.12e9], [121.0, 2.11e9]],
        "stage1_memory_bytes": [[0.0, 2.00e9], [60.0, 2.03e9], [121.0, 2.02e9]],
    },
}


def test_an_engine_back_to_idle_passes():
    assert idle_problems(PHASE, RETURNED["metrics"], RETURNED["series"]) == []


def test_a_series_that_does_not_return_fails():
    # a stage that leaks KV blocks: requests all answered, yet the cache stays a tenth used
    leaked = {"kv_usage_start": 0.0, "kv_usage_end": 0.1, "running_end": 0.0, "waiting_end": 0.0}
    assert idle_problems(PHASE, leaked, RETURNED["series"]) == [
        "the engine did not return to idle within 20 s after the phase: 0 running, 0 waiting, "
        "KV cache usage 0.100 (before the phase 0.000)"
    ]
    stuck = {"kv_usage_start": 0.0, "kv_usage_end": 0.02, "running_end": 1.0, "waiting_end": 2.0}
    assert "1 running, 2 waiting" in idle_problems(PHASE, stuck, RETURNED["series"])[0]
    creeping = dict(RETURNED["series"], stage1_memory_bytes=[[0.0, 2.0e9], [60.0, 2.2e9], [121.0, 2.4e9]])
    assert idle_problems(PHASE, RETURNED["metrics"], creeping) == [
        "stage1 memory grew 20.0% over the phase (1907 MiB to 2289 MiB), more than 5%"
    ]
    assert idle_problems(PHASE, RETURNED["metrics"], {}) == [
        "stage memory not measured (no stage probe answered): max_memory_growth cannot be judged"
    ]
    unmeasured = {k: v for k, v in RETURNED["metrics"].items() if not k.startswith("kv_")}
    assert idle_problems(PHASE, unmeasured, RETURNED["series"]) == [
        "KV cache usage not measured (the engine exports no kv_cache_usage_perc)"
    ]


def _page(running, waiting, kv):
    return (
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
        f'vllm:num_requests_waiting{{engine="0"}} {waiting}\n'
        f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}\n'
    )


def test_the_idle_wait_reads_the_engine_until_it_is_idle_or_the_bound_passes():
    pages = iter([_page(2, 1, 0.3), _page(1, 0, 0.1), _page(0, 0, 0.004)])
    got = metrics.wait_idle(lambda: next(pages), kv_start=0.0, bound=0.01, within_s=5, poll_s=0.0)
    assert got["running_end"] == 0 and got["kv_usage_end"] == 0.004 and "idle_after_s" in got
    never = metrics.wait_idle(lambda: _page(0, 0, 0.1), kv_start=0.0, bound=0.01, within_s=0.05, poll_s=0.01)
    assert "idle_after_s" not in never and never["kv_usage_end"] == 0.1


def test_the_sampler_keeps_each_gauge_and_each_stage_over_time():
    workers = [
        {"pp_rank": 0, "memory_bytes": 100},
        {"pp_rank": 1, "memory_bytes": 200},
        {"pp_rank": 1, "memory_bytes": 250},  # a stage's value is its largest worker's
    ]
    sampler = metrics.SeriesSampler(lambda: _page(3, 0, 0.25), lambda: workers)
    sampler.sample()
    sampler.sample()
    assert [v for _, v in sampler.series["running"]] == [3, 3]
    assert [v for _, v in sampler.series["kv_usage"]] == [0.25, 0.25]
    assert sampler.series["stage1_memory_bytes"][0][1] == 250 and sampler.series["stage0_memory_bytes"][0][1] == 100

    def no_probe():
        raise RuntimeError("no worker extension")

    bare = metrics.SeriesSampler(lambda: _page(0, 0, 0.0), no_probe)
    bare.sample()
    assert bare.stage_error == "RuntimeError: no worker extension" and "stage0_memory_bytes" not in bare.series


def test_the_report_plots_an_open_loop_phase_over_time():
    from harness.outcomes import Outcome
    from harness.results.result import Expectation, Observation, PhaseRecord, Result
    from reports import traffic

    times = [i * 0.5 for i in range(250)]
    series = {
        "running": [[t, float(i % 3)] for i, t in enumerate(times)],
        "waiting": [[t, 0.0] for t in times],
        "kv_usage": [[t, 0.01 * (i % 3)] for i, t in enumerate(times)],
        "stage0_memory_bytes": [[t, 2.0e9] for t in times],
        "stage1_memory_bytes": [[t, 2.1e9] for t in times],
    }
    phase = PhaseRecord(name="load", kind="open-loop", series=series)
    record = Result(
        case="fam/<x>",
        suite="s",
        family="fam",
        variant="default",
        topology="t",
        partition="auto",
        features=[],
        platform="cpu",
        expectation=Expectation(kind="supported"),
        outcome=Outcome.PASS,
        reason="ok",
        observation=Observation(workload=[phase]),
    )
    (plot,) = traffic.plots([record])
    svg = plot["svg"]
    assert plot["case"] == "fam/<x> (load)"
    assert svg.count("<svg") == 3 and svg.count("<polyline") == 5  # requests (2), KV usage, two stages
    assert "seconds into the phase" in svg and "stage1" in svg and "<circle" not in svg
    assert svg.count('font-size="10" text-anchor="middle">') <= 3 * (traffic.TICKS + 1)


def test_a_clock_on_a_phase_that_has_none_is_a_lint_error(matrix_dir):
    from harness.cases.expand import expand
    from harness.cases.workload import workload_problems
    from harness.matrix.load import load_matrix

    matrix_dir(
        "cpu/mine.yaml",
        """\
        suites:
          mine:
            title: a clock on the wrong phase
            platform: cpu
            max_devices: 2
            workload:
              - {kind: concurrent, rate_per_s: 2.0}
              - {kind: open-loop, rate_per_s: 2.0, duration_s: 10, max_memory_growth: 0.1}
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
        """,
    )
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    (err,) = workload_problems(m, case)
    assert (
        err.message
        == "phase concurrent (concurrent): rate_per_s is for requests arriving on a clock: an open-loop phase"
    )
    assert err.where is not None and err.where.file.endswith("cpu/mine.yaml") and err.where.line == 7

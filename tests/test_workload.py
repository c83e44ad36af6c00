"""Workloads as data: phases resolved per case, their requests generated reproducibly, bad input
refused at lint with its position, and every answer of a phase judged against the reference's."""

import pytest

from harness.cases.expand import expand, select
from harness.cases.lint import lint
from harness.cases.workload import (
    SEQUENTIAL,
    plan_phase,
    plan_workload,
    workload_dir,
    workload_of,
    workload_problems,
)
from harness.check.serving.client import Completion
from harness.check.traffic import metrics
from harness.check.traffic.compare import compare_phase
from harness.check.traffic.evidence import not_exercised, phase_record
from harness.check.traffic.phases import PhaseOutputs
from harness.check.verdict.judge import judge
from harness.matrix.load import load_matrix
from harness.matrix.schema import Compare, PerfGate, Phase
from harness.matrix.source import MatrixError
from harness.outcomes import Outcome
from harness.results.result import Comparison, Expectation, Observation

PP2 = "qwen3-tiny/pp2-tp1-mp/auto/none"


def case(m, suite, cid):
    return select(expand(m, suite).cases, ids=[cid])[0]


# ---- what a case is sent -------------------------------------------------------------------------


def test_the_shipped_smoke_cases_send_the_phases_the_suite_names(shipped):
    c = case(shipped, "smoke-cpu", PP2)
    suites = ["sequential", "concurrent", "long-prompt", "shared-prefix"]
    # the auto case's group adds the explicit request kinds and the peers' request sets
    assert [p.kind for p in workload_of(shipped, c)] == [*suites, "explicit", "explicit", "explicit"]
    custom = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none")
    assert [p.kind for p in workload_of(shipped, custom)] == suites
    plans = {p.kind: p for p in plan_workload(shipped, c)}
    # 4 x PP: each of PP=2's micro-batches samples several sequences in a step
    assert len(plans["concurrent"].requests) == 8
    # mixed prompt and output lengths
    assert len({len(r.prompt) for r in plans["concurrent"].requests}) == 4
    assert len({r.max_tokens for r in plans["concurrent"].requests}) > 1
    assert {len(r.prompt) for r in plans["long-prompt"].requests} == {200}  # longer than the 128-token chunk
    shared = plans["shared-prefix"]
    prefixes = {r.prompt[:192] for r in (*shared.warmup, *shared.requests)}
    assert len(prefixes) == 1 and len({r.prompt for r in shared.requests}) == len(shared.requests)


def test_a_suite_without_a_workload_keeps_its_sequential_requests(shipped):
    c = case(shipped, "families-cpu", expand(shipped, "families-cpu").cases[0].id)
    assert workload_of(shipped, c) == [SEQUENTIAL] and plan_workload(shipped, c) == []


def test_generated_requests_are_reproducible_from_the_seed_and_differ_with_it():
    phase = Phase(kind="concurrent", requests=6, prompt_tokens=40)
    a, b = plan_phase(phase, 2), plan_phase(phase, 2)
    assert a.requests == b.requests
    other = plan_phase(Phase(kind="concurrent", requests=6, prompt_tokens=40, seed=1), 2)
    assert other.requests != a.requests
    assert all(3 <= t < 500 for r in a.requests for t in r.prompt)


def test_concurrency_defaults_to_twice_the_pp_size():
    assert len(plan_phase(Phase(kind="concurrent"), 4).requests) == 8
    assert len(plan_phase(Phase(kind="concurrent"), 1).requests) == 4


def test_the_abort_phase_compares_only_the_fresh_request():
    plan = plan_phase(Phase(kind="abort", requests=3), 2)
    assert [r.label for r in plan.compared()] == ["abort:fresh"]


def test_a_rule_workload_wins_over_its_group_and_suite(matrix_dir):
    # a file named before cpu/rules.yaml: its rule comes first and decides the case
    matrix_dir(
        "cpu/a-workload.yaml",
        """\
        rules:
          - when: suite == "smoke-cpu" && partition == "1,4"
            expect: supported
            why: a claim carrying the phase that exercises it
            workload: [{kind: sequential}, {kind: long-prompt, name: chunked, prompt_tokens: 150}]
        """,
    )
    m = load_matrix(matrix_dir.root)
    c = case(m, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none")
    assert "a-workload.yaml" in c.expectation.where
    assert [p.label for p in workload_of(m, c)] == ["sequential", "chunked"]
    other = case(m, "smoke-cpu", PP2)  # decided by the shipped rules: the suite's workload
    assert [p.label for p in workload_of(m, other)][1] == "concurrent"


# ---- refused before anything launches ------------------------------------------------------------


def _suite_with(workload: str) -> str:
    return f"""\
        suites:
          mine:
            title: x
            platform: cpu
            workload: {workload}
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
        """


@pytest.mark.parametrize(
    "workload,words",
    [
        ("[{kind: concurent}]", "workload.0.kind"),
        ("[{kind: concurrent, requests: 0}]", "greater than or equal to 1"),
        ("[{kind: concurrent, deadline_s: 0}]", "greater than 0"),
        ("[{kind: concurrent}, {kind: concurrent}]", "phase names must be unique"),
        (
            "[{kind: concurrent, perf_baseline: {output_tokens_per_s: 9, aisbench: {dataset_config: gsm8k-perf}}}]",
            "dataset_config 'gsm8k-perf' must be an AISBench config name",
        ),
        (
            "[{kind: concurrent, perf_baseline: {output_tokens_per_s: 9, aisbench: {dataset_config: x, rate: 2}}}]",
            "perf_baseline.aisbench.rate",
        ),
    ],
)
def test_bad_phases_are_refused_with_their_position(matrix_dir, workload, words):
    path = matrix_dir("cpu/mine.yaml", _suite_with(workload))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    text = "\n".join(str(e) for e in err.value.errors)
    assert f"{path.relative_to(matrix_dir.root.parent)}:" in text or "mine.yaml:" in text, text
    assert words in text, text


@pytest.mark.parametrize(
    "gate,words",
    [
        ("{output_tokens_per_s: 9, rel_slack: 1}", "rel_slack: Input should be less than 1"),
        ("{output_tokens_per_s: 9, rel_slack: -0.1}", "rel_slack: Input should be greater than or equal to 0"),
        ("{output_tokens_per_s: 9, abs_slack: {output_tokens_per_s: -1}}", "abs_slack.output_tokens_per_s"),
        ("{output_tokens_per_s: 9, abs_slack: {output_tokens_per_s: .inf}}", "abs_slack.output_tokens_per_s"),
        ("{output_tokens_per_s: 9, abs_slack: {itl_s: 1}}", "abs_slack.itl_s"),
        ("{output_tokens_per_s: 9, abs_slack: {ttft_s: 1}}", "abs_slack.ttft_s 1: the gate has no ttft_s baseline"),
        ("{output_tokens_per_s: 9, abs_slack: {output_tokens_per_s: 9}}", "not below the baseline 9"),
        ("{output_tokens_per_s: 9, ratio: 0.9, rel_slack: 0.1}", "ratio (vllm-ascend's form) and rel_slack/abs_slack"),
    ],
)
def test_bad_slack_values_are_refused_at_their_gate(matrix_dir, gate, words):
    matrix_dir("cpu/mine.yaml", _suite_with(f"[{{kind: concurrent, perf_baseline: {gate}}}]"))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    (error,) = [str(e) for e in err.value.errors]
    assert "cpu/mine.yaml:5:" in error and "perf_baseline" in error and words in error, error


def test_a_slack_gate_loads_with_its_two_slacks(matrix_dir):
    gate = "{output_tokens_per_s: 900, ttft_s: 2, rel_slack: 0.05, abs_slack: {output_tokens_per_s: 20}}"
    matrix_dir("cpu/mine.yaml", _suite_with(f"[{{kind: concurrent, perf_baseline: {gate}}}]"))
    (phase,) = load_matrix(matrix_dir.root).suites["mine"].workload
    assert (phase.perf_baseline.rel_slack, phase.perf_baseline.abs_slack) == (0.05, {"output_tokens_per_s": 20.0})


def test_files_a_phase_names_are_relative_to_the_matrix_file_declaring_the_workload(matrix_dir):
    matrix_dir("cpu/deeper/mine.yaml", _suite_with("[{kind: concurrent}]"))
    m = load_matrix(matrix_dir.root)
    c = expand(m, "mine").cases[0]
    assert workload_dir(m, c) == matrix_dir.root / "cpu" / "deeper"


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_lint_refuses_a_prompt_longer_than_the_model_holds(matrix_dir):
    matrix_dir("cpu/mine.yaml", _suite_with("[{kind: long-prompt, prompt_tokens: 300}]"))
    report = lint(load_matrix(matrix_dir.root))
    # positioned at the phase's own size in the file that declares it
    hits = [e for e in map(str, report.errors) if "mine.yaml:5:" in e and "longer than the 256" in e]
    assert hits, report.errors


def test_lint_refuses_a_long_prompt_the_batch_budget_holds_in_one_step(matrix_dir):
    """A long-prompt phase exercises chunked prefill only with prompts longer than the case's
    --max-num-batched-tokens (the engine must split them); one that fits is refused."""
    suite = _suite_with("[{kind: long-prompt, prompt_tokens: 200}]").replace(
        "platform: cpu\n", 'platform: cpu\n            args: [--max-num-batched-tokens, "200"]\n'
    )
    for budget, refused in (("200", True), ("128", False)):
        matrix_dir("cpu/mine.yaml", suite.replace('"200"]', f'"{budget}"]'))
        m = load_matrix(matrix_dir.root)
        problems = [p for c in expand(m, "mine").cases for p in map(str, workload_problems(m, c))]
        assert any("fit in one engine step" in p and f"--max-num-batched-tokens {budget}" in p for p in problems) is (
            refused
        ), problems


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_lint_refuses_bounds_on_figures_the_case_does_not_produce(matrix_dir):
    matrix_dir(
        "cpu/mine.yaml",
        _suite_with(
            "[{kind: concurrent, min_acceptance_ratio: 0.9}, {kind: batch, max_ttft_s: 2}, "
            "{kind: abort, perf_baseline: {output_tokens_per_s: 100}}]"
        ),
    )
    errors = [str(e) for e in lint(load_matrix(matrix_dir.root)).errors]
    assert any("min_acceptance_ratio" in e and "no --speculative-config" in e for e in errors), errors
    assert any("max_ttft_s is measured on streamed requests" in e for e in errors), errors
    assert any("abort" in e and "perf_baseline is measured on streamed requests" in e for e in errors), errors


@pytest.mark.slow  # over 1 s: it lints every shipped suite three times
def test_lint_names_the_files_an_aisbench_perf_gate_misses_beside_its_workload(matrix_dir):
    gate = "{output_tokens_per_s: 9, aisbench: {dataset_config: perf/gone.py, dataset: data/gsm8k}}"
    matrix_dir("cpu/mine.yaml", _suite_with(f"[{{kind: concurrent, perf_baseline: {gate}}}]"))
    errors = [str(e) for e in lint(load_matrix(matrix_dir.root)).errors]
    assert any(f"AISBench dataset config file {matrix_dir.root / 'cpu/perf/gone.py'} not found" in e for e in errors)
    (matrix_dir.root / "cpu" / "perf").mkdir()
    (matrix_dir.root / "cpu" / "perf" / "gone.py").write_text("")
    errors = [str(e) for e in lint(load_matrix(matrix_dir.root)).errors]
    assert any(f"AISBench dataset {matrix_dir.root / 'cpu/data/gsm8k'} not found" in e for e in errors), errors
    (matrix_dir.root / "cpu" / "data" / "gsm8k").mkdir(parents=True)
    assert not [e for e in map(str, lint(load_matrix(matrix_dir.root)).errors) if "AISBench" in e]


@pytest.mark.slow  # over 1 s: it lints every shipped suite twice
def test_lint_warns_at_the_gate_when_an_aisbench_perf_gate_names_no_local_dataset(matrix_dir):
    perf = matrix_dir.root / "cpu" / "perf"
    perf.mkdir(parents=True)
    (perf / "mine.py").write_text("")
    gate = "{output_tokens_per_s: 9, aisbench: {dataset_config: perf/mine.py, baseline_dataset: ms/gsm8k}}"
    matrix_dir("cpu/mine.yaml", _suite_with(f"[{{kind: concurrent, name: perf, perf_baseline: {gate}}}]"))
    (warning,) = [w for w in lint(load_matrix(matrix_dir.root)).warnings if "dataset" in w.message]
    assert "phase perf: its perf gate's AISBench run names no local dataset" in warning.message
    assert "perf/mine.py's default data, not the baseline's (ms/gsm8k): set aisbench.dataset" in warning.message
    assert warning.where.file.endswith("cpu/mine.yaml") and warning.where.line == 5  # the suite's workload line
    (matrix_dir.root / "cpu" / "data").mkdir()
    gate = "{output_tokens_per_s: 9, aisbench: {dataset_config: perf/mine.py, dataset: data}}"
    matrix_dir("cpu/mine.yaml", _suite_with(f"[{{kind: concurrent, name: perf, perf_baseline: {gate}}}]"))
    assert not [w for w in lint(load_matrix(matrix_dir.root)).warnings if "dataset" in w.message]


@pytest.mark.slow  # over 1 s: it lints every shipped suite, as test_expand's shipped lint does in the fast loop
def test_the_shipped_workloads_lint_clean(shipped):
    assert not [e for e in map(str, lint(shipped).errors) if "phase" in e]


# ---- judged request by request ---------------------------------------------------------------------


def _c(label, ids, top=None):
    return Completion("p", tuple(ids), tuple(-0.1 for _ in ids), "t", tuple(top or ()), label)


def test_each_request_is_exact_tied_or_mismatched():
    compare = Compare(tie_margin=0.05)
    ref = [
        _c("c:0", [1, 2, 3]),
        _c("c:1", [1, 2, 3], top=[{1: -0.1}, {2: -0.70, 9: -0.72}, {3: -0.1}]),
        _c("c:2", [1, 2, 3], top=[{1: -0.1}, {2: -0.1, 9: -3.0}, {3: -0.1}]),
    ]
    got = [_c("c:0", [1, 2, 3]), _c("c:1", [1, 9, 4]), _c("c:2", [1, 9, 4])]
    v = compare_phase(compare, ["c:0", "c:1", "c:2", "c:3"], ref, got)
    assert (v["exact"], v["tied"], v["mismatched"]) == (1, 1, 2)  # c:3 answered by neither
    assert v["ties"] == [{"request": "c:1", "at_token": 1, "reference_id": 2, "case_id": 9, "logprob_gap": 0.02}]
    assert [d["request"] for d in v["diffs"]] == ["c:2", "c:3"]
    assert v["diffs"][0]["first_token_mismatch"] == 1
    # no margin: every divergence is a mismatch
    assert compare_phase(Compare(tie_margin=0), ["c:1"], ref, got)["mismatched"] == 1


def test_seeded_requests_are_never_ties():
    ref = [_c("batch-seeded:0", [1, 2], top=[{1: -0.1}, {2: -0.5, 7: -0.5}])]
    got = [_c("batch-seeded:0", [1, 7])]
    assert compare_phase(Compare(), ["batch-seeded:0"], ref, got)["mismatched"] == 1


def test_prometheus_counters_and_gauges_are_read():
    page = """# HELP vllm:num_preemptions_total x
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:prefix_cache_hits_total{engine="0"} 128.0
vllm:num_requests_running{engine="0"} 2.0
vllm:num_requests_running{engine="1"} 1.0
"""
    parsed = metrics.parse(page)
    assert parsed["num_preemptions"] == 3 and parsed["num_requests_running"] == 3
    assert metrics.deltas({"num_preemptions": 1.0}, parsed) == {"preemptions": 2.0, "prefix_cache_hits": 128.0}
    assert metrics.acceptance({"spec_draft_tokens": 10, "spec_accepted_tokens": 7}) == 0.7
    assert metrics.acceptance({}) is None


@pytest.mark.parametrize(
    "kind,measured,why",
    [
        ("concurrent", {"peak_running": 1.0}, "no sign of two requests running"),
        ("concurrent", {}, "engine gauge peak 0, 0 tokens generated in 0 engine steps"),
        ("pressure", {"preemptions": 0.0}, "no request was preempted"),
        ("shared-prefix", {"prefix_cache_hits": 0.0}, "no prefix-cache hit"),
    ],
)
def test_a_phase_whose_metrics_do_not_show_it_is_not_exercised(kind, measured, why):
    plan = plan_phase(Phase(kind=kind), 2)
    assert why in not_exercised(plan, PhaseOutputs(metrics=measured))


def test_a_phase_that_did_what_it_names_is_exercised():
    assert not_exercised(plan_phase(Phase(kind="concurrent"), 2), PhaseOutputs(metrics={"peak_running": 4.0})) is None


def _served(**kw):
    return Observation(
        ready=True,
        partition=[[0, 3], [3, 5]],
        partition_expected=[[0, 3], [3, 5]],
        accuracy=Comparison(equal=True, summary="ok"),
        **kw,
    )


def _record(kind, got_ids, ref_ids, measured):
    plan = plan_phase(Phase(kind=kind, requests=2, prompt_tokens=8, max_tokens=3), 2)
    labels = [r.label for r in plan.compared()]
    got = PhaseOutputs([_c(lab, ids) for lab, ids in zip(labels, got_ids, strict=True)], metrics=measured)
    ref = PhaseOutputs([_c(lab, ids) for lab, ids in zip(labels, ref_ids, strict=True)])
    return phase_record(plan, Compare(), got, ref, {})


def test_a_mismatch_under_concurrency_fails_the_case_with_the_request_named():
    rec = _record("concurrent", [[1, 2, 3], [4, 5, 9]], [[1, 2, 3], [4, 5, 6]], {"peak_running": 2.0})
    assert (rec.requests, rec.exact, rec.mismatched) == (2, 1, 1)
    v = judge(Expectation(kind="supported"), _served(workload=[rec]))
    assert v.outcome is Outcome.FAIL and "phase concurrent: 1 of 2 requests differ" in v.reason
    assert rec.diffs[0].request == "concurrent:1" and rec.diffs[0].observed_ids == [4, 5, 9]


def test_a_phase_not_exercised_is_no_pass():
    rec = _record("concurrent", [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]], {"peak_running": 1.0})
    v = judge(Expectation(kind="supported"), _served(workload=[rec]))
    assert v.outcome is Outcome.ERROR and v.reason.startswith("not exercised: phase concurrent")


def test_an_exercised_equal_phase_passes():
    rec = _record("concurrent", [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]], {"peak_running": 2.0})
    assert judge(Expectation(kind="supported"), _served(workload=[rec])).outcome is Outcome.PASS


def test_bounds_against_the_reference():
    plan = plan_phase(Phase(kind="concurrent", requests=1, min_throughput_ratio=0.8, max_ttft_s=0.5), 2)
    label = plan.requests[0].label
    got = PhaseOutputs(
        [_c(label, [1])], metrics={"peak_running": 2.0}, perf={"output_tokens_per_s": 50.0, "ttft_max_s": 0.9}
    )
    ref = PhaseOutputs([_c(label, [1])], perf={"output_tokens_per_s": 100.0, "ttft_max_s": 0.2})
    rec = phase_record(plan, Compare(), got, ref, {})
    assert any("throughput 50.0 tok/s < 0.8 x the reference's 100.0" in p for p in rec.problems), rec.problems
    assert any("time to first token 0.900 s > 0.5 s" in p for p in rec.problems), rec.problems
    assert judge(Expectation(kind="supported"), _served(workload=[rec])).outcome is Outcome.FAIL


def test_a_perf_gate_against_a_recorded_baseline_fails_with_its_numbers():
    # Qwen3-32B-QuaRot-eagle3's nightly gate: output throughput >= 0.97 x 409.4417 tok/s
    gate = PerfGate(output_tokens_per_s=409.4417, ttft_s=0.8, tpot_s=0.05, ratio=0.97, source="AISBench gsm8k")
    plan = plan_phase(Phase(kind="concurrent", requests=1, perf_baseline=gate), 2)
    label = plan.requests[0].label
    slow = {"output_tokens_per_s": 380.2, "ttft_p50_s": 0.7, "itl_p50_s": 0.06}
    got = PhaseOutputs([_c(label, [1])], metrics={"peak_running": 2.0}, perf=slow)
    ref = PhaseOutputs([_c(label, [1])], perf={"output_tokens_per_s": 400.0})
    rec = phase_record(plan, Compare(), got, ref, {})
    assert "output throughput 380.2 tok/s < 397.158 (0.97 x baseline 409.442 (AISBench gsm8k))" in rec.problems
    assert any(p.startswith("median TPOT 0.06 s > 0.0515464") for p in rec.problems), rec.problems
    assert any(g.startswith("median TTFT 0.7 s <= 0.824742") for g in rec.gates), rec.gates
    assert len(rec.gates) == 3
    v = judge(Expectation(kind="supported"), _served(workload=[rec]))
    assert v.outcome is Outcome.FAIL and "output throughput 380.2 tok/s" in v.reason
    # the same phase within the gate passes, its gates still named in the evidence
    fast = {"output_tokens_per_s": 401.0, "ttft_p50_s": 0.7, "itl_p50_s": 0.05}
    got = PhaseOutputs([_c(label, [1])], metrics={"peak_running": 2.0}, perf=fast)
    rec = phase_record(plan, Compare(), got, ref, {})
    assert rec.problems == [] and len(rec.gates) == 3
    assert judge(Expectation(kind="supported"), _served(workload=[rec])).outcome is Outcome.PASS
    from reports.traffic import phase_row

    verdict = phase_row("c", rec)["verdict"]
    assert verdict.startswith("ok; output throughput 401 tok/s >= 397.158") and "median TPOT 0.05 s <=" in verdict


def test_a_perf_gate_needs_a_figure_and_its_measurement():
    with pytest.raises(ValueError, match="needs output_tokens_per_s, ttft_s and/or tpot_s"):
        PerfGate(ratio=0.9)
    plan = plan_phase(Phase(kind="batch", perf_baseline=PerfGate(ttft_s=1.0)), 1)
    rec = phase_record(plan, Compare(), PhaseOutputs([]), None, {})
    assert rec.problems == ["median TTFT not measured (a concurrent phase measures it)"]


def test_every_feature_check_the_schema_admits_is_run_or_shapes_the_requests(shipped):
    from harness.matrix.schema import FEATURE_CHECKS
    from harness.registry import LIVE_CHECKS

    assert set(FEATURE_CHECKS) == set(LIVE_CHECKS) | {"embeddings", "classifications"}
    # pooling is what the feature declares, not its name
    assert shipped.pools(["pooling"]) and not shipped.pools(["prefix-caching"])
    tasks = [shipped.pooling_task(f) for f in (["pooling"], ["classify"], ["prefix-caching"])]
    assert tasks == ["embed", "classify", ""]


def test_an_unknown_feature_check_is_refused_at_load(matrix_dir):
    matrix_dir("extra.yaml", "features:\n  mine:\n    title: x\n    checks: [prefix-cache-hits]\n")
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any("extra.yaml:4" in str(e) and "prefix-cache-hit" in str(e) for e in err.value.errors)


def test_a_concurrency_sweep_is_plotted_case_beside_reference_and_escaped():
    from harness.results.result import PhaseRecord, Result
    from reports import traffic

    def phase(n, tok, ref_tok):
        return PhaseRecord(
            name=f"c{n}",
            kind="concurrent",
            in_flight=n,
            perf={"output_tokens_per_s": tok, "ttft_p50_s": 0.1 * n},
            reference_perf={"output_tokens_per_s": ref_tok, "ttft_p50_s": 0.05 * n},
        )

    record = Result(
        case="fam/<script>",
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
        observation=Observation(workload=[phase(1, 10.0, 12.0), phase(4, 30.0, 20.0), phase(16, 60.0, 25.0)]),
    )
    (plot,) = traffic.plots([record])
    assert plot["svg"].count("<svg") == 2 and plot["svg"].count("<polyline") == 4  # two charts, two lines each
    assert "<script>" not in plot["svg"] and "requests in flight" in plot["svg"]
    rows = traffic.rows([record])
    assert [r["ratio"] for r in rows] == ["0.83", "1.50", "2.40"]
    # one phase is no sweep
    record.observation.workload = record.observation.workload[:1]
    assert traffic.plots([record]) == []


def test_more_tokens_than_engine_steps_show_several_sequences_sampled_at_once():
    plan = plan_phase(Phase(kind="concurrent"), 2)
    missed = {"peak_running": 0.0}
    batched = PhaseOutputs(metrics=missed | {"generation_tokens": 80.0, "steps": 31.0})
    assert not_exercised(plan, batched) is None
    serial = PhaseOutputs(metrics=missed | {"generation_tokens": 80.0, "steps": 84.0})
    assert "80 tokens generated in 84 engine steps" in not_exercised(plan, serial)
    # speculative decoding gives one sequence several tokens a step: no evidence either way
    drafted = PhaseOutputs(metrics=missed | {"generation_tokens": 80.0, "steps": 31.0, "spec_draft_tokens": 60.0})
    assert not_exercised(plan, drafted) is not None
    assert metrics.deltas({}, metrics.parse('vllm:iteration_tokens_total_count{engine="0"} 42.0')) == {"steps": 42.0}


def test_generated_ids_are_the_ones_randrange_draws_and_leave_the_generator_alike():
    import random

    from harness.cases.phases.kind import ID_HIGH, ID_LOW, ids

    for seed in ("0:concurrent", "7:long-prompt", 3):
        for n in (0, 1, 5, 997):
            fast, plain = random.Random(seed), random.Random(seed)
            assert ids(fast, n) == tuple(plain.randrange(ID_LOW, ID_HIGH) for _ in range(n))
            assert fast.random() == plain.random(), "the next draw is the same too"


def test_a_phases_planned_sizes_are_its_plans_and_are_planned_once(monkeypatch):
    import harness.cases.workload as workload
    from harness.plan import cost

    phase = Phase(kind="concurrent", requests=6, prompt_tokens=40, max_tokens=9)
    plan = plan_phase(phase, 2)
    want = (1, 9, sum(len(r.prompt) for r in plan.requests))  # six in flight at once: one wave
    assert not plan.warmup and not plan.after and plan.in_flight == 6
    assert cost.planned_sizes(phase, 2) == want
    monkeypatch.setattr(workload, "plan_phase", lambda *a: pytest.fail("planned again"))
    assert cost.planned_sizes(phase, 2) == want
    assert cost.planned_sizes(Phase(kind="concurrent", requests=6, prompt_tokens=40, max_tokens=9), 2) == want
    with pytest.raises(pytest.fail.Exception, match="planned again"):
        cost.planned_sizes(phase.model_copy(update={"max_tokens": 10}), 2)
    with pytest.raises(pytest.fail.Exception, match="planned again"):
        cost.planned_sizes(phase, 4)

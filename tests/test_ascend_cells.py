"""The guide's remaining cells on the shipped Ascend matrix: each expands to the case with the
right claim, and the judge gives that claim the right outcome on recorded observations (log
excerpts written from vllm-ascend's source as vLLM prints a start-up failure: no NPU here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.check import logs
from harness.check.verdict.judge import judge
from harness.outcomes import Cause, Outcome
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.results.result import Expectation, Observation, Stages, WorkerStage

LOGS = Path(__file__).parent / "data" / "logs"
SUITES = ("nightly-ascend", "release-ascend")


@pytest.fixture(scope="module")
def cases(shipped):
    return {c.id: c for s in SUITES for c in expand(shipped, s).cases}


def claim(cases, cid) -> Expectation:
    assert cid in cases, f"{cid} is not a case of {', '.join(SUITES)}"
    return cases[cid].expectation


def startup_failure(log: str, exp: Expectation, phase: str = "startup") -> Observation:
    """What the checks make of a launch that died with this log: its root cause, and the line a
    claimed rejection's pattern matched."""
    paths = {"node0-api": LOGS / log}
    line = logs.search_errors(paths, exp.error) if exp.kind == "rejected" and exp.error else None
    return Observation(
        failed_phase=phase,
        failed_after_s=160.0,
        exit_codes={"node0-api": 1},
        engine_started=phase == "startup",
        root_cause=logs.root_cause(paths),
        expected_error_line=line,
        expected_error_after_s=160.0 if line else None,
    )


# -- Mooncake P/D: prefill TP not a multiple of decode TP -------------------------------------


def test_the_engine_treats_the_deepseek_glm_and_kimi_families_as_mla(shipped):
    mla = {(f, v) for f, fam in shipped.families.items() for v, var in fam.variants.items() if var.mla}
    assert ("guide-61-layer", "default") in mla and ("glm-5.2", "text") in mla and ("kimi-k3", "text") in mla
    for family in ("minimax-m3", "qwen3.6", "qwen3", "minimax-m2.5"):
        assert not any(f == family for f, _ in mla), family


def test_prefill_tp6_over_decode_tp4_on_a_model_that_is_not_mla_is_the_asserted_known_issue(shipped, cases):
    case = cases["minimax-m2.5/pd-p-tp6pp2-d-tp4/auto/none"]
    assert (case.attrs["tp"], case.attrs["decode_tp"], case.attrs["mla"]) == (6, 4, False)
    assert case.attrs["pd_tp_multiple"] is False
    e = case.expectation
    assert (e.kind, e.waives) == ("known-issue", ["startup"]) and e.owner and e.until
    assert "ascend_config.py#L215" in e.link
    # the heads a TP of 6 must divide (48 attention heads): the connector's check is what it meets
    d = plan(shipped, case, load_cluster("a3-pd"))
    prefill, decode, _ = d.launches
    assert [len(l.env_dict()["ASCEND_RT_VISIBLE_DEVICES"].split(",")) for l in (prefill, decode)] == [12, 4]
    obs = startup_failure("pd-tp6-d-tp4-assert.log", e, phase="config")
    assert obs.root_cause.cause is Cause.CRASH
    v = judge(e, obs)
    assert v.outcome is Outcome.KNOWN_ISSUE, v.reason
    assert "Prefill TP size must be divisible by Decode TP size" in v.reason


def test_the_same_assertion_claimed_as_a_rejection_would_be_bad_reject(cases):
    e = claim(cases, "minimax-m2.5/pd-p-tp6pp2-d-tp4/auto/none")
    as_rejection = Expectation(kind="rejected", error=e.error, phase="config", within_s=600)
    v = judge(as_rejection, startup_failure("pd-tp6-d-tp4-assert.log", as_rejection, phase="config"))
    assert v.outcome is Outcome.BAD_REJECT and "crash (AssertionError)" in v.reason


def test_a_known_issue_met_by_another_failure_is_fail(cases):
    """The waiver covers the assertion only: the MLA refusal (or any other start-up failure) is
    not the known issue."""
    e = claim(cases, "minimax-m2.5/pd-p-tp6pp2-d-tp4/auto/none")
    v = judge(e, startup_failure("pd-mla-tp2-d-tp4-refusal.log", e))
    assert v.outcome is Outcome.FAIL and "not the waived crash: AssertionError" in v.reason
    assert "a ValueError" in v.reason  # the refusal's own class, as the evidence shows it


def test_prefill_tp_below_decode_tp_is_asserted_unless_mla_where_it_is_refused(cases):
    assert claim(cases, "minimax-m2.5/pd-p-tp2pp2-d-tp4/auto/none").kind == "known-issue"
    e = claim(cases, "guide-61-layer/pd-p-tp2pp2-d-tp4/auto/none")
    assert (e.kind, e.phase) == ("rejected", "startup")
    v = judge(e, startup_failure("pd-mla-tp2-d-tp4-refusal.log", e))
    assert v.outcome is Outcome.XFAIL, v.reason
    assert "refusal: ValueError" in v.reason
    # a multiple is plain P/D support
    assert claim(cases, "minimax-m2.5/pd-p-tp8pp2-d-tp4/auto/none").kind == "supported"


# -- Mooncake P/D: PP + PCP on the Prefill ----------------------------------------------------


@pytest.mark.parametrize(
    "cid", ["guide-61-layer/pd-p-tp4pp2-d-tp4/auto/pcp", "minimax-m2.5/pd-p-tp4pp2-d-tp4/auto/pcp"]
)
def test_pp_and_pcp_on_a_mooncake_prefill_is_the_asserted_known_issue(shipped, cases, cid):
    e = claim(cases, cid)
    assert (e.kind, e.waives) == ("known-issue", ["startup"]) and e.owner and e.until
    assert "mooncake_connector.py#L2077" in e.link
    d = plan(shipped, cases[cid], load_cluster("a3-pd"))
    prefill, decode, _ = d.launches
    # PCP is the Prefill's: TP4 x PP2 x PCP2 fills its node, the Decode runs none
    assert prefill.argv[prefill.argv.index("--prefill-context-parallel-size") + 1] == "2"
    assert "--prefill-context-parallel-size" not in decode.argv
    assert len(prefill.env_dict()["ASCEND_RT_VISIBLE_DEVICES"].split(",")) == 16
    v = judge(e, startup_failure("pd-pp-pcp-assert.log", e))
    assert v.outcome is Outcome.KNOWN_ISSUE, v.reason


def test_pp_and_pcp_on_a_single_instance_stays_the_refusal_and_the_assertion_is_bad_reject(cases):
    e = claim(cases, "glm-5.2/text/tp8-pp2-2node-mp/auto/pcp")
    assert e.kind == "rejected" and not re.search(e.error, "AssertionError: pp and pcp cannot open in same time")
    v = judge(e, startup_failure("pd-pp-pcp-assert.log", e))
    assert v.outcome is Outcome.BAD_REJECT and "crash (AssertionError)" in v.reason


# -- graph mode: validated with MTP stacks, and a downgrade is a silent disable ----------------


def test_graph_mode_is_claimed_as_validated_only_when_stacked_with_mtp(cases):
    validated = claim(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode+mtp")
    assert validated.kind == "supported" and not validated.experimental
    assert "validated with MTP stacks" in validated.why
    for cid in (
        "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode",
        "kimi-k3/text/tp8-pp2-2node-mp/auto/async-scheduling+graph-mode",
    ):
        e = claim(cases, cid)
        assert e.kind == "supported" and e.experimental, cid
    # what the guide rejects stays rejected with graph mode stacked
    assert claim(cases, "deepseek-v4.1/text/tp8-pp2-2node-mp/auto/graph-mode+mtp").kind == "rejected"


def test_a_downgraded_graph_mode_fails_the_validated_claim(shipped, cases):
    paths = {"node0-api": LOGS / "graph-mode-downgraded.log"}
    found = logs.warnings_matching(paths, shipped.features["graph-mode"].silent_disable)
    assert [line.line for line in found] == [3]
    e = claim(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode+mtp")
    obs = Observation(ready=True, ready_s=420.0, exit_codes={"node0-api": None}, silent_disable=found)
    v = judge(e, obs)
    assert v.outcome is Outcome.FAIL and "setting cudagraph_mode=PIECEWISE" in v.reason
    # the same deployment without the downgrade passes
    assert judge(e, Observation(ready=True, ready_s=420.0, exit_codes={"node0-api": None})).outcome is Outcome.PASS


def test_graph_mode_patterns_name_only_a_downgrade_of_full_decode_only(shipped):
    rx = [re.compile(p) for p in shipped.features["graph-mode"].silent_disable]
    downgrades = (
        "CUDAGraphMode.FULL_DECODE_ONLY is not supported with AscendAttentionBackend backend (support: "
        "AttentionCGSupport.NEVER); setting cudagraph_mode=NONE because attention is not compiled piecewise",
        "KV connector MooncakeConnectorV1 requires PIECEWISE CUDA graph mode due to layerwise async operations "
        "that cannot be captured in CUDA graphs. Overriding cudagraph_mode from FULL_DECODE_ONLY to PIECEWISE.",
        "Pooling models do not support full cudagraphs. Overriding cudagraph_mode to PIECEWISE.",
    )
    for text in downgrades:
        assert any(r.search(text) for r in rx), text
    # the upgrade of a mixed mode to FULL_DECODE_ONLY is not a downgrade of graph mode
    upgrade = (
        "CUDAGraphMode.FULL is not supported with AscendAttentionBackend backend (support: "
        "AttentionCGSupport.UNIFORM_BATCH); setting cudagraph_mode=FULL_DECODE_ONLY"
    )
    assert not any(r.search(upgrade) for r in rx)


# -- the claims table ---------------------------------------------------------------------------


def test_claims_table_says_what_the_guide_does_not_claim_and_what_it_validates(shipped):
    from reports.feature_table import feature_claims

    nightly = list(expand(shipped, "nightly-ascend").cases)
    rows = {r.name: (r.symbol, r.text) for r in feature_claims(shipped, nightly)}
    symbol, text = rows["KV offloading (Sparse KV Cache Offload)"]
    assert symbol == "✅" and "not a claim of the guide: refused for GLM-5.2" in text
    e = claim({c.id: c for c in nightly}, "glm-5.2/text/tp8-pp2-2node-mp/auto/kv-offload")
    assert e.kind == "rejected" and e.undocumented
    # graph mode: supported (validated with MTP), experimental without it
    symbol, text = rows["Graph mode (ACL graph)"]
    assert symbol == "✅" and "experimental in part" in text and "MTP stacks only" in text
    # a stack decided by graph mode's experimental claim does not make another row experimental
    assert rows["Async scheduling"] == ("✅", "Supported.")
    assert rows["P/D disaggregation"][0] == "✅" and "only" not in rows["P/D disaggregation"][1]


# -- dynamic chunked PP for long-context prefill ---------------------------------------------


def test_dynamic_chunked_pp_is_claimed_with_a_long_prompt_phase_that_must_be_chunked(shipped, cases):
    from harness.cases.workload import plan_workload, workload_problems

    case = cases["qwen3.6/moe/tp8-pp2-2node-mp/auto/dynamic-chunked-pp"]
    assert case.expectation.kind == "supported" and "long-context prefill" in case.expectation.why
    (long,) = [p for p in plan_workload(shipped, case) if p.kind == "long-prompt"]
    budget = shipped.features["dynamic-chunked-pp"].args
    chunk = int(budget[budget.index("--max-num-batched-tokens") + 1])
    assert {len(r.prompt) for r in long.requests} == {65536} and 65536 > 3 * chunk
    assert workload_problems(shipped, case) == []
    d = plan(shipped, case, load_cluster("a3-2node"))
    for launch in d.launches:
        config = json.loads(launch.argv[launch.argv.index("--additional-config") + 1])
        assert config == {"scheduler_config": {"profiling_chunk_config": {"enabled": True}}}
        assert "--enable-chunked-prefill" in launch.argv


def test_dynamic_chunked_pp_is_the_prefills_on_a_pd_pair(shipped, cases):
    prefill, decode, _ = plan(
        shipped, cases["qwen3.6/moe/pd-p-tp8pp2-d-tp4/auto/dynamic-chunked-pp"], load_cluster("a3-pd")
    ).launches
    assert "profiling_chunk_config" in prefill.argv[prefill.argv.index("--additional-config") + 1]
    assert "--additional-config" not in decode.argv and "--enable-chunked-prefill" not in decode.argv


def test_fixed_chunks_after_a_failed_profile_are_a_silent_disable(shipped, cases):
    paths = {"node0-api": LOGS / "dynamic-chunk-fallback.log"}
    found = logs.warnings_matching(paths, shipped.features["dynamic-chunked-pp"].silent_disable)
    assert [line.line for line in found] == [3]
    e = claim(cases, "qwen3.6/moe/tp8-pp2-2node-mp/auto/dynamic-chunked-pp")
    v = judge(e, Observation(ready=True, ready_s=300.0, exit_codes={"node0-api": None}, silent_disable=found))
    assert v.outcome is Outcome.FAIL and "Profiling failed" in v.reason


def test_dynamic_chunked_pp_without_pp_is_refused_a_claim_the_guide_does_not_make(cases):
    e = claim(cases, "qwen3.6/dense/pp1-tp1/auto/dynamic-chunked-pp")
    assert (e.kind, e.phase, e.undocumented) == ("rejected", "config", True)
    v = judge(e, startup_failure("dynamic-chunk-pp1-refusal.log", e, phase="config"))
    assert v.outcome is Outcome.XFAIL and "refusal: ValueError" in v.reason


# -- the drafter on the last stage "on both model runners" -----------------------------------

STAGES = Path(__file__).parent / "data" / "stages"
PP2_OF_4 = [[0, 2], [2, 4]]  # the 4-layer target of the probe answers in tests/data/stages


def probe_answers(name: str, **asked) -> Stages:
    doc = json.loads((STAGES / name).read_text())
    return Stages(workers=[WorkerStage.model_validate(w) for w in doc["workers"]], **asked)


def served(stages: Stages) -> Observation:
    return Observation(
        ready=True,
        ready_s=400.0,
        exit_codes={"node0-api": None},
        partition=PP2_OF_4,
        partition_expected=PP2_OF_4,
        accuracy={"equal": True, "summary": "ok"},
        stages=stages,
    )


def test_mtp_on_model_runner_v1_is_claimed_and_planned_with_v1(shipped, cases):
    case = cases["glm-5.2/text/tp8-pp2-2node-mp/38,40/model-runner-v1+mtp"]
    e = case.expectation
    assert e.kind == "supported" and "On both model runners" in e.why and "last PP stage" in e.why
    d = plan(shipped, case, load_cluster("a3-2node"))
    assert {launch.env_dict()["VLLM_USE_V2_MODEL_RUNNER"] for launch in d.launches} == {"0"}
    # the platform's V2 elsewhere
    other = plan(shipped, cases["glm-5.2/text/tp8-pp2-2node-mp/38,40/draft-tp1+mtp"], load_cluster("a3-2node"))
    assert {launch.env_dict()["VLLM_USE_V2_MODEL_RUNNER"] for launch in other.launches} == {"1"}
    # release checks it for every family with an MTP drafter, on both executors
    release = [c for c in cases.values() if "model-runner-v1" in c.features and c.suite == "release-ascend"]
    assert {c.family for c in release} == {"deepseek-v4", "glm-5.2", "minimax-m3", "qwen3.6", "kimi-k3"}
    assert {c.expectation.kind for c in release} == {"supported"}


def test_a_drafter_off_the_last_stage_on_model_runner_v1_fails(cases):
    e = claim(cases, "qwen3.6/moe/tp8-pp2-2node-mp/auto/model-runner-v1+mtp")
    assert judge(e, served(probe_answers("pp2-dspark-good.json", draft_method="mtp"))).outcome is Outcome.PASS
    v = judge(e, served(probe_answers("drafter-on-rank0.json", draft_method="mtp")))
    assert v.outcome is Outcome.FAIL and "it belongs on the last PP stage only" in v.reason


# -- DSpark taps on stage 0 under a custom partition -----------------------------------------


def test_dspark_with_a_custom_partition_asks_for_a_tap_on_stage_0(shipped, cases):
    from harness.cases.workload import stage_bounds_of

    for cid in ("glm-5.2/text/tp8-pp2-2node-mp/38,40/dspark", "glm-5.2/text/tp8-pp2-2node-ray/44,34/dspark"):
        case = cases[cid]
        assert case.attrs["custom_partition"] and case.expectation.kind == "supported", cid
        assert case.expectation.stage_bounds == {"tapped_stage": 0}
        assert stage_bounds_of(shipped, case).tapped_stage == 0
    # the auto partition makes no such demand
    assert claim(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/dspark").stage_bounds is None


def test_taps_on_stage_0_relayed_pass_and_a_missing_relay_fails(cases):
    e = claim(cases, "glm-5.2/text/tp8-pp2-2node-mp/38,40/dspark")
    good = probe_answers("pp2-dspark-good.json", draft_method="dspark", draft_tp=1, tapped_stage=0)
    assert judge(e, served(good)).outcome is Outcome.PASS
    missing = probe_answers("missing-relayed-tap.json", draft_method="dspark", draft_tp=1, tapped_stage=0)
    v = judge(e, served(missing))
    assert v.outcome is Outcome.FAIL and "not relayed to the drafter on the last stage" in v.reason


def test_taps_that_all_fall_on_the_last_stage_leave_the_relay_not_exercised(cases):
    e = claim(cases, "glm-5.2/text/tp8-pp2-2node-mp/38,40/dspark")
    good = probe_answers("pp2-dspark-good.json", draft_method="dspark", draft_tp=1, tapped_stage=0)
    # the same drafter tapping only layer 3 (capture numbering): every tap lives on stage 1
    late = good.model_copy(
        update={"workers": [w.model_copy(update={"taps": [2], "aux_layers": [3]}) for w in good.workers]}
    )
    v = judge(e, served(late))
    assert v.outcome is Outcome.ERROR and "no tap of the drafter (3) lies on PP stage 0 [0, 2]" in v.reason
    silent = good.model_copy(
        update={"workers": [w.model_copy(update={"taps": None, "aux_layers": None}) for w in good.workers]}
    )
    assert "reported no taps" in judge(e, served(silent)).reason

"""The Ascend matrix encodes the vllm-ascend PP guide: one test per claim, on the shipped matrix.

Each test expands the Ascend suites (no server, no devices) and checks the resolved expectation
of a representative case, or the exact flags its launch plan carries.
"""

import datetime
import json
import re

import pytest

from harness.cases.expand import expand
from harness.cases.partition import stage_ranges
from harness.check.serving.stack import layer_counts
from harness.launch import PlanError
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from reports.drift import docs_drift

SUITES = ("nightly-ascend", "release-ascend")

# The guide's tables, row names and support cells as published ("Model Support for PP" and
# "Feature stacked with PP"), in the tab-separated form of the page's text export.
GUIDE_FAMILIES = {
    "DeepSeek-V4": "Text, multimodal, and MTP-drafter variants (Ascend implementation)",
    "DeepSeek-V4.1": "Text and multimodal variants (Ascend implementation)",
    "GLM-5.2": "Text variant (Ascend implementation)",
    "MiniMax-M3": "Sparse text and multimodal variants (Ascend implementation)",
    "Qwen3.6": "Dense text and MoE variants (upstream implementation)",
    "Kimi K3": "Text and multimodal variants (upstream implementation with an Ascend adapter)",
}
# P/D is a topology (a decode instance and a connector), not a feature.
TOPOLOGY_ROWS = {"P/D disaggregation"}
GUIDE_FEATURES = {
    "Graph mode (ACL graph)": "Supported with `FULL_DECODE_ONLY`; validated with MTP stacks.",
    "MTP": "Supported.",
    "EAGLE3": "Supported only for MiniMax-M3 sparse models; the upstream Model Runner V2 restriction is "
    "lifted for these architectures.",
    "DFlash": "Not supported.",
    "DSpark": "Supported only for DeepSeek-V4 and GLM-5.2 MoE-DSA models.",
    "PCP (Prefill Context Parallel)": "Not supported.",
    "DCP (Decode Context Parallel)": "Supported; use `MooncakeConnectorV2` for KV transfer.",
    "LayerSplit (KVPP)": "Supported. An intermittent output-mismatch issue in the e2e test is under investigation.",
    "KV offloading (Sparse KV Cache Offload)": "Supported with the layerwise connector.",
    "Prefix caching": "Supported.",
    "Pooling": "Supported.",
    "P/D disaggregation": "Supported with PP on the Prefill node only; the Decode node must use `PP1`.",
    "Async scheduling": "Supported.",
    "Sequence parallelism": "Supported.",
}


@pytest.fixture(scope="module")
def cases(shipped):
    return {c.id: c for s in SUITES for c in expand(shipped, s).cases}


def exp(cases, cid):
    assert cid in cases, f"{cid} is not a case of {', '.join(SUITES)}"
    return cases[cid].expectation


def argv_json(launch, flag):
    argv = list(launch.argv)
    return json.loads(argv[argv.index(flag) + 1])


def flag_value(launch, flag):
    argv = list(launch.argv)
    return argv[argv.index(flag) + 1]


# -- families ("Model Support for PP") ---------------------------------------------------------


@pytest.mark.parametrize(
    "family, variants, origin",
    [
        (
            "deepseek-v4",
            {"text": "DeepseekV4ForCausalLM", "multimodal": "DeepseekV4ForConditionalGeneration"},
            "ascend",
        ),
        ("deepseek-v4.1", {"text": "DeepseekV41ForCausalLM", "multimodal": "DeepseekV41ForCausalLM"}, "ascend"),
        ("glm-5.2", {"text": "GlmMoeDsaForCausalLM"}, "ascend"),
        (
            "minimax-m3",
            {"sparse-text": "MiniMaxM3SparseForCausalLM", "multimodal": "MiniMaxM3SparseForConditionalGeneration"},
            "ascend",
        ),
        ("qwen3.6", {"dense": "Qwen3_5ForCausalLM", "moe": "Qwen3_5MoeForCausalLM"}, "upstream"),
        (
            "kimi-k3",
            {"text": "KimiK3ForConditionalGeneration", "multimodal": "KimiK3ForConditionalGeneration"},
            "upstream+ascend-adapter",
        ),
    ],
)
def test_guide_families_with_registered_architectures(shipped, family, variants, origin):
    fam = shipped.families[family]
    assert {name: v.architecture for name, v in fam.variants.items()} == variants
    for v in fam.variants.values():
        assert v.supports_pp and v.origin == origin and "ascend" in v.platforms


def test_every_family_row_of_the_guide_names_a_family(shipped):
    for row in GUIDE_FAMILIES:
        assert [k for k, f in shipped.families.items() if row in f.aliases], row


def test_deepseek_v4_mtp_drafter_runs_from_the_target_checkpoint(shipped):
    for v in shipped.families["deepseek-v4"].variants.values():
        assert v.drafters["mtp"] == v.model


def test_plain_pp_is_claimed_for_every_variant_on_both_two_node_layouts(shipped, cases):
    nightly = {c.id: c for c in expand(shipped, "nightly-ascend").cases}
    for family in ("deepseek-v4", "deepseek-v4.1", "glm-5.2", "minimax-m3", "qwen3.6", "kimi-k3"):
        for variant in shipped.families[family].variants:
            for topo in ("tp8-pp2-2node-mp", "tp8-pp2-2node-ray"):
                cid = f"{family}/{variant}/{topo}/auto/none"
                assert cid in nightly, cid
                assert nightly[cid].expectation.kind == "supported"


def test_model_without_supportspp_is_rejected_while_the_config_is_built(cases):
    e = exp(cases, "bge-m3/tp8-pp2-2node-mp/auto/none")
    assert (e.kind, e.phase) == ("rejected", "config")
    assert re.search(
        e.error,
        "NotImplementedError: Pipeline parallelism is not supported for this model. "
        "Supported models implement the `SupportsPP` interface.",
    )


# -- layer partitions ---------------------------------------------------------------------------


def test_guide_auto_partitions_of_the_61_layer_model(shipped, cases):
    assert shipped.families["guide-61-layer"].variants["default"].hidden_layers == 61
    assert stage_ranges(61, 2) == [(0, 31), (31, 61)]
    assert stage_ranges(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]
    assert stage_ranges(61, 2, "32,29") == [(0, 32), (32, 61)]
    for cid in (
        "guide-61-layer/tp8-pp2-2node-mp/auto/none",
        "guide-61-layer/tp8-pp2-2node-mp/32,29/none",
        "guide-61-layer/tp8-pp2-2node-mp/31,30/none",
        "guide-61-layer/tp4-pp4-2node-mp/auto/none",
        "guide-61-layer/tp4-pp4-2node-mp/15,15,16,15/none",
    ):
        assert exp(cases, cid).kind == "supported", cid


@pytest.mark.parametrize(
    "cid, text",
    [
        (
            "guide-61-layer/tp8-pp2-2node-mp/31,31/none",
            "ValueError: sum(partitions)=62 does not match num_hidden_layers=61.",
        ),
        ("guide-61-layer/pp2-tp1/32,29,0/none", "ValueError: len(partitions)=3 does not match pp_size=2."),
        ("guide-61-layer/tp4-pp4-2node-mp/20,20,21/none", "ValueError: len(partitions)=3 does not match pp_size=4."),
        ("guide-61-layer/pp2-tp1/32,29,/none", "ValueError: Invalid partition string: 32,29,"),
        (
            "glm-5.2/text/tp8-pp2-2node-mp/38,38/none",
            "ValueError: sum(partitions)=76 does not match num_hidden_layers=78.",
        ),
    ],
)
def test_invalid_entry_count_or_sum_fails_startup(cases, cid, text):
    e = exp(cases, cid)
    assert (e.kind, e.phase) == ("rejected", "startup")
    assert re.search(e.error, text)


def test_zero_entry_is_a_known_issue_waiving_only_the_startup_crash(cases):
    """The guide says a zero entry is invalid; upstream crashes instead of refusing it: a bug,
    not a designed rejection, so it is a known issue with a link, waiving that crash only: the
    guide's own refusal, should vllm-ascend add it, is not waived (the claim becomes rejected)."""
    e = exp(cases, "guide-61-layer/tp8-pp2-2node-mp/0,61/none")
    assert (e.kind, e.waives) == ("known-issue", ["startup"])
    assert e.link and e.owner and e.until
    assert not re.search(e.error, "every partition entry must be a positive integer, got 0 in '0,61'.")
    assert re.search(e.error, "ZeroDivisionError: integer division or modulo by zero")
    assert e.crash is not None and e.crash["exception"] == "ZeroDivisionError"


def test_custom_partition_of_a_family_with_known_layers(cases):
    assert exp(cases, "glm-5.2/text/tp8-pp2-2node-mp/38,40/none").kind == "supported"
    assert exp(cases, "glm-5.2/text/tp8-pp2-2node-ray/40,38/none").kind == "supported"


# -- features stacked with PP ("Feature stacked with PP") ------------------------------------


def test_every_feature_row_of_the_guide_has_a_feature_with_that_alias(shipped):
    for row in GUIDE_FEATURES:
        if row in TOPOLOGY_ROWS:
            continue
        assert [k for k, f in shipped.features.items() if row in f.aliases], row


def test_every_feature_row_is_exercised_by_the_ascend_suites(shipped, cases):
    used = {f for c in cases.values() for f in c.features}
    for row in set(GUIDE_FEATURES) - TOPOLOGY_ROWS:
        (key,) = [k for k, f in shipped.features.items() if row in f.aliases]
        assert key in used, row
    assert any(c.attrs["pd"] for c in cases.values())


def test_docs_drift_of_the_guide_tables_leaves_only_the_silent_mtp_exception(shipped, cases, tmp_path):
    lines = ["Model family\tVariants with `SupportsPP` implementations"]
    lines += [f"{k}\t{v}" for k, v in GUIDE_FAMILIES.items()]
    lines += ["", "Feature stacked with PP\tSupport"]
    lines += [f"{k}\t{v}" for k, v in GUIDE_FEATURES.items()]
    doc = tmp_path / "guide.txt"
    doc.write_text("\n".join(lines) + "\n")
    drifts = docs_drift(doc, shipped, list(cases.values()))
    # the one true difference: vLLM refuses MTP on DeepSeek-V4.1, about which the guide is silent
    assert [(d.name, d.claimed) for d in drifts] == [("MTP", "❌")], [str(d) for d in drifts]
    assert "the guide is silent" in drifts[0].message


def test_graph_mode_full_decode_only_supported_and_with_mtp(cases):
    e = exp(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode")
    assert e.kind == "supported" and "FULL_DECODE_ONLY" in e.why
    assert exp(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode+mtp").kind == "supported"


@pytest.mark.parametrize(
    "variant", ["deepseek-v4/text", "glm-5.2/text", "minimax-m3/sparse-text", "qwen3.6/moe", "kimi-k3/multimodal"]
)
def test_mtp_supported(cases, variant):
    assert exp(cases, f"{variant}/tp8-pp2-2node-mp/auto/mtp").kind == "supported"


def test_deepseek_v41_has_no_classic_mtp(cases):
    e = exp(cases, "deepseek-v4.1/text/tp8-pp2-2node-mp/auto/mtp")
    assert (e.kind, e.phase) == ("rejected", "config")
    assert re.search(e.error, "ValueError: DeepSeek V4.1 has no classic-MTP draft: its checkpoints ship DSpark stages")


def test_eagle3_only_for_minimax_m3(cases):
    for variant in ("minimax-m3/sparse-text", "minimax-m3/multimodal"):
        e = exp(cases, f"{variant}/tp8-pp2-2node-mp/auto/eagle3")
        assert e.kind == "supported" and "MiniMax-M3" in e.why
    for variant in ("deepseek-v4/text", "deepseek-v4.1/text", "glm-5.2/text", "qwen3.6/dense", "kimi-k3/text"):
        e = exp(cases, f"{variant}/tp8-pp2-2node-mp/auto/eagle3")
        assert (e.kind, e.phase) == ("rejected", "startup"), variant
    e = exp(cases, "deepseek-v4/text/tp8-pp2-2node-mp/auto/eagle3")
    assert re.search(e.error, "ValueError: DeepseekV4ForCausalLM does not support eagle3 with pipeline parallelism")


def test_dflash_not_supported_anywhere(cases):
    dflash = [c for c in cases.values() if "dflash" in c.features]
    assert {c.family for c in dflash} >= {"deepseek-v4", "glm-5.2", "minimax-m3", "qwen3.6", "kimi-k3"}
    assert {c.expectation.kind for c in dflash} == {"rejected"}
    e = exp(cases, "qwen3.6/dense/tp8-pp2-2node-mp/auto/dflash")
    assert re.search(e.error, "ValueError: Qwen3_5ForCausalLM does not support dflash with pipeline parallelism")


def test_dspark_only_for_deepseek_v4_and_glm_5_2(cases):
    for variant in ("deepseek-v4/text", "deepseek-v4/multimodal", "glm-5.2/text"):
        assert exp(cases, f"{variant}/tp8-pp2-2node-mp/auto/dspark").kind == "supported", variant
    for variant in ("deepseek-v4.1/text", "minimax-m3/sparse-text", "qwen3.6/moe", "kimi-k3/text"):
        assert exp(cases, f"{variant}/tp8-pp2-2node-mp/auto/dspark").kind == "rejected", variant


def test_pcp_rejected_by_the_refusal_not_by_the_assertion(cases):
    pcp = [c for c in cases.values() if "pcp" in c.features and not c.attrs["pd"]]
    assert pcp and {c.expectation.kind for c in pcp} == {"rejected"}
    e = exp(cases, "qwen3.6/dense/tp8-pp2-2node-mp/auto/pcp")
    assert e.phase == "startup"
    assert re.search(e.error, "NotImplementedError: Ascend MRV2 PCP does not support PP yet.")
    # the Mooncake connector's assertion is a crash: it must not pass as the designed refusal
    assert not re.search(e.error, "AssertionError: pp and pcp cannot open in same time")


def test_dcp_supported_over_mooncake_connector_v2(shipped, cases):
    e = exp(cases, "glm-5.2/text/pd-p-tp8pp2-d-tp8-mcv2/auto/dcp")
    assert e.kind == "supported" and "MooncakeConnectorV2" in e.why
    assert shipped.topologies["pd-p-tp8pp2-d-tp8-mcv2"].connector == "MooncakeConnectorV2"
    assert exp(cases, "qwen3.6/dense/tp8-pp2-2node-mp/auto/dcp").kind == "supported"


def test_layersplit_is_a_known_issue_with_a_waiver(cases):
    e = exp(cases, "glm-5.2/text/tp8-pp2-2node-mp/auto/layersplit")
    assert e.kind == "known-issue"
    assert e.link.startswith("https://github.com/vllm-project/vllm-ascend/")
    assert e.owner == "recky-c (author of vllm-ascend#16094)"
    assert datetime.date(2026, 11, 30) < e.until <= datetime.date(2027, 6, 30)
    assert "output-mismatch" in e.why
    assert exp(cases, "glm-5.2/text/tp8-pp2-2node-mp/38,40/layersplit+mtp").kind == "known-issue"


@pytest.mark.parametrize(
    "cid, words",
    [
        ("glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload", "layerwise connector"),
        ("qwen3.6/dense/tp8-pp2-2node-mp/auto/prefix-caching", "Prefix caching"),
        ("qwen3.6/dense/tp8-pp2-2node-mp/auto/pooling", "Pooling"),
        ("kimi-k3/text/tp8-pp2-2node-mp/auto/async-scheduling", "Async scheduling"),
        ("minimax-m3/multimodal/tp8-pp2-2node-mp/auto/sequence-parallelism", "Sequence parallelism"),
    ],
)
def test_supported_rows_carry_the_guides_wording(cases, cid, words):
    e = exp(cases, cid)
    assert e.kind == "supported" and words in e.why


# -- compatibility limits -------------------------------------------------------------------


def test_xlite_graph_mode_rejected(cases):
    e = exp(cases, "glm-5.2/text/tp8-pp2-2node-mp/auto/xlite-graph")
    assert e.kind == "rejected"
    assert re.search(
        e.error,
        "RuntimeError: Xlite graph mode is not compatible with pipeline parallelism. "
        "Please set pipeline_parallel_size to 1.",
    )


def test_pd_with_pp_on_prefill_only(cases):
    for cid in (
        "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none",
        "guide-61-layer/pd-p-tp8pp2-d-tp1/32,29/none",
        "guide-61-layer/pd-p-tp8pp2-d-tp4/32,29/none",
    ):
        assert exp(cases, cid).kind == "supported", cid
    e = exp(cases, "guide-61-layer/pd-p-tp8pp2-d-tp8pp2/auto/none")
    # vllm-ascend asserts it (a crash): a known issue linked to the assertion, not a rejection
    assert (e.kind, e.waives) == ("known-issue", ["startup"])
    assert "mooncake_connector.py#L" in e.link and e.until
    assert re.search(e.error, "AssertionError: decode pp size must be 1")


def test_prefill_tp_must_be_a_multiple_of_decode_tp(cases):
    # not MLA: vllm-ascend asserts it, a known issue linked to the assertion
    bad = cases["minimax-m2.5/pd-p-tp2pp2-d-tp4/auto/none"]
    assert bad.attrs["pd_tp_multiple"] is False and bad.expectation.kind == "known-issue"
    assert "ascend_config.py#L" in bad.expectation.link and bad.expectation.waives == ["startup"]
    assert re.search(bad.expectation.error, "AssertionError: Prefill TP size must be divisible by Decode TP size.")
    # MLA (the guide's 61-layer DeepSeek model): the connector's worker refuses a smaller prefill TP
    mla = cases["guide-61-layer/pd-p-tp2pp2-d-tp4/auto/none"]
    assert mla.attrs["mla"] and mla.expectation.kind == "rejected"
    assert re.search(
        mla.expectation.error, "ValueError: prefill_tp_size: 2 must be greater than or equal to the decode_tp_size: 4"
    )
    assert cases["guide-61-layer/pd-p-tp8pp2-d-tp4/auto/none"].attrs["pd_tp_multiple"] is True


def test_pp_plus_dp_for_cross_node_moe_fails_or_hangs_within_a_bound(shipped, cases):
    e = exp(cases, "deepseek-v4/text/tp4-pp2-dp2-2node-mp/auto/expert-parallel")
    # nothing refuses it: a known issue with a deadline, waiving only a failed startup (graph
    # capture runs the dispatch path too) or first request that names the dispatch path or a
    # hang's own line, bounded by the suite's request timeout
    assert (e.kind, e.waives) == ("known-issue", ["startup", "request"]) and e.until
    assert shipped.suites["nightly-ascend"].request_timeout_s <= 600
    assert re.search(e.error, "TimeoutError: RPC call to execute_model timed out.")
    assert re.search(e.error, "RuntimeError: aclnnMoeDistributeDispatch failed")
    moe = [c for c in cases.values() if c.topology == "tp4-pp2-dp2-2node-mp"]
    assert {c.expectation.kind for c in moe} == {"known-issue"}
    assert not any(c.family == "qwen3.6" and c.variant == "dense" for c in moe)


def test_the_roce_waiver_covers_a_startup_that_dies_in_the_dispatch_path_and_nothing_else(cases):
    from harness.check.verdict.judge import judge
    from harness.outcomes import Outcome
    from harness.results.result import LogLine, Observation

    e = exp(cases, "deepseek-v4/text/tp4-pp2-dp2-2node-mp/auto/expert-parallel")

    def died_at_startup(text):
        line = LogLine(log="node0-api", line=9, text=text)
        return Observation(failed_phase="startup", failed_after_s=420.0, engine_started=True, root_cause=line)

    capture = died_at_startup("RuntimeError: aclnnMoeDistributeDispatch failed (graph capture)")
    assert judge(e, capture).outcome is Outcome.KNOWN_ISSUE
    other = died_at_startup("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB")
    assert judge(e, other).outcome is Outcome.FAIL


# -- the exact flags of a plan ---------------------------------------------------------------


def test_plan_graph_mode_and_mtp_flags(shipped, cases):
    d = plan(shipped, cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode+mtp"], load_cluster("a3-2node"))
    assert [l.role for l in d.launches] == ["api", "headless"]
    for launch in d.launches:
        assert argv_json(launch, "--compilation-config") == {"cudagraph_mode": "FULL_DECODE_ONLY"}
        assert argv_json(launch, "--speculative-config") == {
            "method": "mtp",
            "num_speculative_tokens": 1,
            "model": "/models/DeepSeek-V4",
        }
        assert launch.env_dict()["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_plan_dcp_flags_over_mooncake_connector_v2(shipped, cases):
    d = plan(shipped, cases["glm-5.2/text/pd-p-tp8pp2-d-tp8-mcv2/auto/dcp"], load_cluster("a3-pd"))
    prefill, decode, proxy = d.launches
    for launch, role in ((prefill, "kv_producer"), (decode, "kv_consumer")):
        assert flag_value(launch, "--decode-context-parallel-size") == "2"
        assert flag_value(launch, "--cp-kv-cache-interleave-size") == "128"
        kv = argv_json(launch, "--kv-transfer-config")
        assert (kv["kv_connector"], kv["kv_role"]) == ("MooncakeConnectorV2", role)
        assert kv["kv_connector_extra_config"] == {
            "prefill": {"dp_size": 1, "tp_size": 8, "pp_size": 2},
            "decode": {"dp_size": 1, "tp_size": 8, "pp_size": 1},
        }
    assert flag_value(decode, "--pipeline-parallel-size") == "1"
    assert proxy.argv[1].endswith("examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py")


def test_kv_offload_on_a_pp_instance_is_rejected(cases):
    for cid in ("glm-5.2/text/tp8-pp2-2node-mp/auto/kv-offload", "glm-5.2/text/tp8-pp2-2node-mp/38,40/kv-offload+mtp"):
        e = exp(cases, cid)
        assert (e.kind, e.phase) == ("rejected", "startup"), cid
        assert re.search(e.error, "ValueError: Sparse KV offload don't support pipeline parallel now.")


def test_kv_offload_supported_on_pd_with_pp_on_the_prefill_node(cases):
    e = exp(cases, "glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload")
    assert e.kind == "supported" and "layerwise connector" in e.why
    assert exp(cases, "glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload+mtp").kind == "supported"


def test_plan_kv_offload_on_a_pp_instance(shipped, cases):
    d = plan(shipped, cases["glm-5.2/text/tp8-pp2-2node-mp/auto/kv-offload"], load_cluster("a3-2node"))
    for launch in d.launches:
        assert argv_json(launch, "--additional-config") == {
            "sparse_kv_offload_config": {"enabled": True, "topk_buffer_size": 4096, "dram_size_per_dp_GB": 128}
        }
        kv = argv_json(launch, "--kv-transfer-config")
        assert kv["kv_connector"] == "SfaRemoteD2HConnector" and kv["kv_role"] == "kv_consumer"
        assert kv["kv_connector_extra_config"] == {"transfer_backend": "memfabric", "use_layerwise": True}
        assert "--no-enable-prefix-caching" in launch.argv


def test_plan_kv_offload_sides_of_the_pd_pair(shipped, cases):
    """The offloading guide: the Prefill (PP2) runs the layerwise producer connector in eager mode
    with no sparse offload config; the Decode (PP1) runs the sparse offload as the consumer."""
    d = plan(shipped, cases["glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload"], load_cluster("a3-pd"))
    prefill, decode, _ = d.launches
    assert flag_value(prefill, "--pipeline-parallel-size") == "2" and "--enforce-eager" in prefill.argv
    assert "--additional-config" not in prefill.argv
    kv = argv_json(prefill, "--kv-transfer-config")
    assert (kv["kv_connector"], kv["kv_role"]) == ("MultiConnector", "kv_producer")
    inner = kv["kv_connector_extra_config"]["connectors"]
    assert [c["kv_connector"] for c in inner] == ["SfaRemoteD2HConnector", "AscendStoreConnector"]
    assert {c["kv_role"] for c in inner} == {"kv_producer"}
    assert inner[1]["kv_connector_extra_config"]["use_layerwise"] is True
    assert "prefill" not in kv["kv_connector_extra_config"]  # not the Mooncake topology description
    assert prefill.env_dict()["VLLM_PP_LAYER_PARTITION"] == "38,40"

    assert flag_value(decode, "--pipeline-parallel-size") == "1"
    assert flag_value(decode, "--data-parallel-size") == "2"
    assert "--enforce-eager" not in decode.argv and "--no-enable-prefix-caching" in decode.argv
    assert argv_json(decode, "--additional-config")["sparse_kv_offload_config"]["enabled"] is True
    kv = argv_json(decode, "--kv-transfer-config")
    assert (kv["kv_connector"], kv["kv_role"]) == ("SfaRemoteD2HConnector", "kv_consumer")
    assert kv["kv_connector_extra_config"] == {"transfer_backend": "memfabric", "use_layerwise": True}
    # the plan's port range for the decode side, not the doc's example: past AscendDirectTransport's
    # reserved [20000, 36000) on a3-pd's 16-NPU nodes (vllm-ascend's facts)
    assert kv["kv_port"] == "36100"
    assert "VLLM_PP_LAYER_PARTITION" not in decode.env_dict()


def test_dcp_interleave_only_where_kv_transfer_is_configured(shipped, cases):
    single = plan(shipped, cases["qwen3.6/dense/tp8-pp2-2node-mp/auto/dcp"], load_cluster("a3-2node"))
    for launch in single.launches:
        assert flag_value(launch, "--decode-context-parallel-size") == "2"
        assert "--cp-kv-cache-interleave-size" not in launch.argv
    pd = plan(shipped, cases["glm-5.2/text/pd-p-tp8pp2-d-tp8-mcv2/auto/dcp"], load_cluster("a3-pd"))
    for launch in pd.launches[:2]:
        assert flag_value(launch, "--cp-kv-cache-interleave-size") == "128"
        assert launch.argv.count("--decode-context-parallel-size") == 1


def test_plan_layersplit_flags(shipped, cases):
    d = plan(shipped, cases["glm-5.2/text/tp8-pp2-2node-mp/38,40/layersplit"], load_cluster("a3-2node"))
    for launch in d.launches:
        assert "--enforce-eager" in launch.argv
        assert argv_json(launch, "--additional-config") == {"enable_kvpp": True}
        assert launch.env_dict()["VLLM_PP_LAYER_PARTITION"] == "38,40"


def test_plan_speculative_and_parallel_flags(shipped, cases):
    cluster = load_cluster("a3-2node")
    eagle = plan(shipped, cases["minimax-m3/sparse-text/tp8-pp2-2node-mp/auto/eagle3"], cluster).launches[0]
    assert argv_json(eagle, "--speculative-config") == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": "/models/MiniMax-M3-EAGLE3",
    }
    dspark = plan(shipped, cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/dspark"], cluster).launches[0]
    assert argv_json(dspark, "--speculative-config") == {"method": "dspark", "model": "/models/DeepSeek-V4"}
    sp = plan(shipped, cases["qwen3.6/moe/tp8-pp2-2node-mp/auto/graph-mode+sequence-parallelism"], cluster).launches[0]
    assert argv_json(sp, "--compilation-config") == {
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "pass_config": {"enable_sp": True},
    }
    xlite = plan(shipped, cases["glm-5.2/text/tp8-pp2-2node-mp/auto/xlite-graph"], cluster).launches[0]
    assert argv_json(xlite, "--additional-config") == {"xlite_graph_config": {"enabled": True}}
    # vLLM's world is TP x PP x PCP: TP8 x PP2 x PCP2 needs 16 NPUs on each of the two nodes
    pcp_case = cases["glm-5.2/text/tp8-pp2-2node-mp/auto/pcp"]
    assert pcp_case.attrs["pcp"] == 2 and pcp_case.attrs["devices"] == 32
    with pytest.raises(PlanError, match="cannot hold 2 node.s. of 16 device"):
        plan(shipped, pcp_case, cluster)
    pcp = plan(shipped, pcp_case, load_cluster("a3-pd")).launches
    assert flag_value(pcp[0], "--prefill-context-parallel-size") == "2"
    assert [len(l.env_dict()["ASCEND_RT_VISIBLE_DEVICES"].split(",")) for l in pcp] == [16, 16]
    moe = plan(shipped, cases["deepseek-v4/text/tp4-pp2-dp2-2node-mp/auto/expert-parallel"], cluster).launches[0]
    assert flag_value(moe, "--data-parallel-size") == "2" and "--enable-expert-parallel" in moe.argv


# -- suites and clusters ---------------------------------------------------------------------


def test_suite_modes_and_sizes(shipped):
    nightly, release = (expand(shipped, s) for s in SUITES)
    assert shipped.suites["nightly-ascend"].mode == "pairwise"
    assert nightly.pairs_covered == nightly.pairs_possible
    assert shipped.suites["release-ascend"].mode == "full"
    assert len(release.cases) > len(nightly.cases)
    assert {c.expectation.kind for c in release.cases} >= {"supported", "rejected", "known-issue"}


def test_every_ascend_case_plans_on_the_a3_pd_cluster(shipped, cases):
    cluster = load_cluster("a3-pd")
    for c in cases.values():
        d = plan(shipped, c, cluster)
        assert all(l.set_env == "/usr/local/Ascend/ascend-toolkit/set_env.sh" for l in d.launches)


def test_cluster_inventories():
    two = load_cluster("a3-2node")
    assert [len(n.devices) for n in two.nodes] == [8, 8]
    assert len({n.address for n in two.nodes}) == 2
    for name, npus in (("a3-2node", 8), ("a3-16npu", 16), ("a3-pd", 16)):
        for n in load_cluster(name).nodes:
            assert n.reach == "ssh" and n.ssh and n.ssh.user and n.nic and len(n.devices) == npus
            assert n.set_env.endswith("/set_env.sh")


# -- the cluster's links (`network`) ----------------------------------------------------------


def test_pp_plus_dp_over_roce_is_claimed_only_where_the_links_may_be_roce(shipped):
    cid = "deepseek-v4/text/tp4-pp2-dp2-2node-mp/auto/expert-parallel"

    def claim(**kw):
        return {c.id: c for c in expand(shipped, "nightly-ascend", **kw).cases}[cid]

    roce = load_cluster("a3-2node")
    assert roce.network == "roce"
    assert claim(layers=layer_counts(roce)).expectation.kind == "known-issue"
    # expanded without a cluster the network is unknown: the guide's restriction is claimed
    unknown = claim()
    assert unknown.attrs["network"] == "unknown" and unknown.expectation.kind == "known-issue"
    # an HCCS-linked cluster: the restriction does not apply, the case is plain PP (no false
    # UNEXPECTED_ACCEPT when it works)
    hccs = claim(layers=layer_counts(roce.model_copy(update={"network": "hccs"})))
    assert hccs.attrs["network"] == "hccs" and hccs.expectation.kind == "supported"
    assert claim(network="hccs").expectation.kind == "supported"


# -- the claims table (`ppconf report --claims-only`) -----------------------------------------


def test_claims_table_renders_the_guides_rows_with_qualifiers(shipped, tmp_path):
    from reports.feature_table import feature_claims
    from reports.render import report_claims

    nightly = list(expand(shipped, "nightly-ascend").cases)
    rows = {r.name: (r.symbol, r.text) for r in feature_claims(shipped, nightly)}
    # the guide's feature table, no invented rows (no "Expert parallelism", no Xlite row)
    assert set(rows) == set(GUIDE_FEATURES)
    assert rows["EAGLE3"] == ("✅", "MiniMax-M3 only.")
    assert rows["DSpark"] == ("✅", "DeepSeek-V4 and GLM-5.2 only.")
    assert rows["DFlash"] == ("❌", "Not supported.")
    assert rows["MTP"][0] == "✅" and "the guide is silent about DeepSeek-V4.1" in rows["MTP"][1]
    assert "known-issue (waives accuracy)" in rows["LayerSplit (KVPP)"][1]
    assert rows["Prefix caching"] == ("✅", "Supported.")
    md = report_claims(nightly, tmp_path, {}, "", shipped) and (tmp_path / "support.md").read_text()
    assert "| EAGLE3 | ✅ MiniMax-M3 only. |" in md
    # the per-family table footnotes the exception the guide is silent about
    assert "the guide is silent about this exception" in md


def test_nightly_holds_the_guides_missing_claims(shipped):
    nightly = {c.id: c for c in expand(shipped, "nightly-ascend").cases}
    # DSpark taps relayed across stages with a custom partition of the target
    dspark = nightly["glm-5.2/text/tp8-pp2-2node-mp/38,40/dspark"]
    assert dspark.expectation.kind == "supported" and dspark.attrs["custom_partition"]
    # draft_tensor_parallel_size sets only the drafter's TP: the target's partition stays checked
    draft = nightly["glm-5.2/text/tp8-pp2-2node-mp/38,40/draft-tp1+mtp"]
    assert draft.expectation.kind == "supported" and "drafter's TP" in draft.expectation.why
    d = plan(shipped, draft, load_cluster("a3-2node"))
    assert argv_json(d.launches[0], "--speculative-config")["draft_tensor_parallel_size"] == 1
    # another upstream SupportsPP model behaves the same, and pooling runs nightly
    qwen3 = nightly["qwen3/tp8-pp2-2node-mp/auto/none"]
    assert qwen3.attrs["origin"] == "upstream" and qwen3.expectation.kind == "supported"
    assert nightly["qwen3/tp8-pp2-2node-mp/auto/pooling"].expectation.kind == "supported"
    assert not shipped.families["qwen3"].aliases  # not a row of the guide's model table

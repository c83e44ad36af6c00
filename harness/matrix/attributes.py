"""The attributes of a case that a rule's `when:` condition may name, with their types.

The matrix loader checks every condition against them; case expansion gives each case a value for
each of them."""

from __future__ import annotations

# The attributes a rule condition may use, with their types (checked when the matrix loads).
ATTRIBUTES: dict[str, type] = {
    "suite": str,
    "platform": str,
    "family": str,
    "variant": str,
    "arch": str,
    "origin": str,
    "supports_pp": bool,
    "mla": bool,  # the engine treats the model as MLA (vLLM's is_deepseek_mla)
    "layers": int,
    "topology": str,
    "tp": int,
    "pp": int,
    "dp": int,
    "pcp": int,  # prefill context parallel size the case's flags give (1 without PCP)
    "nnodes": int,
    "backend": str,  # "mp", "ray", or "default" when vLLM chooses
    "devices": int,  # every device the case's launches use: TP x PP x PCP x DP (+ the decode instance)
    "pd": bool,
    "decode_tp": int,  # 0 when the case is not P/D
    "decode_pp": int,
    "decode_dp": int,
    # "internal", "external" or "" (vLLM's own layout): the topology's DP layout, and the decode
    # instance's on a P/D pair ("" when not P/D)
    "dp_mode": str,
    "decode_dp_mode": str,
    "pd_tp_multiple": bool,  # prefill TP >= decode TP and a multiple of it (true when not P/D)
    "partition": str,  # "auto" or the VLLM_PP_LAYER_PARTITION string
    "custom_partition": bool,
    "partition_error": str,  # vLLM's rejection text for the partition, "" when accepted
    "partition_doc_error": str,  # the same under the Ascend guide's stricter rule
    "features": list,
    "feature": str,  # the whole stack, e.g. "mtp+graph-mode", or "none"
    # On a P/D pair, the features each instance runs (the stack without that side's
    # skip_features); [] when the case is not P/D
    "prefill_features": list,
    "decode_features": list,
    # How the cluster's nodes are linked ("roce", "hccs", ... from the inventory's `network`),
    # "unknown" when the suite is expanded without a cluster (lint, claims-only reports).
    "network": str,
}

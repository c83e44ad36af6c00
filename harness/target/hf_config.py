"""Reading a Hugging Face config.json the way vLLM does where ppconf needs it: the layer count."""

from __future__ import annotations

from typing import Any

# Sub-configs vLLM takes the text model's settings from (its hf_text_config), in that order.
TEXT_CONFIGS = ("text_config", "llm_config", "language_config", "thinker_config")


def layers_in(config: dict[str, Any]) -> int | None:
    for key in TEXT_CONFIGS:
        sub = config.get(key)
        if isinstance(sub, dict):
            found = layers_in(sub)
            if found:
                return found
    n = config.get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The text model's settings (vLLM's hf_text_config): the first sub-config that has layers."""
    for key in TEXT_CONFIGS:
        sub = config.get(key)
        if isinstance(sub, dict) and layers_in(sub):
            return text_config(sub)
    return config


def _int(config: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def params_in(config: dict[str, Any]) -> int | None:
    """The parameter count a decoder or encoder config describes, from its sizes: embeddings (and
    an untied LM head), per layer the attention projections, the MLP (gated, or a BERT-style
    pair), the routed and shared experts with their router. An estimate for sizing a checkpoint
    (norms and biases left out); None when the config lacks the sizes."""
    c = text_config(config)
    hidden, layers, vocab = _int(c, "hidden_size", "d_model"), layers_in(c) or 0, _int(c, "vocab_size")
    if not (hidden and layers and vocab):
        return None
    heads = _int(c, "num_attention_heads") or 1
    kv_heads = _int(c, "num_key_value_heads") or heads
    head_dim = _int(c, "head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    gated = 3 if c.get("hidden_act", "silu") not in ("gelu", "gelu_new", "relu") else 2
    dense = gated * hidden * _int(c, "intermediate_size")
    experts = _int(c, "num_experts", "n_routed_experts", "num_local_experts")
    moe = 0
    if experts:
        expert = _int(c, "moe_intermediate_size", "intermediate_size")
        shared = _int(c, "shared_expert_intermediate_size") or _int(c, "n_shared_experts") * expert
        moe = gated * hidden * (experts * expert + shared) + hidden * experts
    mlp = moe or dense
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * (attention + mlp)

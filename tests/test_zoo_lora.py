"""The zoo's LoRA adapters: seeded, the same bytes on every build, in PEFT's format with the
architecture's target modules sized by the model's config, two distinct adapters per model, and
named in a launch through the `lora` feature (`NAME=adapter:KEY`)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.launch import PlanError
from harness.matrix.schema import Variant
from harness.plan import adapters
from harness.plan.cluster import local_cluster
from harness.plan.deployment import plan
from harness.target import zoo, zoo_lora

REPO = Path(__file__).resolve().parents[1]


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("zoo-lora")
    return {name: zoo_lora.ensure_adapter("qwen3-tiny", name, root) for name in zoo_lora.ADAPTERS}


@pytest.mark.needs_torch
def test_an_adapter_is_peft_s_format_with_the_architecture_s_modules(built):
    from safetensors.torch import load_file

    folder = built["a"]
    files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert files == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == zoo_lora.RANK and config["lora_alpha"] == zoo_lora.ALPHA
    assert config["target_modules"] == sorted(zoo_lora.TARGETS["Qwen3ForCausalLM"])
    tensors = load_file(folder / "adapter_model.safetensors")
    spec = zoo.ZOO["qwen3-tiny"]
    assert len(tensors) == 2 * len(config["target_modules"]) * spec.num_hidden_layers
    # (out, in) of the model's own linear layers: q_proj 2 heads x 64, k_proj 1 KV head x 64
    q_a = tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    q_b = tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    k_b = tensors["base_model.model.model.layers.4.self_attn.k_proj.lora_B.weight"]
    down_a = tensors["base_model.model.model.layers.2.mlp.down_proj.lora_A.weight"]
    assert tuple(q_a.shape) == (8, 128) and tuple(q_b.shape) == (128, 8) and tuple(k_b.shape) == (64, 8)
    assert tuple(down_a.shape) == (8, 256)
    # B is drawn too (PEFT's own init leaves it 0: an adapter that changes nothing)
    assert float(q_b.abs().sum()) > 0
    assert all(str(t.dtype) == "torch.float32" for t in tensors.values())


@pytest.mark.needs_torch
def test_two_adapters_of_a_model_differ(built):
    assert built["a"] != built["b"]
    a, b = _hashes(built["a"]), _hashes(built["b"])
    assert a["adapter_model.safetensors"] != b["adapter_model.safetensors"]
    assert a["adapter_config.json"] == b["adapter_config.json"]


@pytest.mark.needs_torch
def test_a_build_gives_the_same_bytes_in_another_process(built, tmp_path):
    code = (
        "import sys; from pathlib import Path; from harness.target import zoo_lora\n"
        "for n in zoo_lora.ADAPTERS: zoo_lora.ensure_adapter('qwen3-tiny', n, Path(sys.argv[1]))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, check=True)
    for name, folder in built.items():
        assert _hashes(tmp_path / folder.name) == _hashes(folder), name


def test_adapter_dir_is_pure_stable_and_changes_with_the_seed(tmp_path, monkeypatch):
    first = zoo_lora.adapter_dir("qwen3-tiny", "a", tmp_path)
    assert first == zoo_lora.adapter_dir("qwen3-tiny", "a", tmp_path) and list(tmp_path.iterdir()) == []
    assert first.name.startswith("qwen3-tiny-lora-a-")
    monkeypatch.setitem(zoo_lora.ADAPTERS, "a", 7)
    assert zoo_lora.adapter_dir("qwen3-tiny", "a", tmp_path) != first


def test_unknown_adapters_and_models_without_targets_are_named():
    with pytest.raises(zoo.ZooError, match="unknown LoRA adapter 'c' of zoo model qwen3-tiny; built in: a, b"):
        zoo_lora.adapter_spec("qwen3-tiny", "c")
    with pytest.raises(zoo.ZooError, match=r"bert-tiny \(BertModel\) has no LoRA adapters"):
        zoo_lora.adapter_spec("bert-tiny", "a")


def test_the_lora_feature_names_the_zoo_s_adapters_in_the_launch(shipped):
    case = next(c for c in expand(shipped, "lora-cpu").cases if c.topology == "pp1-tp1")
    argv = plan(shipped, case, local_cluster()).launches[0].argv
    i = argv.index("--lora-modules")
    assert argv[i + 1] == f"lora-a={zoo_lora.adapter_dir('qwen3-tiny', 'a')}"
    assert argv[i + 2] == f"lora-b={zoo_lora.adapter_dir('qwen3-tiny', 'b')}"


def test_an_adapter_a_variant_does_not_give_is_a_plan_error():
    held = Variant(architecture="X", supports_pp=True, model="/models/X", adapters={"a": "/models/X-lora-a"})
    assert adapters.adapter_ref(held, "a", "case c") == "/models/X-lora-a"
    with pytest.raises(
        PlanError, match=r"case c: --lora-modules names adapter:b, not among the variant's adapters \(a\)"
    ):
        adapters.adapter_ref(held, "b", "case c")
    zoo_variant = Variant(architecture="Qwen3ForCausalLM", supports_pp=True, model="zoo:qwen3-tiny")
    assert adapters.split_zoo_ref(adapters.adapter_ref(zoo_variant, "b", "c")) == ("qwen3-tiny", "b")

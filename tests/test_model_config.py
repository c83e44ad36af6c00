"""Hidden-layer counts the matrix leaves out come from the model's config.json."""

import json

import pytest

from harness.cases.expand import expand
from harness.matrix.load import load_matrix
from harness.matrix.schema import Variant
from harness.matrix.source import MatrixError
from harness.target.hf_config import layers_in
from harness.target.model_config import LayerCounts


def variant(model: str, hidden_layers=None) -> Variant:
    return Variant(architecture="DeepseekV4ForCausalLM", supports_pp=True, model=model, hidden_layers=hidden_layers)


def test_the_text_models_count_is_the_one_partitioned():
    assert layers_in({"num_hidden_layers": 61}) == 61
    # multimodal: vLLM partitions the language model, not the vision tower
    assert layers_in({"num_hidden_layers": 27, "text_config": {"num_hidden_layers": 61}}) == 61
    assert layers_in({"vision_config": {"num_hidden_layers": 27}, "llm_config": {"num_hidden_layers": 48}}) == 48
    assert layers_in({"num_hidden_layers": 0}) is None
    assert layers_in({"num_hidden_layers": True}) is None
    assert layers_in({}) is None


@pytest.mark.needs_torch
def test_counts_come_from_the_matrix_then_a_local_checkpoint_then_the_hf_cache(tmp_path, monkeypatch):
    ckpt = tmp_path / "DeepSeek-V4"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 61}}))
    # a repo id in the local Hugging Face cache (the layout huggingface_hub reads)
    hub = tmp_path / "hub"
    snap = hub / "models--org--Kimi-K3" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"num_hidden_layers": 64}))
    (hub / "models--org--Kimi-K3" / "refs").mkdir()
    (hub / "models--org--Kimi-K3" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(hub))
    counts = LayerCounts()
    assert counts(variant(str(ckpt), hidden_layers=78)) == 78  # the matrix wins
    assert counts(variant(str(ckpt))) == 61
    assert counts(variant("org/Kimi-K3")) == 64
    assert counts(variant("zoo:qwen3-moe-tiny")) == 5
    assert counts(variant(str(tmp_path / "missing"))) is None
    assert "not found here" in counts.where[str(tmp_path / "missing")]


def test_expansion_uses_read_counts_for_the_partition_oracle(matrix_dir):
    write, root = matrix_dir, matrix_dir.root
    write(
        "zz-extra.yaml",
        """\
        families:
          unknown-depth:
            title: A family whose depth the matrix does not state
            variants:
              text:
                architecture: DeepseekV4ForCausalLM
                supports_pp: true
                origin: ascend
                model: /models/unknown-depth
                platforms: [ascend]
        suites:
          depth-read:
            title: custom partitions on a read count
            platform: ascend
            groups:
              - families: [unknown-depth]
                topologies: [tp8-pp2-2node-mp]
                partitions: [auto, "32,29", "31,31"]
        """,
    )
    m = load_matrix(root)
    cases = {
        c.partition: c
        for c in expand(m, "depth-read", lambda v: 61 if v.model == "/models/unknown-depth" else None).cases
    }
    assert cases["32,29"].expectation.kind == "supported"
    assert cases["31,31"].expectation.kind == "rejected"
    assert cases["31,31"].attrs["partition_error"] == "sum(partitions)=62 does not match num_hidden_layers=61."
    assert cases["auto"].attrs["layers"] == 61
    # nobody can say how deep it is: a custom partition cannot be claimed, and the error says why
    with pytest.raises(MatrixError) as err:
        expand(m, "depth-read")
    text = str(err.value)
    assert "unknown-depth/text with the custom partition '32,29'" in text
    assert "/models/unknown-depth/config.json" in text and "zz-extra.yaml" in text


def test_a_node_that_does_not_answer_is_asked_once(monkeypatch):
    import harness.check.serving.stack
    from harness.plan.cluster import Cluster, Node
    from runners.output import NodeOutput

    calls = []

    def fake_run_on_nodes(cluster, batch, timeout_s=60.0, set_env=False):  # the node's answer, not vLLM
        calls.append(batch)
        return [NodeOutput(node.name, None, error="no answer within 10 s") for node, _ in batch]

    monkeypatch.setattr(harness.check.serving.stack, "run_on_nodes", fake_run_on_nodes)
    far = Node(name="far", host="192.0.2.1", address="192.0.2.1", devices=[0], reach="ssh")
    counts = harness.check.serving.stack.layer_counts(Cluster(name="c", platform="ascend", nodes=[far]))
    assert counts(variant("/models/A")) is None
    assert counts(variant("/models/B")) is None
    assert len(calls) == 1
    assert counts.where["/models/B"] == "/models/B/config.json on node far (could not ask it: no answer within 10 s)"

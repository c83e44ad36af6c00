"""The cost model: a deployment's estimate from the checkpoint's size, the nodes' read bandwidth,
graph capture and the traffic; a claimed rejection stops at its phase; earlier runs still win."""

import json

import pytest
from pydantic import ValidationError

from harness.cases.expand import expand, select
from harness.matrix.schema import Checkpoint
from harness.plan import cost
from harness.plan.cluster import load_cluster
from harness.plan.schedule import duration_of, hms, parse_span, schedule_suite
from harness.target.hf_config import params_in

# Qwen3-8B's config.json (the sizes that count): its model card says 8.2B parameters
QWEN3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def test_params_from_a_config_match_the_model_card():
    assert params_in(QWEN3_8B) == pytest.approx(8.19e9, rel=0.01)
    # the text model's settings inside a multimodal config count the same
    assert params_in({"text_config": QWEN3_8B, "vision_config": {"hidden_size": 1}}) == params_in(QWEN3_8B)
    # a MoE config counts its experts, shared experts and router instead of the dense MLP
    moe = QWEN3_8B | {"num_experts": 8, "moe_intermediate_size": 1024}
    assert params_in(moe) - params_in(QWEN3_8B) == 36 * (3 * 4096 * (8 * 1024) + 4096 * 8 - 3 * 4096 * 12288)
    assert params_in({"hidden_size": 8}) is None  # no layers, no vocabulary: nothing to say


@pytest.mark.needs_torch
def test_params_from_the_tiny_models_spec_match_its_weights():
    """The zoo's qwen3-tiny, float32: its config's count times 4 bytes is what its safetensors
    hold (within the norms the count leaves out)."""
    from harness.target.zoo import ensure_model, spec_of

    spec = spec_of("qwen3-tiny")
    built = ensure_model("qwen3-tiny") / "model.safetensors"
    header = int.from_bytes(built.read_bytes()[:8], "little")
    tensors = json.loads(built.read_bytes()[8 : 8 + header])
    stored = sum(end - start for k, v in tensors.items() if k != "__metadata__" for start, end in [v["data_offsets"]])
    estimated = params_in(spec.config_json()) * 4
    assert stored == pytest.approx(estimated, rel=0.02)


def test_a_checkpoint_gives_bytes_or_params_with_a_dtype():
    assert Checkpoint(bytes=7e11, why="du -sb").size == 7e11
    assert Checkpoint(params=671e9, dtype="w8a8", why="card").size == 671e9
    assert Checkpoint(params=8e9, dtype="bfloat16", why="card").size == 16e9
    for bad in ({"why": "x"}, {"bytes": 1, "params": 1, "dtype": "int8", "why": "x"}, {"params": 1, "why": "x"}):
        with pytest.raises(ValidationError):
            Checkpoint(**bad)


def case_of(m, suite, cid):
    return select(expand(m, suite).cases, ids=[cid])[0]


def test_a_served_case_reads_its_checkpoint_over_its_nodes(shipped):
    c = load_cluster("a3-pd")
    gb_s, declared = cost.read_gb_s(c)
    assert declared and gb_s == 2.0
    case = case_of(shipped, "nightly-ascend", "guide-61-layer/tp8-pp2-2node-mp/32,29/none")
    two_nodes = cost.cost_of(shipped, case, c)
    # 671B parameters stored w8a8, each node reading its own stage's half, at 2 GB/s
    assert two_nodes.weights_s == pytest.approx(671e9 / 2 / 2e9)
    assert two_nodes.init_s == cost.INIT_S + cost.INIT_PER_EXTRA_NODE_S
    assert two_nodes.graph_s == cost.GRAPH_CAPTURE_S  # graph mode is vLLM's default on Ascend
    assert two_nodes.traffic_s > cost.PHASE_S and not two_nodes.stops
    assert two_nodes.total == pytest.approx(
        two_nodes.weights_s + two_nodes.init_s + two_nodes.graph_s + two_nodes.traffic_s + cost.TEARDOWN_S
    )


def test_eager_mode_captures_no_graph(shipped):
    ascend = case_of(shipped, "nightly-ascend", "guide-61-layer/tp8-pp2-2node-mp/32,29/none")
    assert cost.graph_mode(ascend)
    assert not cost.graph_mode(ascend.model_copy(update={"features": ("enforce-eager",)}))
    tiny = case_of(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    assert not cost.graph_mode(tiny)  # the CPU captures none


def test_a_claimed_rejection_stops_at_its_phase(shipped):
    local = load_cluster(None)
    config = cost.cost_of(shipped, case_of(shipped, "smoke-cpu", "bert-tiny/pp2-tp1-mp/auto/none"), local)
    assert (config.stops, config.weights_s, config.traffic_s, config.init_s) == ("config", 0.0, 0.0, cost.CONFIG_S)
    startup = cost.cost_of(shipped, case_of(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-ray/auto/none"), local)
    served = cost.cost_of(shipped, case_of(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none"), local)
    assert startup.stops == "startup" and startup.traffic_s == 0.0 and startup.init_s == served.init_s
    assert startup.total < served.total
    # one launch serving a rejected and a served case goes all the way
    both = cost.shared([startup, served])
    assert not both.stops and both.total == pytest.approx(served.total)


def test_durations_of_earlier_runs_still_win(shipped):
    s = schedule_suite(shipped, "smoke-cpu", load_cluster(None), None)
    e = s.entries[0]
    assert e.need.cost is not None and duration_of(e.need, None) == (e.need.cost.total, False)
    assert duration_of(e.need, {e.need.key: 7.0}) == (7.0, True)
    timed = schedule_suite(shipped, "smoke-cpu", load_cluster(None), {e.need.key: 7.0})
    (again,) = [x for x in timed.entries if x.need.key == e.need.key]
    assert again.known and again.duration == 7.0
    assert e.need.cost.parts() not in timed.render()  # a timed deployment shows no estimate


def test_the_nightly_on_a3_pd_prints_parts_total_and_the_window(shipped, capsys):
    from harness.cli import main

    assert main(["schedule", "--suite", "nightly-ascend", "--cluster", "a3-pd", "--window", "8h"]) == 0
    out = capsys.readouterr()
    s = schedule_suite(shipped, "nightly-ascend", load_cluster("a3-pd"), None)
    assert s.makespan > 8 * 3600  # the weights make the night longer than the window
    assert "w336+i90+g120+t" in out.out  # a 671 GB checkpoint read on one node at 2 GB/s
    assert "(stops at config)" in out.out and "(stops at startup)" in out.out
    assert f"night's total {hms(s.makespan)}, {s.device_hours:.1f} device-hours" in out.out
    assert "does not fit the 8:00:00 window on a3-pd" in out.err
    args = ["schedule", "--suite", "nightly-ascend", "--cluster", "a3-pd", "--window", "24h", "--format", "json"]
    assert main(args) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["fits"] is True and data["window_s"] == 86400 and out.err == ""
    assert data["entries"][0]["estimate"]["weights_s"] > 0 and data["device_hours"] > 0


@pytest.mark.parametrize(
    ("text", "seconds"), [("8h", 28800), ("7h30m", 27000), ("90m", 5400), ("45s", 45), ("3600", 3600)]
)
def test_a_window_reads_as_people_write_it(text, seconds):
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "8x", "h", "-1", "nan"])
def test_a_window_that_is_no_length_of_time_is_refused(text):
    with pytest.raises(ValueError, match="not a length of time"):
        parse_span(text)


def test_a_refusal_after_the_weights_reads_none_and_one_before_them_stops_there(shipped):
    c = load_cluster("a3-pd")
    pcp = case_of(shipped, "nightly-ascend", "deepseek-v4/text/tp8-pp2-2node-mp/auto/pcp")
    assert pcp.expectation.phase == "startup" and not pcp.expectation.before_weights
    dummy = cost.cost_of(shipped, pcp, c)
    real = cost.cost_of(shipped, pcp, c, dummy_weights=False)
    assert dummy.weights_s == 0.0 and real.weights_s == pytest.approx(671e9 / 2 / 2e9)
    assert dummy.init_s == real.init_s and dummy.graph_s == real.graph_s  # the engine still starts
    partition = case_of(shipped, "nightly-ascend", "guide-61-layer/tp8-pp2-2node-mp/31,31/none")
    assert partition.expectation.before_weights  # get_pp_indices refuses it while the model is built
    early = cost.cost_of(shipped, partition, c, dummy_weights=False)
    assert early.stops == "startup, before the weights" and early.weights_s == early.graph_s == 0.0
    assert early.init_s == cost.CONFIG_S + cost.BUILD_S + cost.INIT_PER_EXTRA_NODE_S


def test_dummy_weights_save_device_hours_on_the_nightly(shipped):
    c = load_cluster("a3-pd")
    before = schedule_suite(shipped, "nightly-ascend", c, dummy_weights=False)
    after = schedule_suite(shipped, "nightly-ascend", c)
    assert after.device_hours < before.device_hours

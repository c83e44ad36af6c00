"""A shrink candidate written as a matrix layer: the layered matrix expands to exactly the
smaller case, under the same suite and claim, with the candidate's phases and layers."""

import json

from harness.cases.expand import expand
from harness.cases.workload import plan_workload
from harness.matrix.load import load_matrix
from harness.shrink import overlay
from harness.shrink.search import candidates
from tests import shrink_planted


def planted(tmp_path):
    m = load_matrix(shrink_planted.write(tmp_path / "matrices"))
    (case,) = expand(m, shrink_planted.SUITE).cases
    return m, case


def test_the_planted_case_shape_has_every_size_written_out(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    assert shape["phases"][0] == {"kind": "sequential", "requests": 3, "max_tokens": 12}  # the suite's prompts
    assert shape["phases"][1] == {
        "kind": "concurrent",
        "requests": 4,
        "prompt_tokens": 192,
        "max_tokens": 16,
        "deadline_s": 180.0,
    }
    assert shape["features"] == ["long-batched-fault"] and shape["topology"] == "pp2-tp1-mp"
    assert shape["layers"] == 5
    assert overlay.smaller_topologies(m, shape) == []  # no PP=1 topology runs the mp executor


def test_a_candidate_layer_expands_to_the_smaller_case_with_the_same_claim(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    sequential = {"kind": "sequential", "requests": 1, "max_tokens": 4}
    smaller = {**shape, "phases": [sequential, {**shape["phases"][1], "requests": 2, "prompt_tokens": 96}], "layers": 3}
    layer = overlay.write_layer(m, case, smaller, tmp_path / "try-1")
    layered = load_matrix([*m.roots, layer.parent])
    (got,) = expand(layered, case.suite).cases
    assert got.id == overlay.case_of(case, smaller) == case.id
    assert got.expectation.claim() == case.expectation.claim()
    (plan,) = plan_workload(layered, got)
    accuracy = layered.suite(case.suite).accuracy
    assert (accuracy.prompts, accuracy.max_tokens, accuracy.streamed) == (["Hello, my name is"], 4, 1)
    assert [len(r.prompt) for r in plan.requests] == [24, 48] and plan.in_flight == 2
    variant = layered.variant(case.family, case.variant)
    assert variant.hidden_layers == 3
    spec = json.loads(open(variant.model[4:]).read())
    assert spec["num_hidden_layers"] == 3 and len(spec["layer_types"]) == 3


def test_a_dropped_feature_is_a_case_of_its_own(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    (drop,) = [c for c in candidates(shape, {}, []) if c.change.startswith("feature")]
    layer = overlay.write_layer(m, case, drop.shape, tmp_path / "try-2")
    (got,) = expand(load_matrix([*m.roots, layer.parent]), case.suite).cases
    assert got.id == "qwen3-tiny/pp2-tp1-mp/auto/none" == overlay.case_of(case, drop.shape)

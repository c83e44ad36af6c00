"""Comparison modes: each decides on the numbers it names, and each can fail."""

import pytest

from harness.check.serving.client import Completion
from harness.check.traffic.compare import Outputs, compare_outputs, mode_name
from harness.matrix.schema import Compare


def c(ids, lps=None, text=None, top=(), label="text:0"):
    lps = lps or tuple(-0.1 * (i + 1) for i in range(len(ids)))
    return Completion("p", tuple(ids), tuple(lps), text if text is not None else "".join(map(str, ids)), top, label)


def outs(*completions):
    return Outputs(list(completions))


def test_exact_mode_needs_equal_ids_text_and_logprobs():
    ref = outs(c((1, 2, 3)))
    assert compare_outputs(Compare(), ref, outs(c((1, 2, 3))), False)["equal"]
    diff = compare_outputs(Compare(), ref, outs(c((1, 2, 4))), False)
    assert not diff["equal"] and diff["first_divergence"] == 2 and diff["diffs"][0]["first_token_mismatch"] == 2
    assert not compare_outputs(Compare(), ref, outs(c((1, 2))), False)["equal"]  # shorter
    moved = outs(c((1, 2, 3), (-0.1, -0.2, -0.31)))
    assert not compare_outputs(Compare(), ref, moved, False)["equal"]
    assert compare_outputs(Compare(logprob_tolerance=0.02), ref, moved, False)["equal"]
    assert not compare_outputs(Compare(), ref, outs(c((1, 2, 3), text="x")), False)["equal"]


def test_logprob_mode_allows_only_a_near_tie_divergence():
    top_ref = ({1: -0.1}, {2: -0.5, 7: -0.6}, {3: -0.1})
    top_got = ({1: -0.1}, {7: -0.55, 2: -0.58}, {9: -0.1})
    ref = outs(c((1, 2, 3), top=top_ref))
    near = outs(c((1, 7, 9), (-0.1, -0.55, -0.1), top=top_got))
    mode = Compare(mode="logprob", logprob_tolerance=0.05)
    assert compare_outputs(mode, ref, near, False)["equal"]
    far = outs(c((1, 8, 9), (-0.1, -0.55, -0.1), top=({1: -0.1}, {8: -0.2}, {9: -0.1})))
    assert not compare_outputs(mode, ref, far, False)["equal"]
    drift = outs(c((1, 2, 3), (-0.1, -0.4, -0.3), top=top_ref))
    assert not compare_outputs(mode, ref, drift, False)["equal"]


def test_first_divergence_mode_counts_tokens():
    ref = outs(c((1, 2, 3, 4)))
    late = outs(c((1, 2, 3, 9)))
    assert compare_outputs(Compare(mode="first-divergence", diverge_after=3), ref, late, False)["equal"]
    assert not compare_outputs(Compare(mode="first-divergence", diverge_after=4), ref, late, False)["equal"]


def test_seeded_and_non_empty_modes():
    ref = outs(c((5, 6)))
    assert compare_outputs(Compare(mode="seeded"), ref, outs(c((5, 6), (-1.0, -2.0))), False)["equal"]
    assert not compare_outputs(Compare(mode="seeded"), ref, outs(c((5, 7))), False)["equal"]
    assert compare_outputs(Compare(mode="non-empty"), ref, outs(c((9,))), False)["equal"]
    assert not compare_outputs(Compare(mode="non-empty"), ref, outs(c((), text="")), False)["equal"]


def test_every_request_must_be_answered_on_both_sides():
    ref = Outputs([c((1,), label="text:0"), c((1,), label="ids:0")], id_prompts=[[7]])
    got = Outputs([c((1,), label="text:0"), c((1,), label="stream:0")], id_prompts=[[7]])
    verdict = compare_outputs(Compare(), ref, got, False)
    assert not verdict["equal"] and {d["request"] for d in verdict["diffs"]} == {"ids:0", "stream:0"}
    # a side that could not tokenise (a P/D proxy) leaves the token-id requests out, and says so
    proxy = Outputs([c((1,), label="text:0")], notes=["prompts not sent as token ids"])
    partial = compare_outputs(Compare(), ref, proxy, False)
    assert partial["equal"] and "1 token-id requests not compared" in partial["summary"]
    empty = compare_outputs(Compare(), Outputs(), outs(c((1,))), False)
    assert not empty["equal"] and "no outputs" in empty["summary"]


def test_embeddings_by_cosine():
    ref = Outputs(embeddings=[[0.5, -0.25, 1.0], [0.0, 0.1, 0.2]])
    scaled = Outputs(embeddings=[[1.0, -0.5, 2.0], [0.0, 0.2, 0.4]])
    same = compare_outputs(Compare(), ref, scaled, True)
    assert same["equal"] and same["mode"] == "cosine" and same["min_cosine"] == pytest.approx(1.0)
    turned = Outputs(embeddings=[[0.5, -0.25, 1.0], [0.2, 0.1, 0.0]])
    assert not compare_outputs(Compare(), ref, turned, True)["equal"]
    assert not compare_outputs(Compare(), ref, Outputs(embeddings=[[0.5, -0.25]] * 2), True)["equal"]
    assert not compare_outputs(Compare(), Outputs(), scaled, True)["equal"]


def test_a_classifiers_answers_by_label_and_class_probabilities():
    ref = Outputs(classes=[{"label": "negative", "probs": [0.9, 0.1]}, {"label": "positive", "probs": [0.3, 0.7]}])
    near = Outputs(classes=[{"label": "negative", "probs": [0.90005, 0.09995]}, ref.classes[1]])
    same = compare_outputs(Compare(), ref, near, "classify")
    assert same["equal"] and same["mode"] == "classes" and same["max_prob_diff"] == pytest.approx(5e-5)
    flipped = Outputs(classes=[ref.classes[0], {"label": "negative", "probs": [0.6, 0.4]}])
    diff = compare_outputs(Compare(), ref, flipped, "classify")
    assert not diff["equal"] and [d["why"] for d in diff["diffs"]] == [
        "label 'negative', the reference 'positive'",
        "|Δprob| 0.3 > 0.0001",
    ]
    assert not compare_outputs(Compare(), ref, Outputs(classes=ref.classes[:1]), "classify")["equal"]
    assert not compare_outputs(Compare(), Outputs(), ref, "classify")["equal"]
    assert Outputs.from_json(ref.to_json()) == ref and "classes" not in Outputs().to_json()


def test_outputs_round_trip_and_mode_names():
    o = Outputs([c((1, 2), top=({1: -0.1}, {2: -0.2}))], [[0.1]], [[4, 5]], ["n"], {"value": 0.5})
    assert Outputs.from_json(o.to_json()) == o
    for mode in ("exact", "logprob", "first-divergence", "seeded", "non-empty"):
        assert mode_name(Compare(mode=mode))

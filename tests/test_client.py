"""Comparing a PP deployment's outputs with its PP=1 baseline."""

from harness.check.client import Completion, compare, compare_embeddings


def test_completions_must_match_token_for_token():
    base = [Completion("p", (1, 2, 3), (-0.1, -0.2, -0.3), "abc")]
    assert compare(base, [Completion("p", (1, 2, 3), (-0.1, -0.2, -0.3), "abc")], 0.0)["equal"]
    diff = compare(base, [Completion("p", (1, 2, 4), (-0.1, -0.2, -0.3), "abd")], 0.0)
    assert not diff["equal"] and diff["diffs"][0]["first_token_mismatch"] == 2
    assert not compare(base, [Completion("p", (1, 2), (-0.1, -0.2), "ab")], 0.0)["equal"]  # shorter


def test_embeddings_must_match_the_baseline_within_tolerance():
    base = [[0.5, -0.25, 1.0], [0.0, 0.1, 0.2]]
    same = compare_embeddings(base, [list(v) for v in base], 1e-4)
    assert same["ok"] and same["detail"] == "2 embeddings of dimension 3 equal PP=1 (max |Δ| 0, tolerance 0.0001)"
    near = compare_embeddings(base, [[0.50005, -0.25, 1.0], [0.0, 0.1, 0.2]], 1e-4)
    assert near["ok"] and 4e-5 < near["max_abs_diff"] < 6e-5
    far = compare_embeddings(base, [[0.5, -0.25, 1.0], [0.0, 0.1, 0.3]], 1e-4)
    assert not far["ok"] and "differ from PP=1" in far["detail"]
    assert not compare_embeddings(base, [[0.5, -0.25], [0.0, 0.1]], 1e-4)["ok"]  # another dimension
    assert not compare_embeddings(None, base, 1e-4)["ok"]  # nothing to compare with is not a pass
    assert not compare_embeddings([], [], 1e-4)["ok"]

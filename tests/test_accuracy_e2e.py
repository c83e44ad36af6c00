"""The accuracy check can fail, for real, on vLLM-CPU against real PP=1 counterparts:

- a PP case whose last stage is perturbed (a worker extension used only here) ends FAIL with the
  differing tokens in its evidence;
- traffic that fills the pipeline catches what one request at a time cannot: a fault planted so
  that it appears only when the last PP stage samples several sequences in one step
  (tests/perturb_batched.py) passes the sequential requests and fails the concurrent phase, with
  the mismatching requests and the requests running at once in its evidence.

Both faults come as features that claim to leave outputs unchanged (`preserves_output`), as a
worker extension that only reads the stages would: the counterpart runs without them, so the
comparison is also the check of that claim. The suite asks what smoke-cpu asks (its flags and
workload, copied from the shipped matrix), so both cases share one counterpart, the smoke case's:
two PP launches and, with the smoke run's reference cache (``PPCONF_REFERENCE_CACHE``, as in CI),
no reference launch, else one."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from harness.check.serving import modelinfo
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun

# launches vLLM-CPU servers; needs_vllm skips (or, in CI, fails) where vLLM is missing, without
# importing it here: that alone costs every `pytest -m "not slow"` seconds at collection
pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

SECRET = "ppconf-planted-secret-0123456789"
WHY = "a worker extension that only reads what each stage built (so it says)"
FEATURES = {
    "perturb-last-stage": {
        "title": "the last decoder layer perturbed when PP > 1 (a test's worker extension)",
        "args": ["--worker-extension-cls", "tests.perturb.PerturbedStageProbe", "--hf-token", SECRET],
        # vLLM's compile cache is keyed without the worker extension: a graph compiled with another
        # extension's patched layers would be reused. Neither patched launch reads or writes it.
        "env": {"MY_SERVICE_TOKEN": SECRET, "VLLM_DISABLE_COMPILE_CACHE": "1"},
        "preserves_output": True,
        "why": WHY,
    },
    "batched-fault": {
        "title": "the last stage's logits skewed when it samples several sequences at once (a test's worker extension)",
        "args": ["--worker-extension-cls", "tests.perturb_batched.BatchedFaultProbe"],
        "env": {"VLLM_DISABLE_COMPILE_CACHE": "1"},
        "preserves_output": True,
        "why": WHY,
    },
}


def perturb_matrix() -> str:
    """perturb-cpu: smoke-cpu's settings, with the two faulty features on its dense PP2 case."""
    smoke = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "suites.yaml").read_text())["suites"]["smoke-cpu"]
    suite = {k: v for k, v in smoke.items() if k not in ("title", "groups")}
    suite["title"] = "the accuracy check shown able to fail"
    suite["groups"] = [{"families": ["qwen3-tiny"], "topologies": ["pp2-tp1-mp"], "features": list(FEATURES)}]
    return yaml.safe_dump({"features": FEATURES, "suites": {"perturb-cpu": suite}}, sort_keys=False)


def test_a_perturbed_last_stage_fails_and_a_concurrency_only_fault_fails_only_under_load(tmp_path):
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "perturb.yaml").write_text(perturb_matrix())
    m = load_matrix(root)
    run_dir = tmp_path / "run"
    cache = os.environ.get("PPCONF_REFERENCE_CACHE")
    cfg = RunConfig(m, "perturb-cpu", load_cluster(None), run_dir, reference_cache=Path(cache) if cache else None)
    run = SuiteRun(cfg)
    summary = run.run()
    records = {
        json.loads(line)["case"]: json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
    }
    perturbed = records["qwen3-tiny/pp2-tp1-mp/auto/perturb-last-stage"]
    assert perturbed["outcome"] == "FAIL", perturbed["reason"]
    acc = perturbed["observation"]["accuracy"]
    assert not acc["equal"] and acc["diffs"], acc
    assert "outputs differ from counterpart" in perturbed["reason"]
    # each differing request names why, with the reference's and the case's tokens side by side
    assert all(d["why"] and (d["baseline_ids"] != d["observed_ids"] or d["max_logprob_diff"] > 0) for d in acc["diffs"])
    # the partition was still read from the workers, through the perturbing extension
    assert perturbed["observation"]["partition"] == perturbed["observation"]["partition_expected"]

    loaded = records["qwen3-tiny/pp2-tp1-mp/auto/batched-fault"]
    assert loaded["outcome"] == "FAIL", loaded["reason"]
    # one request at a time does not show it: every sequential request matched, bit for bit
    assert loaded["observation"]["accuracy"]["equal"] and loaded["observation"]["accuracy"]["mode"] == "exact"
    phase = next(p for p in loaded["observation"]["workload"] if p["kind"] == "concurrent")
    assert phase["mismatched"] >= 1, phase
    assert "phase concurrent:" in loaded["reason"] and "requests differ from the reference" in loaded["reason"]
    # the requests were in flight together, by the engine's own counters: more tokens generated
    # than engine steps (no speculative decoding), so some step sampled several sequences
    counted = phase["metrics"]
    assert counted["generation_tokens"] > counted["steps"] > 0, counted
    assert phase["not_exercised"] is None
    diff = phase["diffs"][0]
    assert diff["request"].startswith("concurrent:") and 7 in diff["observed_ids"], diff

    # both against the plain counterpart (the features claim to change nothing), one launch or none
    for rec in (perturbed, loaded):
        ref = rec["observation"]["reference"]
        assert ref["features_left_out"] == rec["features"], ref
        assert "tests.perturb" not in ref["launch"][0], ref
    assert perturbed["observation"]["reference"]["key"] == loaded["observation"]["reference"]["key"]
    assert summary.reference_launches + summary.references_reused == 1
    if os.environ.get("CI") and cache:  # CI ran smoke-cpu first: its counterpart, found by content
        assert (summary.reference_launches, summary.references_reused) == (0, 1)
    # vLLM's answers about Qwen3's class are kept for the next runs on this stack
    (stack,) = run.versions.values()
    kept = modelinfo.store_for(stack)
    assert kept is not None and (kept / "vllm-model_executor-models-qwen3-Qwen3ForCausalLM.json").is_file()

    # the token was in the launch's env and argv, and vLLM logged its non-default args: no file of
    # the run directory or its report holds it
    from reports.render import report_run

    report_run(run_dir, run_dir / "report", {"qwen3-tiny": "Qwen3"})
    logs = list((run_dir / "logs").rglob("*.log"))
    assert logs and any("***" in p.read_text(errors="replace") for p in logs)
    leaked = [str(p) for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []

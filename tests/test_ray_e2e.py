"""The two-node mp smoke case, for real, with each "node" a Ray node of a local Ray cluster
(in a network namespace of its own) and each launch started by an actor pinned to its node. Its
PP=1 counterpart is the smoke run's when the reference cache (``PPCONF_REFERENCE_CACHE``, as in
CI) holds it."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm, pytest.mark.needs_ray, pytest.mark.needs_root]

from harness.outcomes import Outcome  # noqa: E402
from harness.results import store as results  # noqa: E402
from tests.raycluster import ClusterError, RayCluster  # noqa: E402
from tests.test_faults import ours, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = RayCluster(("node0", "node1"))
    try:
        cluster.start()
    except ClusterError as err:
        cluster.stop()
        pytest.fail(f"a local Ray cluster did not start: {err}")  # its needs are met: this is a failure
    yield cluster
    cluster.stop()


def test_two_node_case_through_the_ray_runner(ray_cluster, tmp_path):
    nodes = "".join(
        f"""
  - name: node{i}
    host: localhost
    address: 127.0.0.1
    nic: lo
    devices: [{i}]
    reach: ray
    vllm: [{sys.executable}, -m, harness.target.vllm_cpu]
    python: {sys.executable}
    bind: 127.0.0.1
"""
        for i in (0, 1)
    )
    inventory = tmp_path / "two-ray-nodes.yaml"
    inventory.write_text(f"name: two-ray-nodes\nplatform: cpu\nray_address: {ray_cluster.address}\nnodes:{nodes}")
    run_dir = tmp_path / "run"
    argv = ray_cluster.ns(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--suite",
            "smoke-cpu",
            "--cluster",
            str(inventory),
            "--case",
            "qwen3-tiny/pp2-tp1-2node-mp/auto/none",
            "--out",
            str(run_dir),
        ]
    )
    done = subprocess.run(argv, env=ray_cluster.env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if os.environ.get("CI") and os.environ.get("PPCONF_REFERENCE_CACHE"):
        # CI ran smoke-cpu first: its counterpart of this case, launched on this host by the local
        # runner, is found by content and not launched again on the Ray nodes
        assert "(0 of references, 1 references reused)" in done.stdout, done.stdout[-3000:]
    (rec,) = results.read(run_dir)
    assert rec.outcome is Outcome.PASS, rec.reason
    obs = rec.observation
    assert obs.partition == [[0, 3], [3, 5]] and obs.accuracy is not None and obs.accuracy.equal is True
    # read from the stage probe that the node's actor wrote into each launch's directory
    assert obs.partition_source == "workers (collective_rpc)" and obs.stages is not None
    assert rec.deployment is not None and [l.node for l in rec.deployment.launches] == ["node0", "node1"]
    assert json.loads((run_dir / "run.json").read_text())["cluster"] == "two-ray-nodes"
    assert wait_until(lambda: not ours(run_dir), 30), f"left running: {ours(run_dir)}"

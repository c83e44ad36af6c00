"""The two-node mp smoke case, for real, with both "nodes" reached through the SSH runner
(a throwaway OpenSSH server on 127.0.0.1): outputs equal PP=1, partition read from the workers."""

import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm, pytest.mark.needs_root, pytest.mark.needs_sshd]

from harness.matrix.load import load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.run import RunConfig, SuiteRun  # noqa: E402
from tests.sshd import Sshd  # noqa: E402
from tests.test_faults import ours, wait_until  # noqa: E402


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd.start(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def test_two_node_case_through_the_ssh_runner(sshd, tmp_path):
    nodes = "".join(
        f"""
  - name: node{i}
    host: {sshd.host}
    address: 127.0.0.1
    nic: lo
    devices: [{i}]
    reach: ssh
    ssh: {{user: {sshd.user}, port: {sshd.port}, key: {sshd.client_key}}}
    vllm: [{sys.executable}, -m, harness.target.vllm_cpu]
    python: {sys.executable}
    bind: 127.0.0.1
    ppconf: true
"""
        for i in (0, 1)
    )
    inventory = tmp_path / "two-ssh-nodes.yaml"
    inventory.write_text(f"name: two-ssh-nodes\nplatform: cpu\nnodes:{nodes}")
    run_dir = tmp_path / "run"
    runner = SuiteRun(
        RunConfig(
            load_matrix(),
            "smoke-cpu",
            load_cluster(inventory),
            run_dir,
            case_ids=["qwen3-tiny/pp2-tp1-2node-mp/auto/none"],
        )
    )
    summary = runner.run()
    assert summary.counts() == {"PASS": 1}
    from harness.results import store as results

    (rec,) = results.read(run_dir)
    obs = rec.observation
    assert obs.partition == [[0, 3], [3, 5]] and (obs.partition_source or "").startswith("workers")
    assert obs.accuracy is not None and obs.accuracy.equal is True
    assert rec.deployment is not None and [l.node for l in rec.deployment.launches] == ["node0", "node1"]
    assert wait_until(lambda: not ours(run_dir), 30), f"left running: {ours(run_dir)}"

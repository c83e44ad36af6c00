"""`ppconf run --max-parallel 2` for real: this host's two cores as two one-core nodes
(bench/two_cores.py), deployments of one core each live at the same time, one on each node.

- Two config-time rejections judged side by side: both XFAIL, their launches overlapping in time
  on different nodes, nothing left in live.json.
- Ctrl-C while two servers are starting: every process of both is gone, nothing is recorded, and
  the run says how to resume.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.two_cores import inventory, layer
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.run import RunConfig, SuiteRun
from tests.test_run_interrupt import interrupt_and_check

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

REJECTED = """\
  - when: suite == "parallel-cpu" && "dcp" in features
    expect: rejected
    error: "tp_size=1 must be divisible by dcp_size=2."
    phase: config
    within_s: 120
    why: DCP splits the KV cache over the TP group; one rank cannot be split in two
"""


@pytest.fixture
def two_cores(tmp_path: Path) -> tuple[Path, Path]:
    features = ["dcp", "dcp+enforce-eager", "none", "enforce-eager"]
    return inventory(tmp_path / "two-cores.yaml"), layer(tmp_path / "layer", features, REJECTED)


def test_two_rejections_are_judged_side_by_side_on_two_nodes(two_cores, tmp_path):
    cluster, matrices = two_cores
    m = load_matrix([DEFAULT_MATRICES, matrices])
    run_dir = tmp_path / "run"
    ids = ["qwen3-tiny/pp1-tp1/auto/dcp", "qwen3-tiny/pp1-tp1/auto/dcp+enforce-eager"]
    cfg = RunConfig(m, "parallel-cpu", load_cluster(cluster), run_dir, case_ids=ids, max_parallel=2)
    summary = SuiteRun(cfg).run()
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["case"] for r in records) == sorted(ids)
    assert all(r["outcome"] == "XFAIL" for r in records), [r["reason"] for r in records]
    assert summary.launches == 2
    nodes = {l["node"] for r in records for l in r["deployment"]["launches"]}
    assert nodes == {"core0", "core1"}, nodes  # each on its own one-core node
    spans = [
        (datetime.fromisoformat(r["started"]).timestamp(), r["duration_s"])
        for r in sorted(records, key=lambda r: r["started"])
    ]
    (first, length), (second, _) = spans
    assert second < first + length, (
        f"the second began {second - first:.1f} s after the first, which took {length:.1f} s"
    )
    assert not (run_dir / "live.json").exists()


def test_ctrl_c_with_two_servers_starting_stops_both_and_records_nothing(two_cores, tmp_path):
    import psutil  # comes with vLLM

    cluster, matrices = two_cores
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "harness.cli", "run", "--suite", "parallel-cpu", "--cluster", str(cluster)]
    argv += ["--matrices", str(DEFAULT_MATRICES), "--matrices", str(matrices), "--out", str(out), "--max-parallel", "2"]
    argv += ["--case", "qwen3-tiny/pp1-tp1/auto/none", "--case", "qwen3-tiny/pp1-tp1/auto/enforce-eager"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me = psutil.Process(p.pid)
    started: set[int] = set()
    groups: list = []
    end = time.monotonic() + 180
    while time.monotonic() < end and p.poll() is None:
        groups = json.loads((out / "live.json").read_text() or "[]") if (out / "live.json").is_file() else []
        started |= {k.pid for k in me.children(recursive=True)}
        if len(groups) >= 2:  # both deployments live at once
            break
        time.sleep(0.2)
    assert len(groups) >= 2, "the two deployments were never live together"
    time.sleep(3)
    started |= {k.pid for k in me.children(recursive=True)}
    interrupt_and_check(p, out, started)
    assert not (out / "live.json").exists()

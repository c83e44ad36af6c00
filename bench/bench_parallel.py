"""Deployments side by side, for real: this host's two cores as two one-core nodes, two served
one-core cases, run with ``--max-parallel 1`` and ``--max-parallel 2``.

    .venv/bin/python bench/bench_parallel.py [--features none,enforce-eager]

A first run fills a reference cache, so both timed runs launch only their cases (each case's
reference is reused): what is compared is the cases' deployments one after another against side
by side. Prints each run's wall time, its longest deployment and the sum of its deployments
(from the run's own results), the parallel run's time over its longest deployment (the target
is within 1.2 x), and whether both runs gave every case the same outcome.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.two_cores import inventory, layer  # noqa: E402
from harness.results import store  # noqa: E402


def ppconf_run(work: Path, name: str, cluster: Path, matrices: Path, parallel: int, cache: Path) -> tuple[float, Path]:
    out = work / name
    argv = [sys.executable, "-m", "harness.cli", "run", "--suite", "parallel-cpu", "--cluster", str(cluster)]
    argv += ["--matrices", str(ROOT / "matrices"), "--matrices", str(matrices), "--out", str(out)]
    argv += ["--reference-cache", str(cache), "--max-parallel", str(parallel)]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):
        sys.exit(f"{name}: ppconf run exited {done.returncode}\n{done.stderr[-3000:]}")
    return wall, out


def figures(run_dir: Path) -> tuple[dict[str, str], float, float, float]:
    """(outcome per case, the longest deployment, the sum of the deployments, the span from the
    first deployment's start to the last verdict) from a run's results."""
    records = store.read(run_dir)
    per_deployment: dict[str, float] = {}
    starts, ends = [], []
    for r in records:
        if r.plan_key:
            seconds = float(r.duration_s or 0.0)
            per_deployment[r.plan_key] = max(per_deployment.get(r.plan_key, 0.0), seconds)
            start = datetime.fromisoformat(r.started).timestamp()
            starts.append(start)
            ends.append(start + seconds)
    outcomes = {r.case: r.outcome.value for r in records}
    return outcomes, max(per_deployment.values()), sum(per_deployment.values()), max(ends) - min(starts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", default="none,enforce-eager", help="one served case per feature (comma-separated)")
    p.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary one)")
    args = p.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="ppconf-bench-parallel-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = inventory(work / "two-cores.yaml")
    matrices = layer(work / "layer", args.features.split(","))
    cache = work / "refcache"
    ppconf_run(work, "warm", cluster, matrices, 2, cache)  # fills the reference cache
    rows = []
    for parallel in (1, 2):
        wall, out = ppconf_run(work, f"parallel-{parallel}", cluster, matrices, parallel, cache)
        outcomes, longest, total, span = figures(out)
        rows.append((parallel, wall, span, longest, total, outcomes))
    # wall: the whole command (plan check, version probe, report included); span: the first
    # deployment's start to the last verdict, which the parallelism shortens
    print(
        f"{'--max-parallel':>14s} {'wall s':>7s} {'span s':>7s} {'longest s':>9s} {'sum s':>7s} "
        f"{'span/longest':>12s}  outcomes"
    )
    for parallel, wall, span, longest, total, outcomes in rows:
        counts = ", ".join(f"{n} {o}" for o, n in sorted(_count(outcomes).items()))
        print(f"{parallel:14d} {wall:7.1f} {span:7.1f} {longest:9.1f} {total:7.1f} {span / longest:12.2f}  {counts}")
    same = rows[0][5] == rows[1][5]
    print(f"same outcome for every case: {'yes' if same else 'NO'}; runs in {work}")
    return 0 if same else 1


def _count(outcomes: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes.values():
        out[o] = out.get(o, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())

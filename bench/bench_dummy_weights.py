"""What launching claimed rejections without their weights saves (``harness.plan.weights``).

    .venv/bin/python bench/bench_dummy_weights.py [--suite nightly-ascend] [--cluster a3-pd]
    .venv/bin/python bench/bench_dummy_weights.py --runs REAL_RUN DUMMY_RUN

Estimated: the suite's schedule on the cluster from the cost model, once with every claimed
rejection reading its checkpoint (before) and once as the runner launches them now, dummy weights
first (after): device-hours, the night's length, and the rejections' own device-hours.

Measured (``--runs``): two runs of the same cases, one made before the dummy launches (real
weights) and one after; prints each case's outcome and time in both, whether every outcome is the
same, and the time saved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script, no install

from harness.matrix.load import load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.plan.schedule import Schedule, hms, schedule_suite  # noqa: E402
from harness.plan.weights import NOTE  # noqa: E402
from harness.results import store  # noqa: E402


def rejections(s: Schedule) -> float:
    """Device-hours of the deployments that stop at a claimed rejection."""
    return sum(e.duration * e.need.devices for e in s.entries if e.need.cost and e.need.cost.stops) / 3600


def estimated(suite: str, cluster_name: str) -> None:
    m, cluster = load_matrix(), load_cluster(cluster_name)
    before = schedule_suite(m, suite, cluster, dummy_weights=False)
    after = schedule_suite(m, suite, cluster)
    stopping = sum(1 for e in after.entries if e.need.cost and e.need.cost.stops)
    print(f"{suite} on {cluster.name}: {stopping} deployments stop at a claimed rejection (estimates)")
    print(f"{'':<22}{'before':>10}{'after':>10}{'saved':>10}")
    rows = [
        ("device-hours", before.device_hours, after.device_hours),
        ("rejections' dev-hours", rejections(before), rejections(after)),
    ]
    for name, b, a in rows:
        print(f"{name:<22}{b:10.1f}{a:10.1f}{b - a:10.1f}")
    print(
        f"{'night':<22}{hms(before.makespan):>10}{hms(after.makespan):>10}{hms(before.makespan - after.makespan):>10}"
    )


def measured(real: Path, dummy: Path) -> int:
    a = {r.case: r for r in store.read(real)}
    b = {r.case: r for r in store.read(dummy)}
    same = True
    saved = 0.0
    print(f"{'case':<40} {'real weights':>18} {'dummy first':>18}  weights loaded")
    for case in sorted(a.keys() & b.keys()):
        ra, rb = a[case], b[case]
        same &= ra.outcome == rb.outcome
        saved += (ra.duration_s or 0.0) - (rb.duration_s or 0.0)
        loaded = "no" if NOTE in rb.observation.notes else "yes"
        print(
            f"{case:<40} {ra.outcome.value:>10} {ra.duration_s or 0:6.1f}s {rb.outcome.value:>10} "
            f"{rb.duration_s or 0:6.1f}s  {loaded}"
        )
    print(f"same outcome for every case: {'yes' if same else 'NO'}; time saved {saved:.1f}s")
    return 0 if same else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="nightly-ascend")
    p.add_argument("--cluster", default="a3-pd")
    p.add_argument("--runs", nargs=2, type=Path, metavar=("REAL_RUN", "DUMMY_RUN"))
    args = p.parse_args()
    if args.runs:
        return measured(*args.runs)
    estimated(args.suite, args.cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())

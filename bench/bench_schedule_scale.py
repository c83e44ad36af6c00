"""How the scheduler's own time grows with the number of deployments: the synthetic nightly of
``bench_schedule.py`` at growing sizes, on clusters of 8 and 64 nodes of 16 devices.

Run from the repository root: ``.venv/bin/python bench/bench_schedule_scale.py [--max N]``. It
only prints (time per size, and per deployment: flat when the growth is linear).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script, no install
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_schedule import SEED, cluster, nightly  # noqa: E402

from harness.plan.schedule import simulate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max", type=int, default=11632, help="the largest number of deployments (default: 11632)")
    args = parser.parse_args()
    print(f"{'deployments':>11} {'cluster':<10} {'scheduler':>10} {'per deployment':>15} {'ratio':>6}")
    size = 368
    while True:
        needs, durations = nightly(size * 2, SEED)  # about 1.6 cases per deployment
        needs = needs[:size]
        for nodes in (8, 64):
            c = cluster(nodes)
            t0 = time.perf_counter()
            s = simulate(needs, c, durations)
            took = time.perf_counter() - t0
            print(f"{len(needs):>11} {c.name:<10} {took:>9.3f}s {took / len(needs) * 1e6:>12.0f} µs {s.ratio:>6.3f}")
        if size >= args.max:
            break
        size = min(args.max, size * 2)


if __name__ == "__main__":
    main()

"""Figures for the scheduler on a synthetic nightly: makespan against its lower bound, launches
per case, and the scheduler's own time, on clusters of 2, 8 and 64 nodes of 16 devices.

Run from the repository root: ``.venv/bin/python bench/bench_schedule.py``. It only prints.
The nightly is built directly as deployment needs (no matrix): single-node deployments of
2/4/8/16 devices, two-node gangs (TP8 x PP2 and TP16 x PP2 layouts), and P/D pairs on two nodes,
some serving several cases, with durations drawn from a seeded log-normal distribution, as the
wall-clock times of real launches spread (most a few minutes, a long tail of slow start-ups).
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script, no install

from harness.plan.cluster import Cluster, Node  # noqa: E402
from harness.plan.schedule import Need, simulate  # noqa: E402

SEED = 0
CASES = 600
DEVICES_PER_NODE = 16
TARGET = 1.10

# (weight, slots, spread): the shapes of a nightly and how often each appears
SHAPES = [
    (18, (2,), False),  # TP1 x PP2 on one node
    (18, (4,), False),  # TP2 x PP2
    (16, (8,), False),  # TP4 x PP2
    (8, (16,), False),  # TP8 x PP2 on a whole A3 node
    (20, (8, 8), True),  # TP8 inside each of two nodes, PP2 across them (mp or Ray)
    (4, (16, 16), True),  # TP8 x PP2 per node, PP4 across two whole nodes
    (8, (16, 8), True),  # P/D: prefill TP8 x PP2, decode TP8 on another node
    (8, (4, 4), True),  # P/D: prefill TP2 x PP2, decode TP4
]


def nightly(cases: int, seed: int) -> tuple[list[Need], dict[str, float]]:
    """Deployments until ``cases`` cases are covered; a deployment serves 1-4 cases (the cases
    whose launches are identical share it)."""
    rng = random.Random(seed)
    weights = [w for w, _, _ in SHAPES]
    needs: list[Need] = []
    durations: dict[str, float] = {}
    covered = 0
    while covered < cases:
        _, slots, spread = rng.choices(SHAPES, weights)[0]
        n = min(cases - covered, rng.choices([1, 2, 3, 4], [60, 25, 10, 5])[0])
        key = f"d{len(needs):04d}"
        ids = tuple(f"{key}/case{i}" for i in range(n))
        needs.append(Need(key, slots, spread, ids, ids[0]))
        # start-up grows with size; each case adds its checks; a log-normal tail of slow launches
        startup = 150 + 8 * sum(slots) + 60 * (len(slots) - 1)
        durations[key] = round(startup * math.exp(rng.gauss(0, 0.5)) + 45 * n, 1)
        covered += n
    return needs, durations


def cluster(nodes: int) -> Cluster:
    return Cluster(
        name=f"sim-{nodes}x{DEVICES_PER_NODE}",
        platform="ascend",
        nodes=[
            Node(
                name=f"node{i:02d}",
                host=f"node{i:02d}",
                address=f"10.0.0.{i + 1}",
                devices=list(range(DEVICES_PER_NODE)),
            )
            for i in range(nodes)
        ],
    )


def main() -> None:
    needs, durations = nightly(CASES, SEED)
    serial = sum(durations.values())
    print(
        f"synthetic nightly: {CASES} cases in {len(needs)} deployments (seed {SEED}); "
        f"one at a time it takes {serial / 3600:.1f} h"
    )
    head = (
        f"{'cluster':<12} {'makespan':>9} {'bound':>9} {'ratio':>6} {'target':>7} {'util':>5} "
        f"{'launches/cases':>15} {'unplaceable':>11} {'scheduler':>10}"
    )
    print(head)
    for nodes in (2, 8, 64):
        c = cluster(nodes)
        t0 = time.perf_counter()
        s = simulate(needs, c, durations)
        took = time.perf_counter() - t0
        verdict = "ok" if s.ratio <= TARGET else "over"
        print(
            f"{c.name:<12} {s.makespan / 3600:>8.2f}h {s.lower_bound / 3600:>8.2f}h {s.ratio:>6.3f} "
            f"{verdict:>7} {s.utilisation:>5.0%} {f'{s.launches}/{s.cases} = {s.launches / s.cases:.2f}':>15} "
            f"{len(s.unplaceable):>11} {took * 1000:>8.0f}ms"
        )


if __name__ == "__main__":
    main()

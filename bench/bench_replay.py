"""The runner's policy when real durations differ from the estimates: nightly-ascend on a3-pd
(references included) replayed with seeded noise on every deployment's duration.

    .venv/bin/python bench/bench_replay.py [--suite S] [--cluster C] [--durations FILE|RUN] [--sigma 0.3] [--seeds 20]

Each deployment's duration is its recorded one (``--durations``) or the cost model's estimate,
times a seeded log-normal factor (median 1, ``--sigma``). The schedule is made once from the
unperturbed durations, as the runner makes it before anything ran; the noisy durations are then
replayed (nothing launches) through

- fixed: the runner as it was — each deployment on its scheduled devices only, a device serving
  its deployments in the schedule's order;
- backfill: ``schedule.Backfill`` — the schedule's order on the devices actually free, with
  backfilling that never delays the head's reservation (``harness.dispatch`` runs it).

Prints, per policy, the makespan over the lower bound (the larger of ``Schedule.lower_bound``
and ``schedule.exclusion_bound``, both from the real durations): mean, worst, and how many seeds
stay within the target x1.05.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a plain script, no install

from harness.matrix.load import load_matrix  # noqa: E402
from harness.plan.cluster import Cluster, load_cluster  # noqa: E402
from harness.plan.schedule import (  # noqa: E402
    ScheduledLaunch,
    exclusion_bound,
    load_durations,
    replay,
    schedule_suite,
)

TARGET = 1.05


def fixed(entries: list[ScheduledLaunch], actual: dict[str, float]) -> float:
    """The makespan of the fixed-device runner: a deployment starts once its scheduled devices
    are free and no deployment ahead of it in the schedule still waits for any of them."""
    pending = list(entries)
    busy: dict[tuple[str, int], str] = {}
    ends: list[tuple[float, str, frozenset[tuple[str, int]]]] = []
    now = makespan = 0.0
    while pending or ends:
        wanted: set[tuple[str, int]] = set()
        for e in list(pending):
            devices = frozenset((n, d) for n, ds in e.placement.nodes for d in ds)
            if not devices & busy.keys() and not devices & wanted:
                pending.remove(e)
                busy.update(dict.fromkeys(devices, e.need.key))
                heapq.heappush(ends, (now + actual[e.need.key], e.need.key, devices))
            wanted |= devices
        now, _, devices = heapq.heappop(ends)
        makespan = max(makespan, now)
        for dev in devices:
            del busy[dev]
    return makespan


def bound(cluster: Cluster, entries: list[ScheduledLaunch], actual: dict[str, float]) -> float:
    real = [
        ScheduledLaunch(e.need, 0.0, actual[e.need.key], e.placement, True) for e in entries
    ]  # only durations count
    area = sum(e.duration * e.need.devices for e in real) / sum(len(n.devices) for n in cluster.nodes)
    return max(area, max(e.duration for e in real), exclusion_bound(cluster, real))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="nightly-ascend")
    p.add_argument("--cluster", default="a3-pd")
    p.add_argument("--durations", type=Path, help="recorded durations (a JSON file or a run directory)")
    p.add_argument("--sigma", type=float, default=0.3, help="log-normal noise on each duration (default 0.3)")
    p.add_argument("--seeds", type=int, default=20)
    args = p.parse_args()
    cluster = load_cluster(args.cluster)
    durations = load_durations(args.durations) if args.durations else None
    s = schedule_suite(load_matrix(), args.suite, cluster, durations)
    entries = list(s.entries)
    order = [(e.need, e.duration, e.placement) for e in entries]
    known = sum(e.known for e in entries)
    print(
        f"{args.suite} on {cluster.name}: {len(entries)} deployments ({s.references} references), "
        f"{known} recorded durations, {len(entries) - known} estimated; noise: log-normal sigma {args.sigma}"
    )
    exact = {e.need.key: e.duration for e in entries}
    print(
        f"exact durations: schedule x{s.makespan / bound(cluster, entries, exact):.3f}, "
        f"backfill x{replay(cluster, order, exact).makespan / bound(cluster, entries, exact):.3f}, "
        f"fixed x{fixed(entries, exact) / bound(cluster, entries, exact):.3f} "
        f"(area bound alone: schedule x{s.ratio:.3f})"
    )
    ratios: dict[str, list[float]] = {"fixed": [], "backfill": []}
    for seed in range(args.seeds):
        rng = random.Random(seed)
        actual = {e.need.key: e.duration * rng.lognormvariate(0.0, args.sigma) for e in entries}
        lb = bound(cluster, entries, actual)
        ratios["fixed"].append(fixed(entries, actual) / lb)
        ratios["backfill"].append(replay(cluster, order, actual).makespan / lb)
    print(f"{'policy':<9} {'mean':>6} {'worst':>6}  within x{TARGET}")
    for name, values in ratios.items():
        within = sum(v <= TARGET for v in values)
        print(f"{name:<9} {statistics.mean(values):6.3f} {max(values):6.3f}  {within}/{len(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

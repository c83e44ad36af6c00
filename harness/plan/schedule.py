"""Scheduling deployments on a cluster: which deployment runs when, on which nodes and devices.

The input is what planning produced — deployments, each serving one or more cases — reduced to
its resource needs: devices per node rank, and whether the ranks must sit on different nodes.
The output is a Schedule: a start time and a Placement per deployment, the makespan, and the
lower bound no schedule can beat. Pure: nothing is launched, so ``ppconf schedule --simulate``
shows a nightly's shape and length before any device is touched, and a runner can follow the
placements it computes (``plan(m, case, cluster, placement=entry.placement)``).

How it places, and why:
- Gang scheduling: every node rank of a multi-node deployment, and both instances of a P/D
  pair, start together or not at all — a half-started deployment only holds devices while it
  waits for its peer.
- Longest first (LPT): a long deployment started last sets the makespan alone; started first,
  it runs beside everything else. Durations come from earlier runs when known, an estimate from
  the topology's size otherwise.
- Backfilling (EASY): when the longest waiting deployment does not fit yet, it gets a
  reservation at the earliest time it will, and shorter ones run in the gap only if they cannot
  delay that reservation. Without it, a stream of small deployments keeps a wide gang waiting
  and the wide gang then runs alone at the end.
- Node and device choice: widest rank first onto the node with the fewest free devices that
  still hold it (best fit keeps whole nodes whole for gangs), and a contiguous, aligned device
  range inside the node (see lease.pick_devices).
- A deployment the empty cluster cannot hold is reported with the reason, never dropped.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cases.expand import expand
from harness.matrix.load import Matrix
from harness.matrix.schema import Topology
from harness.outcomes import NO_LAUNCH
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.launch import Deployment, Placement, PlanError, group_deployments
from harness.plan.lease import device_ranges, pick_devices
from harness.results import store as results

# Estimate for a deployment no earlier run has timed: start-up grows with the nodes that must
# join the group and the devices that load weights, then each case adds its checks. Used only to
# order and size a first schedule; the run's own results replace it the next time.
ESTIMATE_BASE_S = 120.0
ESTIMATE_PER_EXTRA_NODE_S = 60.0
ESTIMATE_PER_DEVICE_S = 5.0
ESTIMATE_PER_CASE_S = 30.0


@dataclass(frozen=True)
class Need:
    """What one deployment asks of the cluster."""

    key: str  # the deployment key (what earlier runs recorded as plan_key)
    slots: tuple[int, ...]  # devices per node rank, in node-rank order
    spread: bool = False  # node ranks on distinct nodes (the topology spans nodes on purpose)
    cases: tuple[str, ...] = ()
    label: str = ""  # a readable name: the first case id

    @property
    def devices(self) -> int:
        return sum(self.slots)

    @property
    def gang(self) -> bool:
        return len(self.slots) > 1

    @property
    def name(self) -> str:
        return self.label or (self.cases[0] if self.cases else self.key)


def topology_slots(topo: Topology) -> tuple[int, ...]:
    """Devices per node rank, as plan lays a topology out: the world split evenly over nnodes;
    for P/D the prefill instance, then the decode instance."""
    if topo.decode is not None:
        d = topo.decode
        return (topo.world, d.tp * d.pp * d.dp)
    return (topo.world // topo.nnodes,) * topo.nnodes


def need_of(d: Deployment, topology: Topology | None = None) -> Need:
    """A deployment's needs, from the topology when given (it states the device counts), else from
    the placement plan chose. Whether ranks must spread over distinct nodes follows what plan
    did: it spreads when the cluster has the nodes, and packs (the local host playing several
    nodes on disjoint cores) only when it has not."""
    placement = d.placement
    if topology is not None:
        slots = topology_slots(topology)
    elif placement is not None:
        slots = tuple(len(devices) for _, devices in placement.nodes)
    else:
        raise ValueError(f"deployment {d.key} has no placement; pass its topology")
    if placement is not None:
        names = [name for name, _ in placement.nodes]
        spread = len(names) > 1 and len(set(names)) == len(names)
    else:
        spread = len(slots) > 1
    return Need(d.key, slots, spread, d.case_ids, d.case_ids[0] if d.case_ids else "")


def estimate_s(need: Need) -> float:
    return (
        ESTIMATE_BASE_S
        + ESTIMATE_PER_EXTRA_NODE_S * (len(need.slots) - 1)
        + ESTIMATE_PER_DEVICE_S * need.devices
        + ESTIMATE_PER_CASE_S * max(1, len(need.cases))
    )


def duration_of(need: Need, durations: Mapping[str, float] | None) -> tuple[float, bool]:
    """(seconds, known): the deployment key's recorded time, else the longest recorded time of
    its cases (each case record carries the time of the whole launch it shared), else the
    estimate."""
    durations = durations or {}
    if need.key in durations:
        return _seconds(durations[need.key], f"duration of deployment {need.key}"), True
    known = [_seconds(durations[c], f"duration of case {c}") for c in need.cases if c in durations]
    if known:
        return max(known), True
    return estimate_s(need), False


def _seconds(value: Any, where: str) -> float:
    """A duration: a finite number of seconds >= 0 (NaN would never be placed, inf never end)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{where}: {value!r} is not a duration (give finite seconds >= 0)")
    return seconds


def durations_from_results(run_dir: Path) -> dict[str, float]:
    """Durations from a finished run: per case, and per deployment (plan_key) the longest."""
    out: dict[str, float] = {}
    for rec in results.read(run_dir):
        if not rec.duration_s:
            continue  # recorded without a launch
        seconds = _seconds(rec.duration_s, f"{run_dir / results.RESULTS}: case {rec.case!r} duration_s")
        out[rec.case] = seconds
        if rec.plan_key:
            out[rec.plan_key] = max(out.get(rec.plan_key, 0.0), seconds)
    return out


def load_durations(path: Path | str) -> dict[str, float]:
    """A durations file (JSON: deployment key or case id -> seconds), or a run directory."""
    path = Path(path)
    if path.is_dir():
        return durations_from_results(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path}: cannot read durations: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of deployment key or case id -> seconds")
    return {str(k): _seconds(v, f"{path}: {k!r}") for k, v in data.items()}


# ---- the schedule ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduledLaunch:
    need: Need
    start: float
    end: float
    placement: Placement  # node rank i -> (node, device ids)
    known: bool  # duration from an earlier run, not the estimate

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Unplaceable:
    name: str
    cases: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Schedule:
    cluster: str
    nodes: tuple[tuple[str, int], ...]  # node name, device count
    entries: tuple[ScheduledLaunch, ...]  # by start time
    unplaceable: tuple[Unplaceable, ...] = ()
    no_launch: tuple[str, ...] = ()  # cases recorded without a launch (unsupported here, no claim)
    seconds: float = 0.0  # the scheduler's own time (filled in by the caller that measures it)

    @property
    def devices(self) -> int:
        return sum(n for _, n in self.nodes)

    @property
    def makespan(self) -> float:
        return max((e.end for e in self.entries), default=0.0)

    @property
    def device_seconds(self) -> float:
        return sum(e.duration * e.need.devices for e in self.entries)

    @property
    def lower_bound(self) -> float:
        """No schedule of these deployments on this cluster ends sooner: the longest must run
        from start to end, and the work cannot spread over more devices than there are."""
        longest = max((e.duration for e in self.entries), default=0.0)
        return max(longest, self.device_seconds / self.devices if self.devices else 0.0)

    @property
    def ratio(self) -> float:
        return self.makespan / self.lower_bound if self.lower_bound else 1.0

    @property
    def utilisation(self) -> float:
        return self.device_seconds / (self.makespan * self.devices) if self.makespan and self.devices else 0.0

    @property
    def cases(self) -> int:
        return sum(len(e.need.cases) for e in self.entries)

    @property
    def launches(self) -> int:
        return len(self.entries)

    def render(self) -> str:
        known = sum(e.known for e in self.entries)
        lines = [
            f"schedule on {self.cluster} ({len(self.nodes)} node(s), {self.devices} device(s)): "
            f"{self.launches} deployment(s) for {self.cases} case(s)",
            f"makespan {_hms(self.makespan)}  lower bound {_hms(self.lower_bound)} (x{self.ratio:.2f})  "
            f"utilisation {self.utilisation:.0%}  durations: {known} from earlier runs, "
            f"{self.launches - known} estimated (~)",
        ]
        if self.entries:
            rows = [
                (
                    _hms(e.start),
                    _hms(e.end),
                    f"{'' if e.known else '~'}{e.duration:.0f}s",
                    " ".join(f"{node}:{device_ranges(devs)}" for node, devs in e.placement.nodes),
                    str(len(e.need.cases)),
                    e.need.name,
                )
                for e in self.entries
            ]
            head = ("start", "end", "time", "placement", "cases", "deployment")
            widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
            for r in [head, *rows]:
                lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if self.unplaceable:
            lines.append(f"unplaceable on {self.cluster} ({len(self.unplaceable)}):")
            lines += [f"  {u.name}: {u.reason}" for u in self.unplaceable]
        if self.no_launch:
            lines.append(f"{len(self.no_launch)} case(s) need no launch (unsupported on the platform, or no claim)")
        return "\n".join(lines)


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


# ---- placing ----------------------------------------------------------------------------------

Free = dict[str, set[int]]  # node -> free device ids


def _fit(free: Free, order: Sequence[str], need: Need) -> Placement | None:
    """A placement of every rank of ``need`` on the free devices, or None.

    Ranks go widest first, each onto the node with the fewest free devices that still holds it.
    With spread ranks (distinct nodes) this greedy is exact: the nodes that can hold a wider
    rank also hold every narrower one, so taking the tightest node never strands a later rank.
    """
    counts = {n: len(free[n]) for n in order}
    ranks = sorted(range(len(need.slots)), key=lambda i: (-need.slots[i], i))
    chosen: dict[int, str] = {}
    for i in ranks:
        wanted = need.slots[i]
        best = None
        for n in order:
            if need.spread and n in chosen.values():
                continue
            if counts[n] >= wanted and (best is None or counts[n] < counts[best]):
                best = n
        if best is None:
            return None
        counts[best] -= wanted
        chosen[i] = best
    left = {n: set(free[n]) for n in set(chosen.values())}
    out: list[tuple[str, tuple[int, ...]]] = [("", ())] * len(need.slots)
    for i in ranks:
        node = chosen[i]
        devices = pick_devices(sorted(left[node]), need.slots[i])
        left[node] -= set(devices)
        out[i] = (node, tuple(devices))
    return Placement(tuple(out))


def _take(free: Free, placement: Placement) -> None:
    for node, devices in placement.nodes:
        free[node] -= set(devices)


def _give(free: Free, placement: Placement) -> None:
    for node, devices in placement.nodes:
        free[node] |= set(devices)


def simulate(
    deployments: Sequence[Need | Deployment], cluster: Cluster, durations: Mapping[str, float] | None = None
) -> Schedule:
    """Place every deployment on ``cluster``: LPT order, gangs whole, EASY backfilling.

    Deployments may be given as Needs or as planned Deployments (their needs are read from their
    placements). Pure and deterministic: the same input gives the same schedule.
    """
    order = [n.name for n in cluster.nodes]
    empty: Free = {n.name: set(n.devices) for n in cluster.nodes}
    needs = [d if isinstance(d, Need) else need_of(d) for d in deployments]

    unplaceable: list[Unplaceable] = []
    pending: list[tuple[Need, float, bool]] = []
    for need in needs:
        if _fit(empty, order, need) is None:
            unplaceable.append(Unplaceable(need.name, need.cases, _why_not(need, cluster)))
            continue
        seconds, known = duration_of(need, durations)
        pending.append((need, seconds, known))
    # longest first; among equals the wider first (harder to fit later), then a stable name
    pending.sort(key=lambda p: (-p[1], -p[0].devices, -len(p[0].slots), p[0].name, p[0].key))

    free: Free = {n: set(d) for n, d in empty.items()}
    running: list[tuple[float, int, Placement]] = []  # heap of (end, seq, placement)
    entries: list[ScheduledLaunch] = []
    now = 0.0
    seq = 0
    while pending:
        waiting: list[tuple[Need, float, bool]] = []
        head: Need | None = None
        shadow = 0.0
        at_shadow: Free = {}
        failed: set[tuple[tuple[int, ...], bool]] = set()  # shapes that did not fit in this pass
        for item in pending:
            need, seconds, known = item
            shape = (need.slots, need.spread)
            placement = None if shape in failed else _fit(free, order, need)
            if placement is None:
                failed.add(shape)  # free devices only shrink during a pass: it stays unfit
                if head is None:
                    head = need
                    shadow, at_shadow = _reserve(free, running, order, need)
                waiting.append(item)
                continue
            if head is not None and now + seconds > shadow:
                # it would still hold devices at the head's reservation: allowed only if the head
                # fits beside it then
                trial = {n: set(d) for n, d in at_shadow.items()}
                _take(trial, placement)
                if _fit(trial, order, head) is None:
                    waiting.append(item)
                    continue
                at_shadow = trial
            _take(free, placement)
            heapq.heappush(running, (now + seconds, seq, placement))
            seq += 1
            entries.append(ScheduledLaunch(need, now, now + seconds, placement, known))
        pending = waiting
        if not pending:
            break
        if not running:  # cannot happen: everything left fits the empty cluster
            raise AssertionError("scheduler stalled with an idle cluster")
        now = running[0][0]
        while running and running[0][0] <= now:
            _give(free, heapq.heappop(running)[2])

    entries.sort(key=lambda e: (e.start, e.placement.nodes, e.need.name))
    return Schedule(
        cluster.name, tuple((n.name, len(n.devices)) for n in cluster.nodes), tuple(entries), tuple(unplaceable)
    )


def _reserve(
    free: Free, running: list[tuple[float, int, Placement]], order: Sequence[str], need: Need
) -> tuple[float, Free]:
    """The earliest time ``need`` fits as running deployments end, and the free devices then."""
    state = {n: set(d) for n, d in free.items()}
    for end, _, placement in sorted(running):
        _give(state, placement)
        if _fit(state, order, need) is not None:
            return end, state
    raise AssertionError("a deployment that fits the empty cluster never fits")


def _why_not(need: Need, cluster: Cluster) -> str:
    sizes = sorted((len(n.devices) for n in cluster.nodes), reverse=True)
    ranks = " + ".join(str(s) for s in need.slots)
    if need.spread and len(need.slots) > len(cluster.nodes):
        return (
            f"needs {len(need.slots)} distinct nodes ({ranks} devices); cluster '{cluster.name}' "
            f"has {len(cluster.nodes)}"
        )
    return (
        f"needs {ranks} device(s) per node rank{' on distinct nodes' if need.spread else ''}; "
        f"cluster '{cluster.name}' has nodes of {', '.join(map(str, sizes))} device(s)"
    )


# ---- a whole suite -------------------------------------------------------------------------------


def schedule_suite(m: Matrix, suite: str, cluster: Cluster, durations: Mapping[str, float] | None = None) -> Schedule:
    """Expand ``suite``, plan each case that needs a launch and each reference launch the cases
    need, group launches that are identical, and simulate the result on ``cluster``. A launch that
    cannot lay out on this cluster is reported as unplaceable with the planner's own reason."""
    from harness.outcomes import NEEDS_REFERENCE
    from harness.plan.reference import ReferenceUnavailable, plan_reference, resolve

    cases = expand(m, suite).cases
    no_launch = tuple(c.id for c in cases if c.expectation.kind in NO_LAUNCH)
    unplaceable: list[Unplaceable] = []
    planned: list[Deployment] = []
    for c in cases:
        if c.expectation.kind in NO_LAUNCH:
            continue
        try:
            d = plan(m, c, cluster)
        except PlanError as err:
            unplaceable.append(Unplaceable(c.id, (c.id,), str(err)))
            continue
        planned.append(d)
        if c.expectation.kind not in NEEDS_REFERENCE:
            continue
        ref = resolve(m, c)
        if not ref.launches:
            continue
        try:
            r = plan_reference(m, c, cluster, ref)
        except (PlanError, ReferenceUnavailable) as err:
            unplaceable.append(Unplaceable(f"{c.id} (reference)", (c.id,), str(err)))
            continue
        planned.append(r)  # its placement, as planned, states its device counts
    # the placement plan chose states the device counts (the topology's own omit PCP)
    needs = [need_of(d) for d in group_deployments(planned)]
    s = simulate(needs, cluster, durations)
    return Schedule(s.cluster, s.nodes, s.entries, tuple(unplaceable) + s.unplaceable, no_launch)

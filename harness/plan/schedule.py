"""Scheduling deployments on a cluster: which deployment runs when, on which nodes and devices.

The input is what planning produced — deployments, each serving one or more cases — reduced to
its resource needs: devices per node rank, and whether the ranks must sit on different nodes.
The output is a Schedule: a start time and a Placement per deployment, the makespan, and the
lower bound no schedule can beat. Pure: nothing is launched, so ``ppconf schedule``
shows a nightly's shape and length before any device is touched, and a runner can follow the
placements it computes (``plan(m, case, cluster, placement=entry.placement)``).

How it places, and why:
- Gang scheduling: every node rank of a multi-node deployment, and both instances of a P/D
  pair, start together or not at all — a half-started deployment only holds devices while it
  waits for its peer.
- Longest first (LPT): a long deployment started last sets the makespan alone; started first,
  it runs beside everything else. Durations come from earlier runs when known, else the cost
  model's estimate from the checkpoint's size, the nodes' read bandwidth, graph capture and the
  traffic (``harness.plan.cost``), else one from the topology's size alone.
- Backfilling (EASY): when the longest waiting deployment does not fit yet, it gets a
  reservation at the earliest time it will, and shorter ones run in the gap only if they cannot
  delay that reservation. Without it, a stream of small deployments keeps a wide gang waiting
  and the wide gang then runs alone at the end.
- Node and device choice: widest rank first onto the node with the fewest free devices that
  still hold it (best fit keeps whole nodes whole for gangs), and a contiguous, aligned device
  range inside the node (see devices.pick_devices).
- A deployment the empty cluster cannot hold is reported with the reason, never dropped.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import json_input
from harness.cases.expand import expand
from harness.launch import Deployment, Placement, PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import Topology
from harness.outcomes import NO_LAUNCH
from harness.plan.cluster import Cluster
from harness.plan.cost import Cost, cost_of, read_gb_s, shared
from harness.plan.deployment import plan
from harness.plan.devices import device_ranges, pick_devices
from harness.plan.launch import group_deployments
from harness.results import store as results

# Estimate for a deployment no earlier run has timed and no cost model sized (a Need made from a
# deployment alone): start-up grows with the nodes that must
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
    reference: bool = False  # the launch only a case's reference needs
    asks: int = 0  # for a reference: the distinct sets of requests it answers (one per case if 0)
    cost: Cost | None = None  # the cost model's estimate, when the matrix was at hand

    @property
    def devices(self) -> int:
        return sum(self.slots)

    @functools.cached_property
    def widest(self) -> tuple[int, ...]:
        return tuple(sorted(self.slots, reverse=True))

    @functools.cached_property
    def widest_first(self) -> tuple[int, ...]:
        """The node ranks, widest first (in rank order among equals): the order they are placed."""
        return tuple(sorted(range(len(self.slots)), key=lambda i: (-self.slots[i], i)))

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
        return (*pd_side_slots(topo.tp, topo.pp, topo.dp, topo.nnodes), *pd_side_slots(d.tp, d.pp, d.dp, d.nnodes))
    return (topo.world // topo.nnodes,) * topo.nnodes


def pd_side_slots(tp: int, pp: int, dp: int, nnodes: int) -> tuple[int, ...]:
    """Devices per node of one P/D side: its DP ranks spread evenly over its nodes."""
    return (tp * pp * dp // nnodes,) * nnodes


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
    if need.cost is not None:
        return need.cost.total
    return (
        ESTIMATE_BASE_S
        + ESTIMATE_PER_EXTRA_NODE_S * (len(need.slots) - 1)
        + ESTIMATE_PER_DEVICE_S * need.devices
        + ESTIMATE_PER_CASE_S * max(1, need.asks or len(need.cases))
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
        data = json_input.load(path)
    except (OSError, ValueError) as err:
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
    # the makespan of the cases' own deployments scheduled alone (what references add to it)
    makespan_without_references: float | None = None
    read_gb_s: tuple[float, bool] | None = None  # the bandwidth weights were estimated at, declared or not

    def fits(self, window: float) -> bool:
        return self.makespan <= window

    @property
    def device_hours(self) -> float:
        return self.device_seconds / 3600

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
        """The cases the deployments serve (a reference is not a case)."""
        return sum(len(e.need.cases) for e in self.entries if not e.need.reference)

    @property
    def launches(self) -> int:
        return len(self.entries)

    @property
    def references(self) -> int:
        """Deployments launched only for references."""
        return sum(e.need.reference for e in self.entries)

    @property
    def references_cost(self) -> float | None:
        """The makespan with references against the cases' alone (1.0: references add nothing)."""
        alone = self.makespan_without_references
        return self.makespan / alone if alone else None

    def render(self) -> str:
        known = sum(e.known for e in self.entries)
        lines = [
            f"schedule on {self.cluster} ({len(self.nodes)} node(s), {self.devices} device(s)): "
            f"{self.cases} case(s) in {self.launches - self.references} deployment(s), "
            f"{self.references} reference deployment(s)",
            f"makespan {hms(self.makespan)}  lower bound {hms(self.lower_bound)} (x{self.ratio:.2f})  "
            f"utilisation {self.utilisation:.0%}  durations: {known} from earlier runs, "
            f"{self.launches - known} estimated (~)",
        ]
        if self.read_gb_s is not None:
            gb_s, declared = self.read_gb_s
            lines.append(
                f"night's total {hms(self.makespan)}, {self.device_hours:.1f} device-hours; estimates read "
                f"weights at {gb_s:g} GB/s per node "
                + (
                    "(the slowest node's, declared in the inventory or measured on this host)"
                    if declared
                    else "(assumed: the inventory declares no read_gb_s)"
                )
                + "; parts: w weights, i engine init, g graph capture, t traffic, in seconds"
            )
        if self.makespan_without_references is not None:
            lines.append(
                f"without references: makespan {hms(self.makespan_without_references)} "
                f"(references add x{self.references_cost or 1.0:.3f})"
            )
        if self.entries:
            rows = [
                (
                    hms(e.start),
                    hms(e.end),
                    f"{'' if e.known else '~'}{e.duration:.0f}s",
                    " ".join(f"{node}:{device_ranges(devs)}" for node, devs in e.placement.nodes),
                    "ref" if e.need.reference else str(len(e.need.cases)),
                    "" if e.known or e.need.cost is None else e.need.cost.parts(),
                    e.need.name,
                )
                for e in self.entries
            ]
            head = ("start", "end", "time", "placement", "cases", "estimate", "deployment")
            widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
            for r in [head, *rows]:
                lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if self.unplaceable:
            lines.append(f"unplaceable on {self.cluster} ({len(self.unplaceable)}):")
            lines += [f"  {u.name}: {u.reason}" for u in self.unplaceable]
        if self.no_launch:
            lines.append(f"{len(self.no_launch)} case(s) need no launch (unsupported on the platform, or no claim)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "nodes": [{"name": n, "devices": d} for n, d in self.nodes],
            "cases": self.cases,
            "deployments": self.launches - self.references,
            "references": self.references,
            "makespan_s": self.makespan,
            "makespan_without_references_s": self.makespan_without_references,
            "lower_bound_s": self.lower_bound,
            "device_hours": self.device_hours,
            "utilisation": self.utilisation,
            "entries": [
                {
                    "start_s": e.start,
                    "end_s": e.end,
                    "known": e.known,
                    "reference": e.need.reference,
                    "deployment": e.need.key,
                    "name": e.need.name,
                    "cases": list(e.need.cases),
                    "placement": [{"node": n, "devices": list(d)} for n, d in e.placement.nodes],
                    "estimate": e.need.cost.to_json() if e.need.cost is not None else None,
                }
                for e in self.entries
            ],
            "unplaceable": [{"name": u.name, "cases": list(u.cases), "reason": u.reason} for u in self.unplaceable],
            "no_launch": list(self.no_launch),
        }


def hms(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


_SPAN = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_span(text: str) -> float:
    """A length of time as a person writes it: ``8h``, ``7h30m``, ``90m``, ``3600s`` or plain seconds."""
    text = text.strip()
    match = _SPAN.fullmatch(text)
    if text and match and any(match.groups()):
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        return h * 3600 + m * 60 + s
    try:
        return _seconds(text, "window")
    except ValueError:
        raise ValueError(f"{text!r} is not a length of time (give e.g. 8h, 7h30m, 90m or seconds)") from None


# ---- placing ----------------------------------------------------------------------------------

Free = dict[str, set[int]]  # node -> free device ids
Counts = dict[str, int]  # node -> how many of its devices are free
Ranked = list[tuple[int, int]]  # (free devices, node position) of every node, ascending


def _choose(counts: Counts, order: Sequence[str], need: Need, ranked: Ranked | None = None) -> dict[int, str] | None:
    """Which node each rank of ``need`` goes to, from the free counts alone, or None.

    Ranks go widest first, each onto the node with the fewest free devices that still holds it
    (the first in ``order`` among equals). With spread ranks (distinct nodes) this greedy is
    exact: the nodes that can hold a wider rank also hold every narrower one, so taking the
    tightest node never strands a later rank. ``ranked``, the same counts as (free, position)
    ascending, finds that node by bisection for one rank or spread ranks, instead of walking the
    nodes.
    """
    ranks = need.widest_first
    if ranked is not None and (need.spread or len(ranks) == 1):
        taken: set[int] = set()
        chosen: dict[int, str] = {}
        for i in ranks:
            pos = bisect.bisect_left(ranked, (need.slots[i], -1))
            while pos < len(ranked) and ranked[pos][1] in taken:
                pos += 1
            if pos == len(ranked):
                return None
            taken.add(ranked[pos][1])
            chosen[i] = order[ranked[pos][1]]
        return chosen
    left = dict(counts)
    chosen = {}
    for i in ranks:
        wanted = need.slots[i]
        best = None
        for n in order:
            if need.spread and n in chosen.values():
                continue
            if left[n] >= wanted and (best is None or left[n] < left[best]):
                best = n
        if best is None:
            return None
        left[best] -= wanted
        chosen[i] = best
    return chosen


def _fits(counts: Counts, top: Sequence[int], order: Sequence[str], need: Need) -> bool:
    """Whether ``need`` fits the free counts (``top``: the same counts, largest first; at least as
    many as ``need`` has ranks, when the cluster has the nodes). One rank, or ranks on distinct
    nodes: the i-th widest rank needs the i-th freest node (what ``_choose`` finds, without
    walking the nodes)."""
    if len(need.slots) == 1:
        return bool(top) and top[0] >= need.slots[0]
    if need.spread:
        widest = need.widest
        return len(top) >= len(widest) and all(t >= w for t, w in zip(top, widest, strict=False))
    return _choose(counts, order, need) is not None


def _fit(free: Free, need: Need, chosen: dict[int, str]) -> Placement:
    """A placement of every rank of ``need`` on the nodes ``_choose`` picked for it: a
    contiguous, aligned device range inside each (devices.pick_devices)."""
    left = {n: free[n] for n in chosen.values()}  # copied only for a node given two ranks
    out: list[tuple[str, tuple[int, ...]]] = [("", ())] * len(need.slots)
    for i in need.widest_first:
        node = chosen[i]
        devices = _pick(tuple(sorted(left[node])), need.slots[i])
        if len(left) < len(chosen):
            left[node] = left[node] - set(devices)
        out[i] = (node, devices)
    return Placement(tuple(out))


@functools.lru_cache(maxsize=4096)
def _pick(free: tuple[int, ...], wanted: int) -> tuple[int, ...]:
    """devices.pick_devices, remembered: a node's free devices take few distinct shapes."""
    return tuple(pick_devices(free, wanted))


def _shift(counts: Counts, ranked: Ranked, position: Mapping[str, int], node: str, delta: int) -> None:
    """Change a node's free count by ``delta``, in the counts and in their ranking alike."""
    was = counts[node]
    counts[node] = was + delta
    p = position[node]
    del ranked[bisect.bisect_left(ranked, (was, p))]
    bisect.insort(ranked, (was + delta, p))


def _top(ranked: Ranked, ranks: int) -> list[int]:
    """The ``ranks`` largest free counts, largest first (all that ``_fits`` reads of them)."""
    return [c for c, _ in ranked[: -ranks - 1 : -1]]


class _Pool:
    """The free devices of the cluster as the simulation goes: per node the ids and the count,
    and the counts ranked, so a deployment's nodes are found without walking every node."""

    def __init__(self, cluster: Cluster, ranks: int):
        self.order = [n.name for n in cluster.nodes]
        self.position = {name: i for i, name in enumerate(self.order)}
        self.free: Free = {n.name: set(n.devices) for n in cluster.nodes}
        self.counts: Counts = {n: len(d) for n, d in self.free.items()}
        self.ranked: Ranked = sorted((c, self.position[n]) for n, c in self.counts.items())
        self.ranks = ranks  # the most ranks any deployment has: how much of ``top`` is read
        self.top = _top(self.ranked, ranks)

    def fits(self, need: Need) -> bool:
        """``_fits`` on the current counts, its two common cases inline (the simulation's most
        frequent question)."""
        widest, top = need.widest, self.top
        if len(widest) == 1:
            return top[0] >= widest[0]
        if need.spread and len(top) >= len(widest):
            for t, w in zip(top, widest, strict=False):
                if t < w:
                    return False
            return True
        return _fits(self.counts, top, self.order, need)

    def choose(self, need: Need) -> dict[int, str] | None:
        return _choose(self.counts, self.order, need, self.ranked)

    def take(self, need: Need, chosen: dict[int, str]) -> Placement:
        placement = _fit(self.free, need, chosen)
        for node, devices in placement.nodes:
            self.free[node] -= set(devices)
        self._move(placement, -1)
        return placement

    def give_back(self, placement: Placement) -> None:
        for node, devices in placement.nodes:
            self.free[node] |= set(devices)
        self._move(placement, +1)

    def _move(self, placement: Placement, sign: int) -> None:
        for node, devices in placement.nodes:
            _shift(self.counts, self.ranked, self.position, node, sign * len(devices))
        self.top = _top(self.ranked, self.ranks)


@dataclass
class _Waiting:
    """Deployments of one shape (devices per rank, spread) not yet started, longest first."""

    items: list[tuple[tuple[Any, ...], Need, float, bool]]  # (order key, need, seconds, known)

    def first_within(self, seconds: float, after: int) -> int | None:
        """The first item after position ``after`` that takes at most ``seconds``."""
        lo, hi = after + 1, len(self.items)
        while lo < hi:  # seconds fall along the list
            mid = (lo + hi) // 2
            if self.items[mid][2] > seconds:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self.items) else None


def simulate(
    deployments: Sequence[Need | Deployment], cluster: Cluster, durations: Mapping[str, float] | None = None
) -> Schedule:
    """Place every deployment on ``cluster``: LPT order, gangs whole, EASY backfilling.

    Deployments may be given as Needs or as planned Deployments (their needs are read from their
    placements). Pure and deterministic: the same input gives the same schedule.

    Each time deployments end, the waiting ones are visited longest first; the first that does
    not fit is the head, and gets a reservation at the earliest time it will (kept until it
    starts: what starts meanwhile never delays it). Waiting deployments of one shape are visited
    together: once one does not fit, or would hold devices the head needs at its reservation,
    the others of that shape that end after the reservation are passed over until deployments
    end again, so one visit costs the shapes waiting, not every deployment waiting.
    """
    needs = [d if isinstance(d, Need) else need_of(d) for d in deployments]
    pool = _Pool(cluster, max((len(n.slots) for n in needs), default=1))
    order = pool.order

    unplaceable: list[Unplaceable] = []
    shapes: dict[tuple[tuple[int, ...], bool], _Waiting] = {}
    for need in needs:
        shape = (need.slots, need.spread)
        if shape not in shapes and not pool.fits(need):
            unplaceable.append(Unplaceable(need.name, need.cases, _why_not(need, cluster)))
            continue
        seconds, known = duration_of(need, durations)
        # longest first; among equals the wider first (harder to fit later), then a stable name
        key = (-seconds, -need.devices, -len(need.slots), need.name, need.key)
        shapes.setdefault(shape, _Waiting([])).items.append((key, need, seconds, known))
    waiting = [w for w in shapes.values()]
    for w in waiting:
        w.items.sort(key=lambda item: item[0])
    left = sum(len(w.items) for w in waiting)

    running: list[tuple[float, int, Placement]] = []  # heap of (end, seq, placement)
    entries: list[ScheduledLaunch] = []
    now = 0.0
    seq = 0
    # the head's key, its start, the free counts then and their ranking
    reservation: tuple[str, float, Counts, Ranked] | None = None
    while left:
        visit = [(w.items[0][0], i, 0) for i, w in enumerate(waiting) if w.items]
        heapq.heapify(visit)
        head: Need | None = None
        while visit:
            _, i, pos = heapq.heappop(visit)
            w = waiting[i]
            _, need, seconds, known = w.items[pos]
            if not pool.fits(need):
                if head is None:
                    head = need
                    if reservation is None or reservation[0] != need.key:
                        reservation = (need.key, *_reserve(pool, running, need))
                continue  # free devices only shrink during a visit: the shape stays unfit
            chosen = pool.choose(need)
            assert chosen is not None
            if head is not None and reservation is not None and now + seconds > reservation[1]:
                # it would still hold devices at the head's reservation: allowed only if the head
                # fits beside it then
                trial, ranked = dict(reservation[2]), list(reservation[3])
                for rank, node in chosen.items():
                    _shift(trial, ranked, pool.position, node, -need.slots[rank])
                if not _fits(trial, _top(ranked, pool.ranks), order, head):
                    nxt = w.first_within(reservation[1] - now, pos)
                    if nxt is not None:
                        heapq.heappush(visit, (w.items[nxt][0], i, nxt))
                    continue
                reservation = (reservation[0], reservation[1], trial, ranked)
            placement = pool.take(need, chosen)
            heapq.heappush(running, (now + seconds, seq, placement))
            seq += 1
            entries.append(ScheduledLaunch(need, now, now + seconds, placement, known))
            del w.items[pos]
            left -= 1
            if pos < len(w.items):
                heapq.heappush(visit, (w.items[pos][0], i, pos))
        if not left:
            break
        if not running:  # cannot happen: everything left fits the empty cluster
            raise AssertionError("scheduler stalled with an idle cluster")
        now = running[0][0]
        while running and running[0][0] <= now:
            pool.give_back(heapq.heappop(running)[2])

    entries.sort(key=lambda e: (e.start, e.placement.nodes, e.need.name))
    return Schedule(
        cluster.name, tuple((n.name, len(n.devices)) for n in cluster.nodes), tuple(entries), tuple(unplaceable)
    )


def _reserve(pool: _Pool, running: list[tuple[float, int, Placement]], need: Need) -> tuple[float, Counts, Ranked]:
    """The earliest time ``need`` fits as running deployments end, and the free counts then (with
    their ranking)."""
    state, ranked = dict(pool.counts), list(pool.ranked)
    free = sum(state.values())
    for end, _, placement in sorted(running):
        for node, devices in placement.nodes:
            _shift(state, ranked, pool.position, node, len(devices))
            free += len(devices)
        if free >= need.devices and _fits(state, _top(ranked, pool.ranks), pool.order, need):
            return end, state, ranked
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


# ---- at run time --------------------------------------------------------------------------------


class Backfill:
    """The schedule's order kept while real durations differ from the estimates: list scheduling
    on the devices actually free, with the same EASY backfilling as ``simulate``.

    Deployments wait in the schedule's order. Each time the runner asks (``start``), the first
    waiting one — the head — starts if it fits what is free: on its scheduled devices when those
    are free, else on the nodes that hold it most tightly. If it does not fit, it gets a
    reservation: the earliest time it will, as the running deployments are expected to end (their
    start plus their estimate; one already past its estimate is expected to end now). A later one
    starts meanwhile only if it fits and cannot delay that reservation: it is expected to end
    before it, or the head still fits beside it then. Pure: the caller says what time it is and
    which deployment ended (``done``).
    """

    def __init__(self, cluster: Cluster, order: Sequence[tuple[Need, float, Placement | None]]):
        self.pool = _Pool(cluster, max((len(need.slots) for need, _, _ in order), default=1))
        self.waiting = list(order)  # (need, expected seconds, scheduled placement), in order
        self.running: dict[str, tuple[float, int, Placement]] = {}  # key -> (expected end, seq, placement)
        self._seq = 0
        # what the empty cluster cannot hold never starts here (the runner launches it apart, and
        # its launch says why it cannot run): it is never the head
        self.never = {need.key for need, _, _ in self.waiting if not self.pool.fits(need)}

    def start(self, now: float, limit: int | None = None) -> list[tuple[Need, Placement]]:
        """The waiting deployments to start now, each with its devices (taken until ``done``);
        at most ``limit`` running at once."""
        out: list[tuple[Need, Placement]] = []
        head: Need | None = None
        reservation: tuple[float, Counts, Ranked] | None = None
        i = 0
        while i < len(self.waiting) and (limit is None or len(self.running) < limit):
            need, seconds, planned = self.waiting[i]
            if need.key in self.never:
                i += 1
                continue
            exact = planned is not None and self._free(planned)
            chosen = {rank: node for rank, (node, _) in enumerate(planned.nodes)} if exact and planned else None
            if chosen is None and self.pool.fits(need):
                chosen = self.pool.choose(need)
            if head is None and chosen is None:
                head = need
                reservation = self._reserve(need, now)
                i += 1
                continue
            if chosen is None:
                i += 1
                continue
            if head is not None and reservation is not None and now + seconds > reservation[0]:
                trial, ranked = dict(reservation[1]), list(reservation[2])
                for rank, node in chosen.items():
                    _shift(trial, ranked, self.pool.position, node, -need.slots[rank])
                if not _fits(trial, _top(ranked, self.pool.ranks), self.pool.order, head):
                    i += 1
                    continue
                reservation = (reservation[0], trial, ranked)
            placement = self._take(planned) if exact and planned else self.pool.take(need, chosen)
            self.running[need.key] = (now + seconds, self._seq, placement)
            self._seq += 1
            out.append((need, placement))
            del self.waiting[i]
        return out

    def done(self, key: str) -> None:
        """The deployment ``key`` ended: its devices are free again."""
        _, _, placement = self.running.pop(key)
        self.pool.give_back(placement)

    def _free(self, placement: Placement) -> bool:
        taken: dict[str, set[int]] = {}
        for node, devices in placement.nodes:
            free = self.pool.free.get(node, set()) - taken.get(node, set())
            if not set(devices) <= free:
                return False
            taken.setdefault(node, set()).update(devices)
        return True

    def _take(self, placement: Placement) -> Placement:
        for node, devices in placement.nodes:
            self.pool.free[node] -= set(devices)
        self.pool._move(placement, -1)
        return placement

    def _reserve(self, need: Need, now: float) -> tuple[float, Counts, Ranked]:
        ends = [(max(end, now), seq, placement) for end, seq, placement in self.running.values()]
        return _reserve(self.pool, ends, need)


def replay(
    cluster: Cluster, order: Sequence[tuple[Need, float, Placement | None]], actual: Mapping[str, float]
) -> Schedule:
    """What ``Backfill`` makes of ``order`` when each deployment really takes ``actual[key]``
    seconds instead of its expected ones: the schedule as it would unfold (for benchmarks and
    tests of the runner's policy; nothing is launched)."""
    backfill = Backfill(cluster, order)
    seconds = {need.key: actual[need.key] for need, _, _ in order}
    ends: list[tuple[float, str]] = []
    entries: list[ScheduledLaunch] = []
    now = 0.0
    while backfill.waiting or ends:
        for need, placement in backfill.start(now):
            heapq.heappush(ends, (now + seconds[need.key], need.key))
            entries.append(ScheduledLaunch(need, now, now + seconds[need.key], placement, True))
        if not ends:
            if backfill.waiting:  # only what the empty cluster cannot hold is left
                break
            continue
        now = ends[0][0]
        while ends and ends[0][0] <= now:
            backfill.done(heapq.heappop(ends)[1])
    entries.sort(key=lambda e: (e.start, e.placement.nodes, e.need.name))
    return Schedule(cluster.name, tuple((n.name, len(n.devices)) for n in cluster.nodes), tuple(entries))


def exclusion_bound(cluster: Cluster, entries: Sequence[ScheduledLaunch]) -> float:
    """A lower bound tighter than ``Schedule.lower_bound`` where gangs cannot share the cluster:
    deployments that pairwise cannot run at once (two that do not fit the empty cluster together)
    run one after another, and the work of those that fit beside none of them runs outside that
    time, on all the devices at most. Greedy: the exclusive set is built longest first, and
    widest first, each one added only while it tightens the bound; the larger bound holds.
    Whether two fit together is asked of the placements the scheduler chooses (best fit): exact
    on nodes of one size, which the shipped inventories are."""
    needs = {e.need.key: e for e in entries}
    devices = sum(len(n.devices) for n in cluster.nodes)

    @functools.cache
    def after(a: str, b: str) -> bool:
        """Whether ``b`` fits the empty cluster once ``a`` took the nodes the scheduler gives it."""
        pool = _Pool(cluster, max(len(needs[a].need.slots), len(needs[b].need.slots)))
        chosen = pool.choose(needs[a].need)
        if chosen is None:
            return False
        pool.take(needs[a].need, chosen)
        return pool.fits(needs[b].need)

    def apart(a: str, b: str) -> bool:
        return not after(a, b) and not after(b, a)

    def bound(order: list[ScheduledLaunch]) -> float:
        exclusive: list[str] = []
        rest = list(entries)  # apart from every exclusive one so far
        best = sum(e.duration * e.need.devices for e in rest) / devices
        for e in order:
            if e not in rest:
                continue
            kept = [x for x in rest if x is not e and apart(e.need.key, x.need.key)]
            alone = sum(needs[k].duration for k in exclusive) + e.duration
            value = alone + sum(x.duration * x.need.devices for x in kept) / devices
            if value > best:  # only while it tightens the bound
                exclusive.append(e.need.key)
                rest, best = kept, value
        return best

    if not devices:
        return 0.0
    return max(
        bound(sorted(entries, key=lambda e: -e.duration)),
        bound(sorted(entries, key=lambda e: (-e.need.devices, -e.duration))),
    )


# ---- a whole suite -------------------------------------------------------------------------------


def schedule_suite(
    m: Matrix,
    suite: str,
    cluster: Cluster,
    durations: Mapping[str, float] | None = None,
    dummy_weights: bool = True,
) -> Schedule:
    """Expand ``suite``, plan each case that needs a launch and each reference launch the runner
    would make for it (only for a case claimed to serve its requests: see
    ``reference.reference_expected``), group launches that are identical, and simulate the result
    on ``cluster`` — once with the references and once without, to show what they add. A launch
    that cannot lay out on this cluster is reported as unplaceable with the planner's own reason.
    ``dummy_weights``: estimate refusals after the weights as the runner launches them, without
    (False: as if every launch read its checkpoint)."""
    from harness.cases.workload import workload_of
    from harness.plan.reference import ReferenceUnavailable, plan_reference, reference_expected, resolve

    cases = expand(m, suite).cases
    no_launch = tuple(c.id for c in cases if c.expectation.kind in NO_LAUNCH)
    unplaceable: list[Unplaceable] = []
    planned: list[Deployment] = []
    costs: dict[str, Cost] = {}  # case id -> its launch's estimate
    ref_costs: dict[str, dict[str, Cost]] = {}  # reference deployment key -> each distinct ask's estimate
    references: list[tuple[Deployment, str]] = []  # a reference launch and what one case asks of it
    for c in cases:
        if c.expectation.kind in NO_LAUNCH:
            continue
        try:
            planned.append(plan(m, c, cluster))
        except PlanError as err:
            unplaceable.append(Unplaceable(c.id, (c.id,), str(err)))
            continue
        costs[c.id] = cost_of(m, c, cluster, dummy_weights=dummy_weights)
        if not reference_expected(c):
            continue
        ref = resolve(m, c)
        if not ref.launches:
            continue
        try:
            r = plan_reference(m, c, cluster, ref)
        except (PlanError, ReferenceUnavailable) as err:
            unplaceable.append(Unplaceable(f"{c.id} (reference)", (c.id,), str(err)))
            continue
        # what it is asked: the case's workload (its phases as declared and the PP size that sizes
        # them) under its comparison; cases asking alike share one ask
        phases = [p.model_dump(mode="json") for p in workload_of(m, c)]
        asked = [phases, m.topologies[c.topology].pp, ref.compare.model_dump(mode="json"), m.pools(c.features)]
        shape = json.dumps(asked, sort_keys=True, default=str)
        references.append((r, shape))
        ref_nodes = len({launch.node for launch in r.launches if launch.role != "proxy"})
        ref_costs.setdefault(r.key, {}).setdefault(shape, cost_of(m, c, cluster, served=True, nodes=ref_nodes))
    # the placement plan chose states the device counts (the topology's own omit PCP); the runner
    # launches a reference apart from the cases, once, and asks it each distinct set of requests
    needs = [replace(need_of(d), cost=shared(costs[i] for i in d.case_ids)) for d in group_deployments(planned)]
    for d in group_deployments([r for r, _ in references]):
        asked_of = ref_costs[d.key]  # one launch, then each distinct set of requests in turn
        one = next(iter(asked_of.values()))
        traffic = sum(a.traffic_s for a in asked_of.values())
        needs.append(replace(need_of(d), reference=True, asks=len(asked_of), cost=replace(one, traffic_s=traffic)))
    alone = simulate([n for n in needs if not n.reference], cluster, durations)
    s = simulate(needs, cluster, durations)
    return Schedule(
        s.cluster,
        s.nodes,
        s.entries,
        tuple(unplaceable) + s.unplaceable,
        no_launch,
        makespan_without_references=alone.makespan,
        read_gb_s=read_gb_s(cluster),
    )

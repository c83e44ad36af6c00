"""Deployments side by side in the schedule's order (harness.dispatch, schedule.Backfill): which start
when real durations differ from the estimates, on which devices, without delaying the head; that a
fault or Ctrl-C in one stops every one, and that a run's records do not depend on the parallelism.
Pure: the deployments are planned, nothing is launched (the real run is bench/bench_parallel.py
and tests/test_parallel_e2e.py)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from harness.dispatch import Slot, run_parallel, scheduled
from harness.launch import Deployment, LaunchSpec, Placement
from harness.plan.cluster import Cluster, Node
from harness.plan.schedule import Backfill, Need, exclusion_bound, replay, simulate
from tests.test_schedule import check_whole, cluster, random_nightly


def _deployment(label: str, node: str = "n0", device: int = 0) -> Deployment:
    spec = LaunchSpec("n0", "api", node, "localhost", ("vllm", "serve", label), ())
    return Deployment((label,), (spec,), "n0", placement=Placement(((node, (device,)),)))


def _nodes(n: int, devices: int = 1) -> Cluster:
    return Cluster(
        name=f"{n}x{devices}",
        platform="cpu",
        nodes=[
            Node(name=f"n{i}", host="localhost", address="127.0.0.1", devices=list(range(devices))) for i in range(n)
        ],
    )


def _slot(label: str, node: str, seconds: float = 60.0) -> Slot:
    d = _deployment(label, node, 0)
    return Slot(d, Need(d.key, (1,), cases=d.case_ids, label=label), seconds, d.placement)


def _cluster() -> Cluster:
    return Cluster(
        name="two-cores",
        platform="cpu",
        nodes=[
            Node(name="core0", host="localhost", address="127.0.0.1", devices=[0]),
            Node(name="core1", host="localhost", address="127.0.0.1", devices=[1]),
        ],
    )


def test_the_schedule_spreads_one_core_deployments_over_both_nodes_longest_first():
    ds = {k: _deployment(k, "core0", 0) for k in ("short", "long", "mid")}
    durations = {d.key: s for d, s in zip(ds.values(), (10.0, 100.0, 50.0), strict=True)}
    slots = scheduled(list(ds.values()), _cluster(), durations)
    assert [s.label for s in slots] == ["long", "mid", "short"]
    assert {s.placement.nodes[0][0] for s in slots[:2] if s.placement} == {"core0", "core1"}  # side by side
    assert [s.seconds for s in slots] == [100.0, 50.0, 10.0]


def _need(key: str, slots: tuple[int, ...]) -> Need:
    return Need(key, slots, len(slots) > 1, (key,), key)


def test_the_head_takes_other_free_devices_when_its_own_are_still_busy():
    c = _nodes(2, 8)
    a, b, d = _need("a", (8,)), _need("b", (8,)), _need("d", (8,))
    on_n0 = Placement((("n0", tuple(range(8))),))
    on_n1 = Placement((("n1", tuple(range(8))),))
    # the schedule put a then d on n0, b on n1
    bf = Backfill(c, [(a, 100.0, on_n0), (b, 10.0, on_n1), (d, 100.0, on_n0)])
    assert bf.start(0.0) == [(a, on_n0), (b, on_n1)]  # on their scheduled devices, while free
    bf.done("b")
    # a runs on (past the 10 s b took): d does not wait for n0, it takes n1, free now
    ((need, placement),) = bf.start(10.0)
    assert need is d and placement == on_n1


def test_backfill_never_delays_the_head():
    c = _nodes(1, 8)
    long, head = _need("long", (6,)), _need("head", (8,))
    short, late = _need("short", (2,)), _need("late", (2,))
    bf = Backfill(c, [(long, 100.0, None), (head, 50.0, None), (late, 500.0, None), (short, 80.0, None)])
    started = [n.key for n, _ in bf.start(0.0)]
    # head waits for long (its reservation at 100); short ends before it and fills the gap; late
    # would still hold two devices at 100: it waits
    assert started == ["long", "short"]
    bf.done("long")
    assert [n.key for n, _ in bf.start(80.0)] == []  # short still runs: head does not fit yet
    bf.done("short")
    assert [n.key for n, _ in bf.start(90.0)] == ["head"]  # ended early: the head starts at once
    bf.done("head")
    assert [n.key for n, _ in bf.start(140.0)] == ["late"]


def test_a_deployment_past_its_estimate_is_expected_to_end_now():
    c = _nodes(1, 8)

    def running_a() -> Backfill:
        bf = Backfill(c, [(_need("a", (6,)), 100.0, None), (_need("head", (8,)), 50.0, None)])
        assert [n.key for n, _ in bf.start(0.0)] == ["a"]
        bf.waiting.append((_need("d", (2,)), 30.0, None))
        return bf

    # at 50, a is expected to end at 100: d (30 s) ends before the head's reservation
    assert [n.key for n, _ in running_a().start(50.0)] == ["d"]
    # at 150, a is past its estimate: the head's reservation is now, and d would delay it
    assert running_a().start(150.0) == []


def test_with_exact_durations_the_runner_keeps_the_schedules_makespan():
    for seed, nodes in [(1, 3), (2, 4), (5, 2)]:
        c = cluster(nodes)
        needs, durations = random_nightly(seed, 80)
        s = simulate(needs, c, durations)
        order = [(e.need, e.duration, e.placement) for e in s.entries]
        r = replay(c, order, durations)
        assert r.makespan <= 1.02 * s.makespan
        assert {e.need.key for e in r.entries} == {e.need.key for e in s.entries}
        rng = random.Random(seed)  # real durations differ: every deployment still runs, none overlap
        noisy = {k: v * rng.lognormvariate(0, 0.4) for k, v in durations.items()}
        check_whole(replay(c, order, noisy), c)


def test_the_exclusion_bound_holds_and_sees_what_the_area_bound_misses():
    c = _nodes(2, 16)
    whole = [_need(f"w{i}", (16, 16)) for i in range(3)]  # both nodes whole: alone, one after another
    halves = [_need(f"h{i}", (8, 8)) for i in range(4)]  # two at once
    s = simulate([*whole, *halves], c, {n.key: 100.0 for n in [*whole, *halves]})
    assert s.lower_bound == pytest.approx((3 * 32 + 4 * 16) * 100 / 32)  # area: 500
    assert exclusion_bound(c, list(s.entries)) == pytest.approx(500.0)  # here they agree
    p = [_need(f"p{i}", (16, 1)) for i in range(4)]  # a P/D pair: a whole node and one device
    singles = [_need(f"s{i}", (16,)) for i in range(4)]
    s = simulate([*p, *singles], c, {n.key: 100.0 for n in [*p, *singles]})
    # no pair runs beside another, nor beside a whole-node deployment: 400 s of pairs alone,
    # then the singles two at a time; the area bound says 262.5
    assert s.lower_bound == pytest.approx((4 * 17 + 4 * 16) * 100 / 32)
    assert exclusion_bound(c, list(s.entries)) == pytest.approx(600.0)
    assert s.makespan >= 600.0


def test_runs_at_most_n_at_once_and_every_slot_once():
    slots = [_slot(f"d{i}", f"n{i}") for i in range(5)]
    lock = threading.Lock()
    live, peak, seen = [0], [0], []

    def execute(d: Deployment) -> None:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            seen.append(d.case_ids[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1

    run_parallel(slots, _nodes(5), execute, lambda: None, 2)
    assert sorted(seen) == [f"d{i}" for i in range(5)] and peak[0] == 2


def test_a_fault_in_one_deployment_stops_every_one_and_is_raised():
    stopped = threading.Event()

    def execute(d: Deployment) -> None:
        if d.case_ids == ("bad",):
            raise RuntimeError("a fault of ppconf")
        stopped.wait(10)  # a live deployment: it ends only once stop_all took its groups down
        raise KeyboardInterrupt

    slots = [_slot("good", "n0"), _slot("bad", "n1")]
    with pytest.raises(RuntimeError, match="a fault of ppconf"):
        run_parallel(slots, _nodes(2), execute, stopped.set, 2)
    assert stopped.is_set()


def test_ctrl_c_while_waiting_stops_every_deployment(monkeypatch):
    import harness.dispatch as dispatch

    stopped = threading.Event()
    started = threading.Event()

    def execute(d: Deployment) -> None:
        started.set()
        stopped.wait(10)

    real_wait = dispatch.wait

    def interrupted(futures, timeout, return_when=None):
        if return_when is not None and started.wait(5):
            raise KeyboardInterrupt  # what the main thread gets on Ctrl-C (or SIGTERM, as the run maps it)
        return real_wait(futures, timeout=timeout)

    monkeypatch.setattr(dispatch, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_parallel([_slot("a", "n0"), _slot("b", "n1")], _nodes(2), execute, stopped.set, 2)
    assert stopped.is_set()

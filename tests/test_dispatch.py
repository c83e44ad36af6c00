"""Deployments side by side in the schedule's order (harness.dispatch): which may start, that a
fault or Ctrl-C in one stops every one, and that a run's records do not depend on the parallelism.
Pure: the deployments are planned, nothing is launched (the real run is bench/bench_parallel.py
and tests/test_parallel_e2e.py)."""

from __future__ import annotations

import threading
import time

import pytest

from harness.dispatch import Slot, run_parallel, scheduled, startable
from harness.launch import Deployment, LaunchSpec, Placement
from harness.plan.cluster import Cluster, Node


def _deployment(label: str, node: str = "n0", device: int = 0) -> Deployment:
    spec = LaunchSpec("n0", "api", node, "localhost", ("vllm", "serve", label), ())
    return Deployment((label,), (spec,), "n0", placement=Placement(((node, (device,)),)))


def _slot(label: str, *devices: tuple[str, int]) -> Slot:
    return Slot(_deployment(label), frozenset(devices))


def test_a_slot_starts_only_on_devices_nobody_running_or_ahead_of_it_wants():
    a, b, c = _slot("a", ("n0", 0)), _slot("b", ("n0", 0), ("n1", 0)), _slot("c", ("n1", 0))
    assert startable([a, b, c], frozenset()) == 0
    # a runs on n0/0: b waits for it, and c may not overtake b on n1/0, where b comes first
    assert startable([b, c], frozenset({("n0", 0)})) is None
    d = _slot("d", ("n1", 1))
    assert startable([b, c, d], frozenset({("n0", 0)})) == 2  # backfills on a device nobody ahead wants


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
    assert {next(iter(s.devices))[0] for s in slots[:2]} == {"core0", "core1"}  # side by side
    assert slots[0].deployment.placement is not None and slots[0].devices


def test_runs_at_most_n_at_once_and_every_slot_once():
    slots = [_slot(f"d{i}", (f"n{i}", 0)) for i in range(5)]
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

    run_parallel(slots, execute, lambda: None, 2)
    assert sorted(seen) == [f"d{i}" for i in range(5)] and peak[0] == 2


def test_a_fault_in_one_deployment_stops_every_one_and_is_raised():
    stopped = threading.Event()

    def execute(d: Deployment) -> None:
        if d.case_ids == ("bad",):
            raise RuntimeError("a fault of ppconf")
        stopped.wait(10)  # a live deployment: it ends only once stop_all took its groups down
        raise KeyboardInterrupt

    slots = [_slot("good", ("n0", 0)), _slot("bad", ("n1", 0))]
    with pytest.raises(RuntimeError, match="a fault of ppconf"):
        run_parallel(slots, execute, stopped.set, 2)
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
        run_parallel([_slot("a", ("n0", 0)), _slot("b", ("n1", 0))], execute, stopped.set, 2)
    assert stopped.is_set()

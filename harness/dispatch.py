"""Running a run's deployments side by side, in the schedule's order (``ppconf run --max-parallel N``).

The schedule (``harness.plan.schedule``) places every deployment on the cluster's nodes and
devices and orders them, longest first, with backfilling. Here that order is kept while the real
durations differ from the estimates (``schedule.Backfill``): whenever a deployment ends, the
waiting ones are visited in the schedule's order, on the devices actually free. The first (the
head) starts as soon as it fits — on its scheduled devices when those are free, else on others
of the same shape; a later one starts before it only where it cannot delay the head's
reservation. At most N run at once. Device leases still guard every launch, so a reference
launched after its case, or another ppconf on the same nodes, only ever waits.

Results are appended by one writer as each case finishes (``SuiteRun.record`` holds a lock).
Ctrl-C, SIGTERM or a fault of ppconf in any deployment stops every live process group, and a
case interrupted that way is not recorded: a resume runs it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from harness.launch import Deployment, Placement
from harness.plan.cluster import Cluster
from harness.plan.schedule import Backfill, Need, Schedule, duration_of, need_of, simulate

log = logging.getLogger(__name__)

STOP_WAIT_S = 120.0  # how long the threads get to unwind once every group was stopped


@dataclass(frozen=True)
class Slot:
    """One deployment, what it needs, how long it is expected to take, and where the schedule put
    it (None: the schedule could not place it, and its launch says why)."""

    deployment: Deployment
    need: Need
    seconds: float
    placement: Placement | None

    @property
    def label(self) -> str:
        return self.deployment.case_ids[0]


def scheduled(deployments: Sequence[Deployment], cluster: Cluster, durations: dict[str, float]) -> list[Slot]:
    """The deployments in the schedule's order, each with its scheduled placement; one the
    schedule cannot place comes last with none."""
    by_key = {d.key: d for d in deployments}
    plan: Schedule = simulate(deployments, cluster, durations)
    slots = [Slot(by_key.pop(e.need.key), e.need, e.duration, e.placement) for e in plan.entries]
    for d in by_key.values():
        need = need_of(d)
        slots.append(Slot(d, need, duration_of(need, durations)[0], None))
    return slots


def run_parallel(
    slots: Sequence[Slot],
    cluster: Cluster,
    execute: Callable[[Deployment], object],
    stop_all: Callable[[], None],
    max_parallel: int,
    running_changed: Callable[[list[str]], None] = lambda labels: None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Execute every slot; returns when all are done. Ctrl-C (KeyboardInterrupt) or an exception
    raised by ``execute`` stops everything (``stop_all``) and is raised here once the threads
    unwound. A slot the schedule could not place is launched first, on its own placement: it
    fails at once, saying why."""
    unplaced = [s for s in slots if s.placement is None]
    backfill = Backfill(cluster, [(s.need, s.seconds, s.placement) for s in slots if s.placement is not None])
    by_key = {s.need.key: s for s in slots}
    running: dict[Future[object], Slot] = {}
    pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="ppconf-deployment")
    fault: BaseException | None = None
    t0 = clock()
    try:
        while unplaced or backfill.waiting or running:
            started: list[Slot] = []
            while unplaced and len(running) < max_parallel:
                slot = unplaced.pop(0)
                running[pool.submit(execute, slot.deployment)] = slot
                started.append(slot)
            if not unplaced:
                limit = max_parallel - (len(running) - len(backfill.running))  # what unplaced ones leave
                for need, placement in backfill.start(clock() - t0, limit):
                    slot = by_key[need.key]
                    running[pool.submit(execute, replace(slot.deployment, placement=placement))] = slot
                    started.append(slot)
            if started:
                running_changed([s.label for s in running.values()])
            if not running:  # cannot happen: whatever waits fits the cluster once it is empty
                raise AssertionError("nothing running and nothing may start")
            done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                slot = running.pop(future)
                if slot.need.key in backfill.running:
                    backfill.done(slot.need.key)
                future.result()  # a fault of ppconf: stop everything
            if done:
                running_changed([s.label for s in running.values()])
    except BaseException as err:  # noqa: BLE001 — Ctrl-C, SIGTERM (as KeyboardInterrupt) or a fault
        fault = err
        stop_all()
        wait(list(running), timeout=STOP_WAIT_S)
        raise
    finally:
        pool.shutdown(wait=fault is None, cancel_futures=True)

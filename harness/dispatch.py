"""Running a run's deployments side by side, in the schedule's order (``ppconf run --max-parallel N``).

The schedule (``harness.plan.schedule``) places every deployment on the cluster's nodes and
devices and orders them, longest first, with backfilling. Here that is executed: each deployment
is launched on its scheduled placement from a thread of its own, as soon as

- fewer than N deployments are running,
- no running deployment holds any of its devices, and
- no deployment ahead of it in the schedule, not started yet, wants any of them

(so every device serves its deployments in the schedule's order, and a wide gang is not starved
by small ones arriving after it). Real durations differ from the estimates; the order holds.
Device leases still guard every launch, so a reference launched after its case, or another
ppconf on the same nodes, only ever waits.

Results are appended by one writer as each case finishes (``SuiteRun.record`` holds a lock).
Ctrl-C, SIGTERM or a fault of ppconf in any deployment stops every live process group, and a
case interrupted that way is not recorded: a resume runs it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from harness.launch import Deployment
from harness.plan.cluster import Cluster
from harness.plan.schedule import Schedule, simulate

log = logging.getLogger(__name__)

STOP_WAIT_S = 120.0  # how long the threads get to unwind once every group was stopped


@dataclass(frozen=True)
class Slot:
    """One deployment at its scheduled place."""

    deployment: Deployment
    devices: frozenset[tuple[str, int]]

    @property
    def label(self) -> str:
        return self.deployment.case_ids[0]


def scheduled(deployments: Sequence[Deployment], cluster: Cluster, durations: dict[str, float]) -> list[Slot]:
    """The deployments in the schedule's order, each on its scheduled placement; one the
    schedule cannot place keeps its own (its launch then says why it cannot run)."""
    by_key = {d.key: d for d in deployments}
    plan: Schedule = simulate(deployments, cluster, durations)
    slots = []
    for entry in plan.entries:
        d = replace(by_key.pop(entry.need.key), placement=entry.placement)
        slots.append(Slot(d, frozenset((n, dev) for n, devs in entry.placement.nodes for dev in devs)))
    for d in by_key.values():
        held = d.placement.nodes if d.placement else ()
        slots.append(Slot(d, frozenset((n, dev) for n, devs in held for dev in devs)))
    return slots


def startable(pending: Sequence[Slot], busy: frozenset[tuple[str, int]]) -> int | None:
    """The index of the first pending slot that may start now, or None."""
    wanted: set[tuple[str, int]] = set()
    for i, slot in enumerate(pending):
        if not slot.devices & busy and not slot.devices & wanted:
            return i
        wanted |= slot.devices
    return None


def run_parallel(
    slots: Sequence[Slot],
    execute: Callable[[Deployment], object],
    stop_all: Callable[[], None],
    max_parallel: int,
    running_changed: Callable[[list[str]], None] = lambda labels: None,
) -> None:
    """Execute every slot; returns when all are done. Ctrl-C (KeyboardInterrupt) or an exception
    raised by ``execute`` stops everything (``stop_all``) and is raised here once the threads
    unwound."""
    pending = list(slots)
    running: dict[Future[object], Slot] = {}
    pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="ppconf-deployment")
    fault: BaseException | None = None
    try:
        while pending or running:
            changed = False
            while len(running) < max_parallel:
                busy = frozenset().union(*(s.devices for s in running.values()))
                i = startable(pending, busy)
                if i is None:
                    break
                slot = pending.pop(i)
                running[pool.submit(execute, slot.deployment)] = slot
                changed = True
            if changed:
                running_changed([s.label for s in running.values()])
            done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                running.pop(future)
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

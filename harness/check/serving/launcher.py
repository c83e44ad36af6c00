"""Launching one deployment on leased devices, and taking it down again whatever happens.

Cases and references go through the same door: the devices are leased (all nodes or none), the
plan is made again on the devices the lease gave and on free ports, the serving launches load
the stage probe, and the process groups are written to ``live.json`` while they run, so a resume
after ppconf itself was killed can stop them.

Several deployments may be live at once (``ppconf run --max-parallel``), each served from its own
thread: ``live.json`` then holds the groups of all of them, and ``stop_all`` takes every one down
(Ctrl-C, or a fault of ppconf in any of them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from harness import safe_write
from harness.check.serving import modelinfo
from harness.check.serving.instrument import instrument
from harness.check.serving.live import LiveDeployment, fresh_ports
from harness.launch import Deployment, Placement
from harness.plan.cluster import Cluster
from harness.plan.launch import Ports
from harness.plan.pd import shared_stores
from harness.redact import Redactor
from runners.lease import POLL_MAX_S, POLL_START_S, Gang, Leases
from runners.reaper import MARKER

log = logging.getLogger(__name__)
LIVE = "live.json"  # process groups of the deployment being checked
LEASE_WAIT_S = 6 * 3600.0  # how long a launch waits for devices that other ppconf processes hold


class Launcher:
    def __init__(
        self,
        cluster: Cluster,
        run_dir: Path,
        request_timeout_s: float,
        redactor: Redactor | None = None,
        stack: Callable[[str], Mapping[str, str]] | None = None,
    ):
        self.cluster = cluster
        self.run_dir = run_dir
        self.request_timeout_s = request_timeout_s
        self.leases = Leases()
        self.launches = 0
        self.stopping = threading.Event()  # set by stop_all: nothing launches any more
        self._lock = threading.Lock()
        self._live: dict[int, LiveDeployment] = {}
        # groups a killed ppconf left that could not be stopped yet: kept in live.json beside ours
        self.unreaped: list[object] = []
        # every secret a launch is given is learnt here, and scrubbed from its logs once it stopped
        self.redactor = redactor or Redactor().learn_env(os.environ)
        # the versions probed on a node: vLLM's model-info answers are kept between runs per stack
        self.stack = stack
        self.vllm_cache = run_dir / "vllm-cache"

    def extra_env(self) -> dict[str, str]:
        return {
            "VLLM_CACHE_ROOT": str(self.vllm_cache),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            MARKER: str(self.run_dir.resolve()),  # the reaper finds them whichever way the run is named
        }

    def ports(self) -> Ports:
        return fresh_ports()

    @contextlib.contextmanager
    def leased(self, placement: Placement | None, note: str, prefer: Sequence[str] = ()) -> Iterator[Placement | None]:
        """The devices of ``placement``'s nodes, any free ones of the same count, held until exit.

        ``prefer``: a one-node deployment may run on any node that holds it, these first (a
        reference after its case: the devices the case just gave back)."""
        if placement is None:
            yield None
            return
        candidates = {n.name: n.devices for n in self.cluster.nodes}
        with self._acquire(placement, note, candidates, prefer) as gang:
            yield gang.placement()

    def _acquire(
        self, placement: Placement, note: str, candidates: dict[str, list[int]], prefer: Sequence[str]
    ) -> Gang:
        """Poll for the lease in short attempts, so ``stop_all`` is seen while waiting."""
        nodes = [placement]
        if prefer and len(placement.nodes) == 1:
            (home, devices) = placement.nodes[0]
            wanted = len(devices)
            order = [*dict.fromkeys([*prefer, home, *candidates])]
            nodes = [
                Placement(((name, tuple(candidates[name][:wanted])),))
                for name in order
                if len(candidates.get(name, ())) >= wanted
            ] or nodes
        deadline = time.monotonic() + LEASE_WAIT_S
        pause = POLL_START_S
        while True:
            if self.stopping.is_set():
                raise KeyboardInterrupt
            for option in nodes:
                try:
                    return self.leases.acquire_placement(option, 0, note=note, candidates=candidates)
                except TimeoutError:
                    if time.monotonic() >= deadline and option is nodes[-1]:
                        raise
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, POLL_MAX_S)

    @contextlib.contextmanager
    def serve(
        self,
        replan: Callable[[Placement | None, Ports], Deployment],
        placement: Placement | None,
        note: str,
        log_dir: Path,
        prefer: Sequence[str] = (),
    ) -> Iterator[LiveDeployment]:
        """Lease, plan on what the lease gave, launch; stop every process group on the way out."""
        with self.leased(placement, note, prefer) as leased:
            d = instrument(replan(leased, self.ports()))
            kept = modelinfo.store_for(self.stack(d.launches[0].node)) if self.stack and d.launches else None
            modelinfo.seed(self.vllm_cache, kept)
            live = LiveDeployment(d, log_dir, self.extra_env(), self.request_timeout_s, self.cluster)
            with self._lock:
                if self.stopping.is_set():
                    live.stop()  # nothing started yet: this closes its client
                    raise KeyboardInterrupt
                self.launches += 1
                self._live[id(live)] = live
            log.info("launching %s: %s", note, "; ".join(f"{s.name} on {s.node}" for s in d.launches))
            try:
                try:
                    live.start()
                finally:
                    self._write_live()
                if self.stopping.is_set():  # stop_all ran while these processes were starting
                    raise KeyboardInterrupt
                yield live
            finally:
                live.stop()
                with self._lock:
                    self._live.pop(id(live), None)
                self._write_live()
                modelinfo.keep(self.vllm_cache, kept)
                for node, store in shared_stores(live.deployment).items():
                    if self.cluster.node(node).reach == "local":  # KV a P/D pair left in its store
                        shutil.rmtree(store, ignore_errors=True)
                self.redactor.learn(live.deployment)
                for path in live.log_paths.values():
                    self.redactor.scrub_file(path)
                log.info("stopped %s after %.0f s", note, live.elapsed())

    def _write_live(self) -> None:
        """``live.json``: the groups of every live deployment and those not reaped yet (none: no file)."""
        with self._lock:
            groups = [*self.unreaped, *(g for live in self._live.values() for g in live.groups())]
            if groups:
                safe_write.write_json(self.run_dir / LIVE, groups)
            else:
                forget_left_behind(self.run_dir)

    def stop_all(self) -> None:
        """Stop every live deployment and launch nothing more (their threads then unwind)."""
        self.stopping.set()
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            live.stop()


def left_behind(run_dir: Path) -> list[object]:
    """The process groups a killed ppconf recorded as live (the record stays until they are
    stopped: ``forget_left_behind``)."""
    path = run_dir / LIVE
    if not path.exists():
        return []
    try:
        groups = json.loads(path.read_text() or "[]")
    except ValueError:
        groups = []
    return groups if isinstance(groups, list) else []


def forget_left_behind(run_dir: Path) -> None:
    (run_dir / LIVE).unlink(missing_ok=True)

"""Launching one deployment on leased devices, and taking it down again whatever happens.

Cases and references go through the same door: the devices are leased (all nodes or none), the
plan is made again on the devices the lease gave and on free ports, the serving launches load
the stage probe, and the process groups are written to ``live.json`` while they run, so a resume
after ppconf itself was killed can stop them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.check.serving.instrument import instrument
from harness.check.serving.live import LiveDeployment, fresh_ports
from harness.plan.cluster import Cluster
from harness.plan.launch import Deployment, Placement, Ports
from harness.plan.lease import Leases
from harness.results.redact import Redactor
from harness.results.store import write_json_atomic
from runners.reaper import MARKER

log = logging.getLogger(__name__)
LIVE = "live.json"  # process groups of the deployment being checked
LEASE_WAIT_S = 6 * 3600.0  # how long a launch waits for devices that other ppconf processes hold


class Launcher:
    def __init__(self, cluster: Cluster, run_dir: Path, request_timeout_s: float, redactor: Redactor | None = None):
        self.cluster = cluster
        self.run_dir = run_dir
        self.request_timeout_s = request_timeout_s
        self.leases = Leases()
        self.launches = 0
        # groups a killed ppconf left that could not be stopped yet: kept in live.json beside ours
        self.unreaped: list[object] = []
        # every secret a launch is given is learnt here, and scrubbed from its logs once it stopped
        self.redactor = redactor or Redactor().learn_env(os.environ)

    def extra_env(self) -> dict[str, str]:
        return {
            "VLLM_CACHE_ROOT": str(self.run_dir / "vllm-cache"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            MARKER: str(self.run_dir.resolve()),  # the reaper finds them whichever way the run is named
        }

    def ports(self) -> Ports:
        return fresh_ports()

    @contextlib.contextmanager
    def leased(self, placement: Placement | None, note: str) -> Iterator[Placement | None]:
        """The devices of ``placement``'s nodes, any free ones of the same count, held until exit."""
        if placement is None:
            yield None
            return
        candidates = {n.name: n.devices for n in self.cluster.nodes}
        with self.leases.acquire_placement(placement, LEASE_WAIT_S, note=note, candidates=candidates) as gang:
            yield gang.placement()

    @contextlib.contextmanager
    def serve(
        self,
        replan: Callable[[Placement | None, Ports], Deployment],
        placement: Placement | None,
        note: str,
        log_dir: Path,
    ) -> Iterator[LiveDeployment]:
        """Lease, plan on what the lease gave, launch; stop every process group on the way out."""
        with self.leased(placement, note) as leased:
            d = instrument(replan(leased, self.ports()))
            live = LiveDeployment(d, log_dir, self.extra_env(), self.request_timeout_s, self.cluster)
            self.launches += 1
            log.info("launching %s: %s", note, "; ".join(f"{s.name} on {s.node}" for s in d.launches))
            try:
                try:
                    live.start()
                finally:
                    write_json_atomic(self.run_dir / LIVE, [*self.unreaped, *live.groups()])
                yield live
            finally:
                live.stop()
                if self.unreaped:
                    write_json_atomic(self.run_dir / LIVE, self.unreaped)
                else:
                    forget_left_behind(self.run_dir)
                self.redactor.learn(live.deployment)
                for path in live.log_paths.values():
                    self.redactor.scrub_file(path)
                log.info("stopped %s after %.0f s", note, live.elapsed())


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

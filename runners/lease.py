"""Device leases: concurrent cases never share a device (an NPU id, or a CPU core on the cpu platform).
Run time, beside the runners that start what holds them; which devices to take is the plan's
(``harness.plan.devices``).

Every (node, device) pair has one lock file in a lease directory shared by all ppconf processes
on the controller host — ``ppconf run`` instances, pytest-xdist workers, a developer's second
shell (controllers on several hosts must share the directory on a filesystem whose flock is
real across hosts, or lease from one host). Holding the device means holding ``fcntl.flock`` on
its file. The kernel drops a flock when the last descriptor of its open file goes away, so a
holder that crashes, or is SIGKILLed, frees its devices with no clean-up step and no stale-lock
heuristics (pid files can lie; a flock cannot outlive its process).

Leasing only ever *tries* a lock (``LOCK_NB``) and never waits while holding another one, so two
processes cannot deadlock; a partial grab is given back whole before the next attempt, with a
jittered back-off so competing acquirers do not keep colliding in step.

Lock files are never deleted: unlinking one while another process has it open would let two
holders lock two different inodes under the same name.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from harness.launch import Placement
from harness.plan.devices import device_ranges, pick_devices

POLL_START_S = 0.02
POLL_MAX_S = 0.5


def default_root() -> Path:
    """``$PPCONF_LEASES``, else ``$PPCONF_CACHE/leases``, else ``~/.cache/ppconf/leases``."""
    if os.environ.get("PPCONF_LEASES"):
        return Path(os.environ["PPCONF_LEASES"])
    base = os.environ.get("PPCONF_CACHE") or Path.home() / ".cache" / "ppconf"
    return Path(base) / "leases"


def _safe(name: str) -> str:
    """A node name as one path component (names come from inventories, not from us)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", lambda m: f"%{ord(m.group()):02x}", name)
    return "%" + safe if safe.strip(".") == "" else safe  # never "", "." or ".."


class Lease:
    """Devices of one node, held until ``release()`` (or the end of a ``with`` block, or death)."""

    def __init__(self, node: str, held: dict[int, int]):
        self.node = node
        self._held = held  # device -> open descriptor holding its flock

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted(self._held))

    @property
    def released(self) -> bool:
        return not self._held

    def release(self) -> None:
        """Idempotent. Closing the descriptor drops the lock; the explicit unlock comes first so a
        descriptor some forked child still shares cannot keep the device."""
        held, self._held = self._held, {}
        for fd in held.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.node!r}, {device_ranges(self.devices) if self._held else 'released'})"


class Gang:
    """Leases taken together for one deployment (all of its nodes or none), in request order."""

    def __init__(self, leases: list[Lease]):
        self.leases = leases

    def __iter__(self) -> Iterator[Lease]:
        return iter(self.leases)

    def __len__(self) -> int:
        return len(self.leases)

    def __getitem__(self, i: int) -> Lease:
        return self.leases[i]

    def placement(self) -> Placement:
        """The leased devices as a plan Placement (node rank i = request i), ready for plan()."""
        return Placement(tuple((l.node, l.devices) for l in self.leases))

    def release(self) -> None:
        for lease in self.leases:
            lease.release()

    def __enter__(self) -> Gang:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Gang({self.leases!r})"


Request = tuple[str, int, Sequence[int]]  # (node, devices wanted, candidate device ids)


class Leases:
    def __init__(self, root: Path | str | None = None, holder: str = ""):
        """``holder`` is written into each lock file it takes (with pid and host), so a timeout
        can say who has the devices."""
        self.root = Path(root) if root is not None else default_root()
        self.holder = holder

    def _path(self, node: str, device: int) -> Path:
        return self.root / _safe(node) / f"device-{int(device)}.lock"

    def _try(self, node: str, device: int, note: str) -> int | None:
        """Lock one device without waiting: its descriptor, or None when someone holds it."""
        path = self._path(node, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_CLOEXEC (Python's default): a vLLM server started later must not inherit the lock,
        # or the device would stay leased after ppconf released it.
        # O_NOFOLLOW: the lock file is truncated and written below, never a file a link points at.
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise OSError(err.errno, f"the device lock {path} is a link; ppconf never locks through one") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        try:
            # who holds it, for the error another process may print; a lock without it is still a lock
            os.ftruncate(fd, 0)
            who = " ".join(w for w in (f"pid={os.getpid()}", f"host={socket.gethostname()}", self.holder, note) if w)
            os.pwrite(fd, (who + "\n").encode(), 0)
        except OSError:
            pass
        return fd

    def _grab(self, node: str, wanted: int, candidates: Sequence[int], note: str) -> tuple[Lease | None, list[int]]:
        """One attempt: lock every free candidate, keep the best ``wanted``, give back the rest.
        Returns (lease or None, the devices seen free)."""
        got: dict[int, int] = {}
        for device in dict.fromkeys(candidates):  # de-duplicated, order kept
            fd = self._try(node, device, note)
            if fd is not None:
                got[device] = fd
        free = list(got)
        keep = set(pick_devices(free, wanted)) if len(free) >= wanted else set()
        for device in [d for d in got if d not in keep]:
            Lease(node, {device: got.pop(device)}).release()
        return (Lease(node, got) if keep else None), free

    def holders(self, node: str, devices: Sequence[int]) -> dict[int, str]:
        """What each device's lock file says about its last holder (diagnostics only)."""
        out = {}
        for d in devices:
            try:
                text = self._path(node, d).read_text().strip()
            except OSError:
                continue
            if text:
                out[d] = text
        return out

    def acquire(
        self, node: str, devices_wanted: int, candidates: Sequence[int], timeout_s: float, note: str = ""
    ) -> Lease:
        """Lease ``devices_wanted`` of ``candidates`` on ``node``, polling until they are free.

        Raises TimeoutError naming the node, the wanted count and who holds what, and ValueError
        at once when the candidates could never hold the count. ``timeout_s`` of 0 makes exactly
        one attempt.
        """
        return self.acquire_many([(node, devices_wanted, candidates)], timeout_s, note)[0]

    def acquire_many(self, requests: Sequence[Request], timeout_s: float, note: str = "") -> Gang:
        """All the requests or none: the gang lease of a multi-node or P/D deployment.

        Requests are tried in one global order (node name, then request order), each without
        waiting; if any cannot be met, everything taken in this attempt is given back before
        the back-off. No process ever waits while holding a device, so there is no deadlock, and a
        half-leased gang never blocks another deployment for longer than one attempt.
        Two requests may name the same node (a P/D pair packed on one host): they get disjoint
        devices, since this process's own locks exclude it like anyone else's.
        """
        for node, wanted, candidates in requests:
            if wanted < 1:
                raise ValueError(f"node '{node}': a lease needs at least one device, not {wanted}")
            if wanted > len(set(candidates)):
                raise ValueError(
                    f"node '{node}' has {len(set(candidates))} candidate device(s) "
                    f"({device_ranges(list(candidates))}); {wanted} can never be leased there"
                )
        order = sorted(range(len(requests)), key=lambda i: (requests[i][0], i))
        deadline = time.monotonic() + timeout_s
        pause = POLL_START_S
        while True:
            taken: dict[int, Lease] = {}
            short: tuple[int, list[int]] | None = None
            for i in order:
                node, wanted, candidates = requests[i]
                lease, free = self._grab(node, wanted, candidates, note)
                if lease is None:
                    short = (i, free)
                    break
                taken[i] = lease
            if short is None:
                return Gang([taken[i] for i in range(len(requests))])
            for lease in taken.values():
                lease.release()
            if time.monotonic() >= deadline:
                i, free = short
                node, wanted, candidates = requests[i]
                busy = [d for d in candidates if d not in free]
                who = self.holders(node, busy)
                held = "; ".join(f"{d}: {w}" for d, w in sorted(who.items())[:4])
                gang = f" (gang of {len(requests)} node leases: all or none)" if len(requests) > 1 else ""
                raise TimeoutError(
                    f"no device lease on node '{node}' within {timeout_s:g} s: wanted {wanted} device(s) of "
                    f"{device_ranges(list(candidates))}, {len(free)} free ({device_ranges(free)}){gang}"
                    + (f"; held by {held}" if held else "")
                )
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())) * random.uniform(0.5, 1.0))
            pause = min(pause * 2, POLL_MAX_S)

    def acquire_placement(
        self,
        placement: Placement,
        timeout_s: float,
        note: str = "",
        candidates: Mapping[str, Sequence[int]] | None = None,
    ) -> Gang:
        """Gang-lease as many devices per node rank as ``placement`` uses, on the same nodes.

        Candidates default to the placement's own devices (exactly those); pass a node's whole
        device list in ``candidates`` to let the lease pick any free ones, then re-plan with
        ``gang.placement()``.
        """
        requests = [(node, len(devices), (candidates or {}).get(node, devices)) for node, devices in placement.nodes]
        return self.acquire_many(requests, timeout_s, note)

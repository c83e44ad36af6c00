"""One ppconf at a time per run directory.

A run (``ppconf run``, ``--resume``, or a pytest session) holds an exclusive ``flock`` on
``RUN_DIR/run.lock`` for as long as it runs; the kernel drops it when the holder dies, even by
SIGKILL, so a stale lock never blocks a resume. A second ppconf on the same directory would
reap the first one's servers and append to its results, so it is refused. A run recorded in
run.json by a process that is still alive (a ppconf from before this lock existed) is refused
too. The pid is checked only on the host run.json names with it (a run directory on a shared
file system may have been started elsewhere, where the same number is another process): a run
of another host is named in a warning, not probed here.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOCK = "run.lock"
log = logging.getLogger(__name__)


class RunBusy(Exception):
    """Another live ppconf holds the run directory."""


def _process_started(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds), or None if there is no such process here."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(float(l.split()[1]) for l in Path("/proc/stat").read_text().splitlines() if l.startswith("btime"))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the parenthesised command name
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def foreign_owner(meta: dict[str, Any]) -> str | None:
    """The ppconf process run.json names when it ran on another host (which no check here can
    see), as "process PID on HOST"; None when it ran on this one, or run.json names no host."""
    host, pid = meta.get("host"), meta.get("pid")
    if not isinstance(host, str) or host == socket.gethostname() or not isinstance(pid, int):
        return None
    return f"process {pid} on {host}"


def live_owner(meta: dict[str, Any]) -> int | None:
    """The pid run.json names if that process is alive on this host and is the one that started
    the run (it was running when the run started: a reused pid started later), else None. A pid
    of another host is never looked up here (``foreign_owner``)."""
    pid = meta.get("pid")
    if not isinstance(pid, int) or pid == os.getpid() or pid <= 0 or foreign_owner(meta):
        return None
    began = _process_started(pid)
    if began is None:
        return None
    try:
        started = datetime.datetime.fromisoformat(meta["started"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return pid
    return pid if began <= started + 1 else None


@contextmanager
def run_lock(run_dir: Path, meta: dict[str, Any] | None = None) -> Iterator[None]:
    """Hold ``run_dir`` for the whole ``with`` block, or raise RunBusy naming who holds it.
    ``meta``: the run's run.json, when it has one, for the liveness check of its pid."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    try:  # never through a link planted in the run directory
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        why = "a symbolic link; ppconf locks no file through it" if err.errno == errno.ELOOP else err.strerror
        raise RunBusy(f"{path} is not a lock ppconf can hold: {why}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text(errors="replace").strip() or "another process"
            raise RunBusy(
                f"{run_dir} is in use by a running ppconf ({holder}); wait for it to finish, or stop it, then resume"
            ) from None
        pid = live_owner(meta or {})
        elsewhere = foreign_owner(meta or {})
        if elsewhere:
            log.warning(
                "%s was started by ppconf %s, which cannot be checked from %s: if it is still running "
                "there, stop it (run.lock keeps it out only where the file system shares locks)",
                run_dir,
                elsewhere,
                socket.gethostname(),
            )
        if pid is not None:
            raise RunBusy(
                f"{run_dir} belongs to ppconf process {pid}, which is still running; "
                f"wait for it to finish, or stop it, then resume"
            )
        os.ftruncate(fd, 0)
        # who holds it, for the refusal message; never argv, which may carry a secret
        os.write(
            fd,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                }
            ).encode(),
        )
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays, so no holder ever locks an unlinked inode

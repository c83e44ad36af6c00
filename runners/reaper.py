"""Stops process groups a killed ppconf left behind, on whichever node they run.

Self-contained on purpose (standard library only, no ppconf imports): ``runners.leftovers`` calls
it for this host and sends this file's text to another node's Python as a ``-c`` program, so the
same code reaps on every node.

    python3 reaper.py RUN_DIR PGID...     # prints the reaped group ids as a JSON list

A group is signalled only when every member carries ``PPCONF_RUN_DIR=RUN_DIR`` in its
environment: ppconf puts that mark on every launch of a run, so a group id that has since been
reused by anything else (another run, another user's program) is left alone. The mark and RUN_DIR
are compared as resolved paths (a relative mark against the member's own working directory): a run
resumed by its absolute path, or from another directory, still finds the groups it left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

MARKER = "PPCONF_RUN_DIR"


def group_members(pgid: int) -> list[int]:
    """The live members of a group (a zombie has exited: it waits only for its parent to notice)."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getpgid(int(name)) == pgid and not _zombie(int(name)):
                    members.append(int(name))
            except (ProcessLookupError, PermissionError):
                continue
    return members


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def started_by(pid: int, run_dir: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    prefix = f"{MARKER}=".encode()
    marks = [e[len(prefix) :].decode(errors="replace") for e in env if e.startswith(prefix)]
    want = os.path.realpath(run_dir)
    return any(m == run_dir or os.path.realpath(os.path.join(cwd, m)) == want for m in marks)


def reap(run_dir: str, pgids: list[int], grace_s: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, each group of ``pgids`` that this run started;
    returns the ids of the groups it stopped."""
    reaped = []
    for pgid in pgids:
        members = group_members(pgid)
        if not members or not all(started_by(pid, str(run_dir)) for pid in members):
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + grace_s
            while group_members(pgid) and time.monotonic() < end:
                time.sleep(0.1)
            if not group_members(pgid):
                break
        reaped.append(pgid)
    return reaped


if __name__ == "__main__":
    print(json.dumps(reap(sys.argv[1], [int(p) for p in sys.argv[2:]])))

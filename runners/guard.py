"""The leader of every local launch's process group: runs the launch and, when ppconf goes away
by any means (even SIGKILL) or asks it to stop, takes the whole group down.

    python -m runners.guard -- ARGV...

Exits with the launch's own exit status (128+N when a signal N ended it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_S = 10.0


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _group_alive_besides_me() -> bool:
    me, pgid = os.getpid(), os.getpgid(0)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getpgid(int(entry)) == pgid:
                    with open(f"/proc/{entry}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            return True
            except (OSError, ProcessLookupError):
                continue
    return False


def _take_group_down(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while time.monotonic() < end and _group_alive_besides_me():
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)  # the group, this guard included


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python -m runners.guard -- ARGV...", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    _die_with_parent()
    signal.signal(signal.SIGTERM, _take_group_down)
    signal.signal(signal.SIGINT, _take_group_down)
    if os.getppid() == 1:  # ppconf died before the death signal was armed
        _take_group_down(signal.SIGTERM, None)
    child = subprocess.Popen(command)
    rc = child.wait()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

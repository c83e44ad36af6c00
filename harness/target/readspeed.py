"""How fast this host reads model files, measured once and kept for the schedule's estimates.

`ppconf schedule --measure-read DIR` reads the files under DIR (a model's checkpoint) from the
start, up to a bound, after asking the kernel to drop them from its page cache, and records the
rate for this host in ``$PPCONF_CACHE/read-bandwidth.json`` (default ``~/.cache/ppconf``). The
schedule gives that rate to the inventory's local nodes that declare no ``read_gb_s``; a declared
value always wins. A file the kernel kept cached anyway reads faster than the disk: the figure is
an upper bound on what a cold launch sees.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from harness import cache, json_input, safe_write

# What one measurement reads at most: enough to pass the disk's caches, short enough to run
# before a night.
LIMIT_BYTES = 4 * 1024**3
CHUNK = 16 * 1024**2


def cache_path() -> Path:
    return cache.home() / "read-bandwidth.json"


def measure(folder: Path, limit_bytes: int = LIMIT_BYTES) -> tuple[float, int]:
    """(GB/s, bytes read) over the regular files under ``folder``, largest first (a checkpoint's
    shards), never following a link. Raises ValueError when there is nothing to read."""
    files = sorted(
        (p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: -p.stat().st_size,
    )
    if not files or sum(p.stat().st_size for p in files) == 0:
        raise ValueError(f"{folder}: no file to read")
    done, started = 0, time.perf_counter()
    for path in files:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while done < limit_bytes:
                block = os.read(fd, min(CHUNK, limit_bytes - done))
                if not block:
                    break
                done += len(block)
        finally:
            os.close(fd)
        if done >= limit_bytes:
            break
    elapsed = max(time.perf_counter() - started, 1e-9)
    return done / elapsed / 1e9, done


def recorded() -> dict[str, float]:
    """The rates measured on each host, by host name ({} when none was)."""
    path = cache_path()
    if not path.is_file():
        return {}
    try:
        data = json_input.load(path)
    except (OSError, ValueError):
        return {}
    out = {}
    for host, entry in data.items() if isinstance(data, dict) else []:
        rate = entry.get("gb_s") if isinstance(entry, dict) else None
        if isinstance(rate, (int, float)) and 0 < rate < 1e4:
            out[str(host)] = float(rate)
    return out


def record(gb_s: float, folder: Path, nbytes: int) -> Path:
    """Keep this host's rate (replacing an earlier one of it)."""
    path = cache_path()
    data = {}
    if path.is_file():
        try:
            loaded = json_input.load(path)
            data = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            data = {}
    data[socket.gethostname()] = {
        "gb_s": round(gb_s, 3),
        "read_bytes": nbytes,
        "folder": str(folder),
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    return safe_write.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def this_host() -> float | None:
    return recorded().get(socket.gethostname())

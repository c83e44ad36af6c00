"""The runs of pytest-xdist's workers, merged into the one run they were parts of.

Each worker runs in BASE/gwN (workers sharing one directory would take each other's live servers
for ones a killed run left behind), so at the end of the session the controller writes BASE as
one run: every case's records from the first worker (in gwN order) that holds the case (a case
claimed unsupported is recorded by every worker, the same), log and repro references made
relative to BASE, run.json from the first worker naming the workers, and the report rendered.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness import safe_write

WORKER_DIR = re.compile(r"gw\d+")


def worker_dirs(base: Path) -> list[Path]:
    """BASE's worker run directories, gw0 first (gw10 after gw9)."""
    if not base.is_dir():
        return []
    found = [p for p in base.iterdir() if p.is_dir() and WORKER_DIR.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name[2:]))


def _rebased(record: dict[str, Any], worker: str) -> dict[str, Any]:
    """The record with the paths it names (relative to the worker's run) relative to BASE."""
    logs = (record.get("observation") or {}).get("logs") or {}
    for name, ref in logs.items():
        if isinstance(ref, str) and not Path(ref).is_absolute():
            logs[name] = f"{worker}/{ref}"
    repro = record.get("repro") or {}
    if isinstance(repro.get("dir"), str) and not Path(repro["dir"]).is_absolute():
        repro["dir"] = f"{worker}/{repro['dir']}"
    return record


def merge(base: Path, suite_dir: str = "") -> Path | None:
    """Write the merged run of the workers' ``suite_dir`` runs (their own directory when empty)
    into ``base / suite_dir``; None when no worker ran it, or when that directory holds a run that
    is not a merge."""
    from harness.results import store

    parts = [(w.name, w / suite_dir) for w in worker_dirs(base)]
    parts = [(name, d) for name, d in parts if (d / store.META).is_file() or (d / store.RESULTS).is_file()]
    if not parts:
        return None
    out = base / suite_dir
    if (out / store.META).is_file() and "workers" not in store.read_meta(out):
        return None  # a run of its own (`ppconf run`'s, resumed by the workers): never written over
    owner: dict[str, str] = {}
    lines: list[str] = []
    for name, run_dir in parts:
        for record in store.read_all(run_dir):  # checked as any run is, torn last lines dropped
            owner.setdefault(record.case, name)
            if owner[record.case] == name:
                lines.append(json.dumps(_rebased(record.to_json(), name), sort_keys=True) + "\n")
    meta = next((store.read_meta(d) for _, d in parts if (d / store.META).is_file()), {})
    meta["workers"] = [name for name, _ in parts]
    out.mkdir(parents=True, exist_ok=True)
    safe_write.write_text(out / store.RESULTS, "".join(lines))
    safe_write.write_json(out / store.META, meta)
    return out

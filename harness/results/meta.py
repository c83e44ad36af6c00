"""run.json: what a run was asked to do and on which stack, written when it starts.

A run is identified by ``run_id``, a UUID drawn when it starts: a copy of its directory is the
same run (the results index keys runs on it), and ``pid`` is the ppconf process on ``host``."""

from __future__ import annotations

import datetime
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from harness.results.result import Result
from harness.results.store import META, read_meta
from harness.safe_write import write_json


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def write_meta(run_dir: Path, suite: str, cluster: str, matrices: list[str], extra: dict[str, Any]) -> None:
    meta = {
        "run_id": str(uuid.uuid4()),
        "suite": suite,
        "cluster": cluster,
        "matrices": matrices,
        "started": now(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        **extra,
    }
    write_json(run_dir / META, meta)


def record_versions(run_dir: Path, versions: dict[str, dict[str, str]]) -> bool:
    """Keep the stack the run started on; a resume on another stack is recorded beside it.
    True when the stack changed since the run started."""
    meta = read_meta(run_dir)
    changed = "versions" in meta and meta["versions"] != versions
    if "versions" not in meta:
        meta["versions"] = versions
    elif changed:
        meta.setdefault("versions_on_resume", []).append({"at": now(), "versions": versions})
    write_json(run_dir / META, meta)
    return changed


def run_stack(meta: dict[str, Any], records: list[Result]) -> dict[str, dict[str, Any]]:
    """The stack a run started on (run.json's ``versions``), with the records' own for the nodes
    run.json does not name (a run without run.json still knows its stack from its records)."""
    versions = dict(meta.get("versions") or {})
    for r in records:
        for node, v in r.versions.items():
            versions.setdefault(node, v)
    return versions

"""The results store: one JSON line per finished case, appended as each case finishes.

A killed run loses nothing already written; a torn last line (the process died mid-write) is
detected and dropped, so ``--resume`` re-runs exactly the cases without a complete record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.results.redact import Redactor

RESULTS = "results.jsonl"


def append(run_dir: Path, record: dict[str, Any], redactor: Redactor | None = None) -> None:
    """Every string of the record (reasons, log lines, argv) enters the store with the run's
    secrets masked: the values ``redactor`` learned, and any secret-looking NAME=value or flag."""
    path = run_dir / RESULTS
    clean = (redactor or Redactor()).scrub(json.loads(json.dumps(record, default=str)))
    line = json.dumps(clean, sort_keys=True) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_all(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete record in file order, repeats included."""
    path = run_dir / RESULTS
    if not path.exists():
        return []
    records = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        if not raw.endswith("\n"):
            break  # torn final write
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "case" in rec:
            records.append(rec)
    return records


def read(run_dir: Path) -> list[dict[str, Any]]:
    """One record per case; when a case was run again the later record wins."""
    return list({r["case"]: r for r in read_all(run_dir)}.values())


def history(run_dir: Path) -> dict[str, list[str]]:
    """The outcomes each case had, in order, over every repeat in the run."""
    out: dict[str, list[str]] = {}
    for r in read_all(run_dir):
        out.setdefault(r["case"], []).append(r["outcome"])
    return out


def repair(run_dir: Path) -> bool:
    """Cut a torn last line off the file so later appends start on a fresh line."""
    path = run_dir / RESULTS
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(cut)
    return True


def write_json_atomic(path: Path, value: Any) -> None:
    """Write JSON so a reader never sees a torn file: a temporary file renamed over the target."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str))
    os.replace(tmp, path)

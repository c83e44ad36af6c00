"""What each workload phase cost on a real run: its wall time on the case and on its reference,
the requests it compared, and the figures it measured.

    .venv/bin/python bench/bench_phases.py RUN_DIR

Reads only the run directory (results.jsonl). A phase shared by several cases of one deployment
ran once; it is counted once per deployment.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.results import store as results  # noqa: E402


def main(run_dir: Path) -> int:
    records = results.read(run_dir)
    rows = {}
    for r in records:
        for p in r.observation.workload:
            rows.setdefault((r.plan_key, p.name), (r.case, p))
    if not rows:
        print(f"{run_dir}: no workload phases recorded")
        return 1
    print(f"{'case':46s} {'phase':14s} {'case s':>7s} {'ref s':>7s} {'compared':>22s} {'tok/s case/ref':>16s}")
    total_case = total_ref = 0.0
    for (_, _), (case, p) in sorted(rows.items(), key=lambda kv: (kv[1][0], kv[0][1])):
        total_case += p.wall_s or 0.0
        total_ref += p.reference_wall_s or 0.0
        tok = p.perf.get("output_tokens_per_s"), p.reference_perf.get("output_tokens_per_s")
        speed = f"{tok[0]:.0f}/{tok[1]:.0f}" if all(tok) else "-"
        compared = f"{p.exact}={p.tied}~{p.mismatched}x of {p.requests}"
        print(
            f"{case[:46]:46s} {p.name[:14]:14s} {p.wall_s or 0:7.2f} {p.reference_wall_s or 0:7.2f} "
            f"{compared:>22s} {speed:>16s}"
        )
    print(f"phases: {len(rows)}, on the cases {total_case:.1f} s, on their references {total_ref:.1f} s")
    print("(compared: exact=tied~mismatched x; a reference shared by several cases ran its phases once)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

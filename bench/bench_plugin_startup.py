"""What installing ppconf costs an unrelated pytest run: `pytest --collect-only` in an empty
project, with the plugin (loaded by its pytest11 entry point) and with `-p no:ppconf`.

    python bench/bench_plugin_startup.py [--runs 7]

prints the median wall and CPU time (user + system) of each and their differences; it exits 1
when the CPU time differs by more than the target (0.2 s): on an idle machine the two agree, and
on a shared one the CPU time is what the plugin adds, whatever else the cores are doing. Run it
with the interpreter that has ppconf installed (for a checkout not installed, put the checkout
on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.2


def collect_time(project: Path, extra: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one `pytest --collect-only` in ``project``."""
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=project, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each, alternating (default: 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ppconf-bench-") as tmp:
        project = Path(tmp)
        (project / "test_unrelated.py").write_text("def test_nothing():\n    pass\n")
        collect_time(project, [])  # warm the file cache and the .pyc files
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.runs):
            for with_ppconf, extra in ((True, []), (False, ["-p", "no:ppconf"])):
                times[with_ppconf].append(collect_time(project, extra))
    costs = []
    for i, what in enumerate(("wall", "CPU")):
        with_plugin = statistics.median(t[i] for t in times[True])
        without = statistics.median(t[i] for t in times[False])
        costs.append(with_plugin - without)
        print(
            f"pytest --collect-only, {what} time, median of {args.runs}: with ppconf {with_plugin:.3f} s, "
            f"-p no:ppconf {without:.3f} s, the plugin costs {costs[-1]:+.3f} s"
        )
    print(f"target: within {TARGET_S} s of CPU time")
    return 0 if costs[1] <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

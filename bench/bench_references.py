"""What references cost: reference launches of a real smoke run with a cold and then a warm
``--reference-cache``, and the simulated nightly's makespan with reference launches counted.

    .venv/bin/python bench/bench_references.py                 # the simulated nightly only
    .venv/bin/python bench/bench_references.py --real [CASE…]  # also two real smoke-cpu runs (minutes)

The goal: no reference launch on a warm cache with an unchanged stack, and a nightly makespan
within 1.10 of its lower bound with references counted. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.matrix.load import load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.plan.schedule import schedule_suite  # noqa: E402
from harness.results import store  # noqa: E402


def reference_sources(run_dir: Path) -> Counter[str]:
    """How each distinct reference of a run got its outputs: launched, or reused from the cache."""
    seen: dict[str, str] = {}
    for r in store.read(run_dir):
        ref = r.observation.reference or {}
        if ref.get("key") and ref.get("source") != "shared within this run":
            seen.setdefault(ref["key"], ref.get("source", "?"))
    return Counter(seen.values())


def real_runs(cases: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="ppconf-refcache-") as tmp:
        cache = Path(tmp) / "cache"
        for label in ("cold", "warm"):
            run_dir = Path(tmp) / label
            argv = [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                "--suite",
                "smoke-cpu",
                "--out",
                str(run_dir),
                "--reference-cache",
                str(cache),
            ] + [w for c in cases for w in ("--case", c)]
            t0 = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True)
            wall = time.monotonic() - t0
            sources = reference_sources(run_dir)
            line = next((x for x in done.stdout.splitlines() if "launches" in x), done.stdout.strip()[-200:])
            print(f"{label:5s} cache: {wall:6.0f} s wall; references {dict(sources)}; {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", action="store_true", help="also run smoke-cpu twice for real")
    parser.add_argument("cases", nargs="*", help="with --real: only these smoke-cpu cases")
    args = parser.parse_args()
    m = load_matrix()
    for suite, cluster in (("nightly-ascend", "a3-pd"), ("nightly-ascend", "a3-2node"), ("smoke-cpu", None)):
        s = schedule_suite(m, suite, load_cluster(cluster))
        print(
            f"{suite} on {s.cluster}: {s.launches} launches ({s.references} of references) for {s.cases} cases; "
            f"makespan {s.makespan / 3600:.2f} h, lower bound {s.lower_bound / 3600:.2f} h, ratio {s.ratio:.3f}; "
            f"without references {(s.makespan_without_references or 0) / 3600:.2f} h (x{s.references_cost or 1:.3f})"
        )
    if args.real:
        real_runs(args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())

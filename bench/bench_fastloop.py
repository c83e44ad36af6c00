"""The contributors' loop, measured: `pytest -m "not slow"` once, with its wall time, its CPU time
and the tests that cost the most.

    python bench/bench_fastloop.py [--top 25] [PYTEST_ARGS ...]

Runs from the repository root with this interpreter (the checkout first on PYTHONPATH) and prints
the wall time, the CPU time (user + system of the pytest process and every child it waited for:
the CLI runs and helper processes the tests start), the part of it spent collecting, and the
costliest tests by CPU time, each with the part of it spent in processes it started and its wall
time. It exits 1 when the loop's CPU time is over
TARGET_S or a test's is over TEST_TARGET_S. On a shared machine the wall times grow with whatever
else the cores do and the CPU times do not; a test whose wall time is far above its CPU time
waits (a sleep, a timeout, another process), so time it alone before believing either. A test's
figure holds its setup and teardown, so the first test of a session-scoped fixture carries it.
Extra arguments go to pytest (a file, `-k`, `-p no:randomly` ...).

The script is also the pytest plugin that times each test (`-p bench_fastloop`), so the figures
come from the run itself, not from a second one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 60.0
TEST_TARGET_S = 1.0
# where the plugin, inside pytest, writes what it measured (set by main for its child)
OUT_ENV = "PPCONF_BENCH_FASTLOOP_OUT"


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of the children it has waited for."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


_tests: dict[str, tuple[float, float, float]] = {}
_collected: list[float] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    (own, children), wall = _cpu(), time.perf_counter()
    try:
        return (yield)
    finally:
        own_after, children_after = _cpu()
        started = children_after - children
        _tests[item.nodeid] = (own_after - own + started, started, time.perf_counter() - wall)


def pytest_collection_finish(session: pytest.Session) -> None:
    _collected.append(sum(_cpu()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(OUT_ENV)
    if out:
        Path(out).write_text(json.dumps({"collect_cpu": _collected[0] if _collected else None, "tests": _tests}))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=25, help="how many of the costliest tests to print")
    args, extra = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tests.json"
        env = dict(os.environ, **{OUT_ENV: str(out)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "bench"), env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider"]
        cmd += ["-p", "bench_fastloop", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        if done.returncode != 0 or not out.exists():
            sys.stdout.write(done.stdout[-4000:] + done.stderr[-4000:])
            print(f"pytest exited {done.returncode}: the figures below are of a broken loop")
            if not out.exists():
                return 1
        measured = json.loads(out.read_text())
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    cpu = user + system
    tests = measured["tests"]
    print(f"pytest -m 'not slow' {' '.join(extra)}".rstrip() + f": {summary[0].strip('= ')}")
    print(f"wall time        {wall:7.1f} s")
    print(f"CPU time         {cpu:7.1f} s  (user {user:.1f} + system {system:.1f}; target {TARGET_S:.0f} s)")
    if measured["collect_cpu"] is not None:
        print(f"  collecting     {measured['collect_cpu']:7.1f} s  (start-up, imports of the test modules)")
    if env.get("PYTHONDONTWRITEBYTECODE"):
        print("  (PYTHONDONTWRITEBYTECODE is set: every process compiles what it imports, and pytest")
        print("   rewrites the asserts of every test module and plugin again, so all of it costs more)")
    in_tests = sum(c for c, _, _ in tests.values())
    in_children = sum(k for _, k, _ in tests.values())
    print(f"  in tests       {in_tests:7.1f} s  ({len(tests)} tests; {in_children:.1f} s in processes they started)")
    print(f"\ncostliest {args.top} tests by CPU time (of it in processes they started; wall time):")
    ranked = sorted(tests.items(), key=lambda kv: kv[1][0], reverse=True)
    for nodeid, (c, k, w) in ranked[: args.top]:
        print(f"  {c:6.2f} s CPU ({k:5.2f})  {w:6.2f} s wall  {nodeid}")
    over = [nodeid for nodeid, (c, _, _) in ranked if c > TEST_TARGET_S]
    for nodeid in over:
        print(f"over {TEST_TARGET_S:.0f} s of CPU: {nodeid}")
    return 0 if done.returncode == 0 and cpu <= TARGET_S and not over else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

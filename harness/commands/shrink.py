"""`ppconf shrink`: from a failing case of a run, the smallest case that still fails the same
way (``harness.shrink``). Each candidate is a real `ppconf run` of the smaller case, its matrix
a layer over the run's (``harness.shrink.overlay``), in a directory of its own under the
shrink's directory; the smallest failing run's repro bundle is copied to the shrink's ``repro/``."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.cases.expand import expand
from harness.check.verdict.repro import bundle_dir
from harness.commands.bisect import turn_lock
from harness.commands.common import CliError, matrix_of_run
from harness.results import store
from harness.shrink import overlay, search
from harness.shrink.failure import before_traffic, same_failure, signature
from harness.shrink.search import Candidate, Shrink, Try
from harness.stacks.stack import Stack

FAILING = ("FAIL", "BAD_REJECT", "UNEXPECTED_ACCEPT")


def _record(run_dir: Path, case: str):
    records = [r for r in store.read(run_dir) if r.case == case] if (run_dir / store.RESULTS).is_file() else []
    return records[-1] if records else None


def _oracle(args: argparse.Namespace, m, case, original: tuple[str, list[str]], directory: Path, stack: str | None):
    """Each candidate a real `ppconf run` of the smaller case, on the stack the case failed on."""

    def run(c: Candidate, n: int) -> Try:
        here = directory / f"try-{n}"
        shutil.rmtree(here, ignore_errors=True)  # an interrupted try's: run again from the start
        layer = overlay.write_layer(m, case, c.shape, here / "matrices")
        out, cid = here / "run", overlay.case_of(m, case, c.shape)
        argv = [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--suite",
            case.suite,
            "--case",
            cid,
            "-q",
            "--out",
            str(out),
        ]
        if stack:  # a run over stacks: its record is in the stack's own run directory
            argv += ["--stack", stack]
            out = out / Stack.parse(stack).id
        for root in (*m.roots, layer.parent):
            argv += ["--matrices", str(root)]
        if args.cluster:
            argv += ["--cluster", args.cluster]
        print(f"try {n}: {c.change} ({cid})", file=sys.stderr, flush=True)
        with turn_lock(args.lock):
            got = subprocess.run(argv, capture_output=True, text=True)
        r = _record(out, cid)
        same, why = same_failure(original, r)
        if r is None and got.returncode not in (0, 1):
            why = (got.stderr.strip().splitlines() or [f"ppconf run exited {got.returncode}"])[-1]
        print(f"try {n}: {'kept' if same else 'not kept'}: {why}", file=sys.stderr, flush=True)
        return Try(c.change, c.shape, same, why, str(out), c.dim, c.value)

    return run


def _repro(answer: dict[str, Any], directory: Path, cid: str) -> str | None:
    """The smallest failing run's repro bundle, copied to the shrink's ``repro/``."""
    src = bundle_dir(Path(answer["run_dir"]), cid)
    if not src.is_dir():
        return None
    dst = directory / "repro"
    shutil.rmtree(dst, ignore_errors=True)  # the last answer's copy, inside the shrink's own directory
    for f in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink() and p.name != safe_write.MANIFEST):
        to = dst / f.relative_to(src)
        safe_write.make_dir(to.parent)
        safe_write.write_bytes(to, f.read_bytes(), mode=f.stat().st_mode & 0o777)
    return str(dst)


def describe(answer: dict[str, Any]) -> str:
    lines = [f"shrink {answer['case']}: {answer['runs']} runs; fails the same way: {'; '.join(answer['signature'])}"]
    lines += [f"  kept: {change}" for change in answer["kept"]] or ["  nothing smaller fails the same way"]
    for p in answer["smallest"]["phases"]:
        sizes = ", ".join(f"{k} {p[k]}" for k in search.SIZES if k in p)
        lines.append(f"  phase {search.label(p)}{': ' + sizes if sizes else ''}")
    s = answer["smallest"]
    lines.append(f"  features {'+'.join(s['features']) or 'none'}, topology {s['topology']}, layers {s['layers']}")
    if answer.get("smallest_case"):
        lines.append(f"  smallest case: {answer['smallest_case']}")
    lines.append(f"  smallest run: {answer['run_dir']}")
    if answer.get("repro"):
        lines.append(f"  standalone repro: {answer['repro']} (commands.sh, then python3 client.py)")
    return "\n".join(lines)


def cmd_shrink(args: argparse.Namespace) -> int:
    run_dir = args.run_dir
    m = matrix_of_run(args, run_dir)
    r = _record(run_dir, args.case)
    if r is None:
        raise CliError(f"{run_dir}: no result for case {args.case!r}")
    if r.outcome.value not in FAILING:
        raise CliError(f"{args.case} is {r.outcome.value} in {run_dir}: shrink takes a {', '.join(FAILING)} case")
    case = next((c for c in expand(m, r.suite).cases if c.id == args.case), None)
    if case is None:
        raise CliError(f"{args.case}: not a case of suite {r.suite} in the run's matrices")
    try:
        shape = overlay.shape_of(m, case)
    except overlay.ShapeError as err:
        raise CliError(str(err)) from None
    sig = signature(r)
    directory = args.out or run_dir / "shrink" / bundle_dir(Path(), args.case).name
    needed = []
    if args.traffic_only:  # the other parts count as needed from the start
        needed = [f"feature {f}" for f in case.features]
        needed += [f"topology {t}" for t in overlay.smaller_topologies(m, shape)]
        shape["layers"] = None
    fresh = Shrink(str(run_dir), case.id, sig, shape, args.resolution, before_traffic(r), needed=needed)
    try:
        s = search.load_or_start(directory, fresh)
    except ValueError as err:
        raise CliError(str(err)) from None
    search.save(directory, s, args.force)
    oracle = _oracle(args, m, case, (r.outcome.value, sig), directory, r.stack)
    answer = search.shrink(
        s, oracle, lambda shape: overlay.smaller_topologies(m, shape), lambda s: search.save(directory, s, args.force)
    )
    answer["smallest_case"] = overlay.case_of(m, case, answer["smallest"])
    answer["repro"] = _repro(answer, directory, answer["smallest_case"])
    safe_write.write_text(directory / "answer.json", json.dumps(answer, indent=2) + "\n", force=args.force)
    print(json.dumps(answer, indent=2) if args.format == "json" else describe(answer))
    return 0


def add_shrink(add) -> None:
    p = add("shrink", cmd_shrink, "find the smallest case that fails the same way as a failing case of a run")
    p.add_argument("run_dir", type=Path, help="the run directory the case failed in")
    p.add_argument("--case", required=True, help="the failing case's id")
    p.add_argument(
        "--traffic-only",
        action="store_true",
        help="shrink the workload only (phases, requests, prompt and output tokens): keep the features, "
        "topology and layers",
    )
    p.add_argument(
        "--resolution",
        type=float,
        default=0.0,
        help="stop bisecting a number once the gap between its least failing value found and its largest "
        "passing one is within this fraction of it (default 0: exact)",
    )
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument("--out", type=Path, help="the shrink's directory: its state and each try's run (resumes there)")
    p.add_argument(
        "--lock", type=Path, help="a file locked (flock) while each try runs, for a machine shared with other runs"
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="text: a summary; json: the answer")
    p.add_argument(
        "--force", action="store_true", help="take the directory's shrink.json and answer.json as ppconf's own"
    )

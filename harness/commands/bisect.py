"""`ppconf bisect`: the first engine version on which one case fails, between a good stack and a
bad one (``harness.stacks.bisect``). Each trial is a real `ppconf run` of the case on one stack,
in a run directory of its own under the bisect's directory."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.commands.common import CliError, matrix
from harness.matrix.schema import DiagnosisRule
from harness.results import store
from harness.stacks import install
from harness.stacks.bisect import Bisect, Trial, bisect, load_or_start, save
from harness.stacks.stack import Stack, StackError
from reports.triage import environment, failure_text
from reports.triage import failed as failed_


@contextlib.contextmanager
def turn_lock(path: Path | None) -> Iterator[None]:
    """Held while one trial runs: machines shared with other runs of vLLM take turns."""
    if path is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def trial_of(
    run_dir: Path, stack: Stack, case: str, failed: str = "", rules: list[DiagnosisRule] | None = None
) -> Trial:
    """The trial a run of ``case`` on ``stack`` recorded in ``run_dir`` (a run over stacks); a
    failure that ``rules`` call the environment's is marked so."""
    sub = run_dir / stack.id
    records = [r for r in store.read(sub) if r.case == case] if (sub / store.RESULTS).is_file() else []
    if not records:
        return Trial(None, failed or "the run recorded no verdict for the case", str(sub))
    r = records[-1]
    engine = ", ".join(
        sorted({f"{stack.engine} {v[stack.engine]}" for v in r.versions.values() if v.get(stack.engine)})
    )
    repro = str(sub / r.repro.dir) if r.repro and r.repro.dir else None
    env = environment(r, failure_text(r), rules or []) if failed_(r) else None
    return Trial(r.outcome.value, r.reason, str(sub), engine, r.duration_s, repro, env)


def _runner(args: argparse.Namespace, directory: Path):
    rules = matrix(args).diagnosis

    def run(stack: Stack, n: int) -> Trial:
        out = directory / stack.version / f"try-{n}"
        argv = [sys.executable, "-m", "harness.cli", "run", "--suite", args.suite, "--case", args.case, "-q"]
        argv += ["--resume", str(out)] if (out / store.STACKS).is_file() else ["--out", str(out), "--stack", str(stack)]
        if args.cluster:
            argv += ["--cluster", args.cluster]
        for m in args.matrices or []:
            argv += ["--matrices", str(m)]
        if args.install and stack.engine in install.INSTALLABLE:
            install.install(stack, say=lambda text: print(text, flush=True))
        with turn_lock(args.lock):
            got = subprocess.run(argv, capture_output=True, text=True)
        failed = ""
        if got.returncode not in (0, 1):  # 1: the case failed, which is a verdict
            failed = (got.stderr.strip().splitlines() or [f"ppconf run exited {got.returncode}"])[-1]
        return trial_of(out, stack, args.case, failed, rules)

    return run


def _cell(value: object, width: int = 72) -> str:
    """A value cut to a column of the side-by-side view (answer.json keeps it whole)."""
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def side_by_side(answer: dict[str, Any]) -> str:
    """The answer as text: the verdict per version, then last good and first bad side by side."""
    lines = [f"bisect {answer['case']} ({answer['suite']}) between {answer['good']} and {answer['bad']}"]
    lines += [f"  {v}: {t['verdict']} — {t['why']}" for v, t in answer["tried"].items()]
    lines.append(answer["answer"])
    if "first_bad" in answer:
        good, bad = answer["last_good"], answer["first_bad"]
        rows = [("", good["stack"], bad["stack"])]
        for n, (g, b) in enumerate(zip(good["trials"], bad["trials"], strict=False), 1):
            for key in ("outcome", "engine", "duration_s", "reason", "run_dir", "repro"):
                rows.append((f"try {n} {key}", _cell(g.get(key)), _cell(b.get(key))))
        width = [max(len(r[i]) for r in rows) for i in range(2)]
        lines += [f"  {r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}" for r in rows]
    return "\n".join(lines)


def cmd_bisect(args: argparse.Namespace) -> int:
    try:
        good, bad = Stack.parse(args.good), Stack.parse(args.bad)
        versions = args.versions.split(",") if args.versions else [s.version for s, _ in install.installed_stacks()]
        fresh = Bisect.start(args.suite, args.case, good, bad, versions, args.confirm)
        directory = args.out or Path("runs") / f"bisect-{args.case.replace('/', '_')}-{good.version}-{bad.version}"
        b = load_or_start(directory, fresh)
        save(directory, b, args.force)
        say = lambda t: print(t, file=sys.stderr, flush=True)  # noqa: E731
        answer = bisect(b, _runner(args, directory), directory, say, args.force)
    except StackError as err:
        raise CliError(str(err)) from None
    safe_write.write_text(directory / "answer.json", json.dumps(answer, indent=2) + "\n", force=args.force)
    print(json.dumps(answer, indent=2) if args.format == "json" else side_by_side(answer))
    return 0 if "first_bad" in answer else 1


def add_bisect(add) -> None:
    p = add(
        "bisect", cmd_bisect, "find the first engine version on which one case fails, between a good and a bad stack"
    )
    p.add_argument("--suite", required=True, help="the suite the case belongs to")
    p.add_argument("--case", required=True, help="the case id")
    p.add_argument("--good", required=True, metavar="ENGINE==VERSION", help="a stack on which the case does not fail")
    p.add_argument("--bad", required=True, metavar="ENGINE==VERSION", help="a later stack on which it fails")
    p.add_argument(
        "--versions",
        help="the released versions to search, comma-separated (default: the stacks installed in the stack cache)",
    )
    p.add_argument("--install", action="store_true", help="install each stack before its first trial unless cached")
    p.add_argument(
        "--confirm", type=int, default=1, help="runs after the first per version; all must agree (default 1)"
    )
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument("--out", type=Path, help="the bisect's directory: its state and each trial's run (resumes there)")
    p.add_argument(
        "--lock", type=Path, help="a file locked (flock) while each trial runs, for a machine shared with other runs"
    )
    p.add_argument("--format", choices=("text", "json"), default="text", help="text: side by side; json: the answer")
    p.add_argument(
        "--force",
        action="store_true",
        help="take the directory's bisect.json and answer.json as ppconf's own (an older ppconf wrote them)",
    )

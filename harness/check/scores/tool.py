"""What a task-score tool provides (``ScoreTool``: a new tool is one module of this package whose
``TOOL`` is one, and one line in ``harness.registry.SCORE_TOOLS``), and running one against a
deployment: a subprocess in a process group of its own, led by ``runners/guard.py``, so a
timeout, a Ctrl-C or ppconf's own death takes it down with every child; and reading back its log
for the evidence when it fails."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import safe_write
from runners import guard

STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class ScoreTool:
    """A task-score tool. ``evaluate(base_url, model_name, score, base_dir, workdir, timeout_s,
    tokenizer)`` scores the server at ``base_url`` (its root) serving ``model_name`` and answers
    at least ``{"value": float}`` with its evidence, raising ScoreError when the tool is missing,
    fails or outlives ``timeout_s``; ``missing_files(score, base_dir)`` says why a file the score
    names is not there (None when all are), before anything launches. Files are relative to
    ``base_dir``, the folder of the matrix file that names them."""

    label: str  # how the tool is named in messages and evidence
    evaluate: Callable[[str, str, Any, Path, Path, float, str | None], dict[str, Any]]
    missing_files: Callable[[Any, Path], str | None]


class ScoreError(Exception):
    pass


def offline_env(workdir: Path) -> dict[str, str]:
    """Nodes have no internet: the Hugging Face libraries run offline, with a cache of their own."""
    return {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # a per-run cache: nothing lands in the user's home, nothing stale is read back
        "HF_DATASETS_CACHE": str(workdir / "hf-datasets"),
        "TOKENIZERS_PARALLELISM": "false",
    }


def run_tool(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
    tool: str = "lm-eval",  # its label
    cwd: Path | None = None,
    budget_s: float | None = None,
) -> None:
    """Run ``argv`` under the guard in a process group of its own, output to ``log_path``; the
    whole group is stopped when it ends, times out or this process is interrupted. ``budget_s``:
    the deadline a timeout names, where ``timeout_s`` is what is left of it."""
    with safe_write.open_stream(log_path, append=False) as log:
        proc = subprocess.Popen(
            [sys.executable, guard.__file__, "--", *argv],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ScoreError(
            f"{tool} did not finish within {budget_s or timeout_s:g} s (stopped); "
            f"last lines of {log_path}:\n{last_lines(log_path)}"
        ) from None
    finally:
        stop_group(proc)
    if rc != 0:
        raise ScoreError(f"{tool} exited with status {rc}; last lines of {log_path}:\n{last_lines(log_path)}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group led by ``proc``, SIGKILL what is left after ``grace_s``, and
    return only once the group is gone. A finished group is left alone."""
    pgid = proc.pid
    if proc.poll() is not None and not _group_alive(pgid):
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            proc.poll()  # reap the leader so that it does not count as a live zombie
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


# terminal control sequences (AISBench colours its log levels even into a file)
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[@-Z\\-_])")


def _noise(line: str) -> bool:
    # progress bars, AISBench's request counters and blank lines say nothing about why a tool failed
    return not line.strip() or "it/s]" in line or "s/it]" in line or "%|" in line or line.lstrip().startswith("POST=")


def log_lines(log_path: Path) -> list[str] | None:
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return [ln.rstrip() for chunk in ANSI.sub("", text).splitlines() for ln in chunk.split("\r")]


def last_lines(log_path: Path, n: int = 15) -> str:
    lines = log_lines(log_path)
    if lines is None:
        return "(no output)"
    kept = [ln for ln in lines if not _noise(ln)]
    return "\n".join(kept[-n:]) or "(no output)"

"""What the commands share: the usage error, the matrices a command reads, a checked --select."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.matrix.condition import ConditionError
from harness.matrix.load import DEFAULT_MATRICES, Matrix, load_matrix
from harness.run_dir import run_matrix


class CliError(Exception):
    """A usage error reported as one line, exit status 2."""


def matrix(args: argparse.Namespace) -> Matrix:
    return load_matrix(args.matrices or [DEFAULT_MATRICES])


def matrix_of_run(args: argparse.Namespace, run_dir: Path) -> Matrix:
    """The matrices the run was made with, unless --matrices says otherwise."""
    return run_matrix(run_dir, args.matrices)


def check_select(expr: str | None) -> None:
    if expr is not None:
        from harness.matrix import condition
        from harness.matrix.attributes import ATTRIBUTES

        try:
            condition.parse(expr, dict(ATTRIBUTES))
        except ConditionError as err:
            raise CliError(
                f"--select {expr!r}: {err.reason} at column {err.column}"
                + (f" (did you mean '{err.hint}'?)" if err.hint else "")
            ) from None


def add_force(p: argparse.ArgumentParser, help: str) -> None:
    """``--force``: a file ppconf did not write (hand-written, edited since) may be replaced; a
    symbolic link is still never written through (``harness.safe_write``)."""
    p.add_argument("--force", action="store_true", help=f"{help}; a symbolic link is never written through")


def say_written(what: str, path: Path, quiet: bool = False) -> None:
    """Where a command wrote files, on stderr (stdout keeps the command's answer)."""
    if not quiet:
        print(f"ppconf: wrote {what} to {path.resolve()}", file=sys.stderr)

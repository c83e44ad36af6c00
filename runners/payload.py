"""A launch's payload on its node: the files written into the launch's own directory, and the
argv that puts that directory first on the launch's PYTHONPATH (after the node's set_env and the
launch's own environment are applied, so neither can push it back)."""

from __future__ import annotations

from pathlib import Path

from harness import safe_write
from harness.launch import LaunchSpec

# $1 the directory, then ARGV; an existing PYTHONPATH stays, after the directory.
_PREPEND = 'PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}"; export PYTHONPATH; shift; exec "$@"'


def write(spec: LaunchSpec, directory: Path) -> None:
    """The payload's files in ``directory`` (a payload written there before is replaced)."""
    for p in spec.payload:
        safe_write.write_text(directory / p.name, p.content)


def on_pythonpath(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``directory`` first on its PYTHONPATH; the directory is one argument,
    never part of the script text."""
    return ["sh", "-c", _PREPEND, "ppconf-payload", str(directory), *argv]

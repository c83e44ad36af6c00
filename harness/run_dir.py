"""Opening a run directory for a run, the same way from every entry point (``ppconf run``, the
pytest plugin): a fresh run never lands on another run's records, a resumed one must be a run
whose interrupted launch is known, and a run is judged against the matrices it was made with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.check.serving.launcher import LIVE
from harness.matrix.load import DEFAULT_MATRICES, Matrix, load_matrix
from harness.results import store


class RunRefused(Exception):
    """A run cannot start on this directory as asked (one line for the user); nothing launched."""


def open_fresh(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise RunRefused(f"{run_dir} exists and is not a directory")
    if (run_dir / store.META).exists() or (run_dir / store.RESULTS).exists():
        raise RunRefused(
            f"{run_dir} already holds a run; finish it with: ppconf run --resume {run_dir} "
            f"(or give --out a new directory)"
        )


def open_resumed(run_dir: Path, adopt: bool = False) -> dict[str, Any]:
    """The run.json of the run to resume. ``adopt`` (``--force``): its record files are taken as
    ppconf's own as they are (a run directory an older ppconf, or a copy, made), so the run
    continues in them (``harness.safe_write``)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunRefused(f"{run_dir} exists and is not a directory")
    if not (run_dir / store.META).is_file():
        raise RunRefused(f"{run_dir} is not a run directory (no {store.META})")
    if adopt:
        for name in (store.META, store.RESULTS, LIVE):
            safe_write.adopt(run_dir / name)
    meta = store.read_meta(run_dir)
    live = run_dir / LIVE
    if live.exists():
        try:
            json.loads(live.read_text(errors="replace") or "[]")
        except ValueError:
            raise RunRefused(
                f"{live} is unreadable (a torn write), so the process groups its interrupted case "
                f"left running are unknown; stop them (their environment carries "
                f"PPCONF_RUN_DIR={run_dir}), delete {live}, and resume again"
            ) from None
    return meta


def run_matrix(run_dir: Path, given: list[Path] | None) -> Matrix:
    """The matrices a run was made with (as run.json records them), unless ``given`` says
    otherwise: a run of a private suite is judged against its own claims, not the shipped ones."""
    recorded = store.recorded_matrices(store.read_meta(run_dir))
    if given is not None or not recorded:
        return load_matrix(given or [DEFAULT_MATRICES])
    missing = [str(p) for p in recorded if not p.is_dir()]
    if missing:
        raise RunRefused(
            f"{run_dir} was made with the matrices {', '.join(missing)}, which are not here; give --matrices DIR"
        )
    return load_matrix(recorded)

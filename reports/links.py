"""Where a report points: the run's full logs and repro bundles (found inside the run directory
only, linked relative to the page, so the run directory can be moved or kept as a CI artifact),
and a waiver's link (a web address only: nothing a record holds becomes a ``javascript:`` link)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from harness.results import store as results
from harness.results.result import Result

BUNDLE_FILES = ("commands.sh", "case.json")  # what a repro bundle holds (harness.check.verdict.repro)


def bundle(run_dir: Path | None, r: Result | None) -> Path | None:
    """The case's repro bundle inside the run directory, or None (no bundle, or not in the run)."""
    if run_dir is None or r is None or r.repro is None or not r.repro.dir:
        return None
    return results.run_path(run_dir, r.repro.dir, "repro", is_dir=True)


def href(path: Path, page_dir: Path) -> str:
    """A link from a page in ``page_dir`` to ``path``, relative and URL-quoted."""
    rel = Path(os.path.relpath(path, page_dir.resolve())).as_posix()
    return quote(rel) + ("/" if path.is_dir() else "")


def web(link: str | None) -> str | None:
    """``link`` when it is a web address, to be followed from a page; None otherwise."""
    if not link:
        return None
    parts = urlsplit(link)
    return link if parts.scheme in ("http", "https") and parts.netloc else None


def log_links(run_dir: Path | None, r: Result | None, page_dir: Path) -> list[dict[str, Any]]:
    """Each launch's full log: its name, the path the record gives and a link where the run holds it."""
    out = []
    for name, ref in (r.observation.logs if r else {}).items():
        found = results.log_path(run_dir, ref) if run_dir else None
        out.append({"name": name, "ref": ref, "href": href(found, page_dir) if found else None})
    return out


def bundle_links(run_dir: Path | None, r: Result | None, page_dir: Path) -> dict[str, Any] | None:
    """The repro bundle's folder and files as links, or what the record says where the run lacks it."""
    if r is None or r.repro is None or not r.repro.dir:
        return None
    where = bundle(run_dir, r)
    if where is None:
        return {"path": r.repro.dir, "href": None, "files": []}
    files = [{"name": f, "href": href(where / f, page_dir)} for f in BUNDLE_FILES if (where / f).is_file()]
    return {"path": r.repro.dir, "href": href(where, page_dir), "files": files}

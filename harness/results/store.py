"""The results store: one JSON line per finished case, appended as each case finishes.

Each line is ``Result.to_json()`` of one ``harness.results.result.Result`` (keys sorted, secrets
masked); readers get the records back as ``Result``s. A killed run loses nothing already
written; a torn last line (the process died mid-write) is detected and dropped, so ``--resume``
re-runs exactly the cases without a complete record. Every other line must load as a ``Result``
(``Result.from_json``; records of older writers, without ``schema``, do); one that does not is a
``RunDirError`` naming the file, the line, the field and the offending value.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from harness import json_input, safe_write
from harness.json_input import JsonInputError
from harness.outcomes import Outcome
from harness.redact import Redactor
from harness.results import schema
from harness.results.result import RecordError, Result

_SURROGATE = re.compile("[\ud800-\udfff]")
RESULTS = "results.jsonl"
META = "run.json"
STACKS = "stacks.json"  # a run over several stacks: its suite and stacks in order, one run per stack beside it


class RunDirError(ValueError):
    """A run directory, or a file in it, that cannot be read as one."""


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` if it is a run directory (it holds results.jsonl or run.json), else RunDirError."""
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory; give the run directory that holds {RESULTS}")
    for name in (RESULTS, META):
        if (run_dir / name).exists() and not (run_dir / name).is_file():
            raise RunDirError(f"{run_dir / name} is not a file")
    if not (run_dir / RESULTS).exists() and not (run_dir / META).exists():
        raise RunDirError(f"{run_dir} is not a run directory (no {RESULTS} or {META})")
    return run_dir


def append(run_dir: Path, record: dict[str, Any], redactor: Redactor | None = None, force: bool = False) -> None:
    """Append one record, as ``Result.to_json()`` gives it. Every string of it (reasons, log lines,
    argv) enters the store with the run's secrets masked: the values ``redactor`` learned, and any
    secret-looking NAME=value or flag. The file must be one ppconf wrote (``harness.safe_write``),
    unless ``force``."""
    clean = (redactor or Redactor()).scrub(json.loads(json.dumps(record, default=str)))
    safe_write.append_text(run_dir / RESULTS, json.dumps(clean, sort_keys=True) + "\n", force=force)


def _whole_characters(value: Any) -> Any:
    """A JSON value with each lone surrogate (``"\\udcff"`` is valid JSON, but no character, and
    no writer can encode it) read as U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_characters(v) for v in value]
    return value


def read_all(run_dir: Path) -> list[Result]:
    """Every complete record in file order, repeats included."""
    path = run_dir / RESULTS
    if not path.exists():
        return []
    if not path.is_file():
        raise RunDirError(f"{path} is not a file")
    records = []
    try:
        text = json_input.read_text(path)
    except OSError as err:
        raise RunDirError(f"{path}: {err.strerror}") from None
    except JsonInputError as err:
        raise RunDirError(str(err)) from None
    for number, raw in enumerate(text.splitlines(keepends=True), 1):
        if not raw.endswith("\n"):
            break  # torn final write
        if not raw.strip():
            continue
        try:
            rec = _whole_characters(json_input.loads(raw, str(path), number))
        except JsonInputError as err:
            raise RunDirError(f"{err.where}: not a JSON record: {err.message}") from None
        try:
            records.append(Result.from_json(rec))
        except RecordError as err:
            raise RunDirError(f"{path}:{number}: {err}") from None
    return records


def read(run_dir: Path) -> list[Result]:
    """One record per case; when a case was run again the later record wins."""
    return list({r.case: r for r in read_all(run_dir)}.values())


def history(run_dir: Path) -> dict[str, list[Outcome]]:
    """The outcomes each case had, in order, over every repeat in the run."""
    out: dict[str, list[Outcome]] = {}
    for r in read_all(run_dir):
        out.setdefault(r.case, []).append(r.outcome)
    return out


def read_meta(run_dir: Path) -> dict[str, Any]:
    """run.json ({} when the run has none), checked like the records."""
    path = run_dir / META
    if not path.exists():
        return {}
    try:
        meta = _whole_characters(json_input.load(path))
    except JsonInputError as err:
        raise RunDirError(str(err)) from None
    except OSError as err:
        raise RunDirError(f"{path}: {err.strerror}") from None
    why = schema.problem(schema.RunMeta, meta)
    if why:
        raise RunDirError(f"{path}: {why}")
    return meta


def recorded_matrices(meta: dict[str, Any]) -> list[Path]:
    """The matrix directories a run was made with (run.json holds one string or a list)."""
    value = meta.get("matrices")
    if value is None:
        return []
    return [Path(v) for v in ([value] if isinstance(value, str) else value)]


def out_dir(path: Path) -> Path:
    """``path`` as a directory ppconf writes into (made if missing): not a file, and not a
    symbolic link placed where it would write (a run's ``report``), else RunDirError."""
    if path.is_symlink():
        raise RunDirError(f"{path} is a symbolic link; ppconf writes nothing through it (give another --out)")
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{path} exists and is not a directory")
    try:
        return safe_write.make_dir(path)
    except safe_write.WriteRefused as err:
        raise RunDirError(str(err)) from None


def log_ref(run_dir: Path, path: Path) -> str:
    """How a record names a log file: relative to the run directory, so the run can be moved
    and reported from anywhere."""
    return os.path.relpath(Path(path).resolve(), Path(run_dir).resolve())


def log_path(run_dir: Path, ref: str) -> Path | None:
    """The log file a record's reference names, or None when there is none inside the run
    directory (reports read nothing else, whatever a record says)."""
    return run_path(run_dir, ref, "logs")


def run_path(run_dir: Path, ref: str, folder: str, is_dir: bool = False) -> Path | None:
    """The file (or, with ``is_dir``, the folder) a record names under the run's ``folder``
    (``logs``, ``repro``), or None when there is none inside the run directory."""
    if not ref:
        return None
    root = Path(run_dir).resolve()
    parts = Path(ref).parts
    # records written before references were relative to the run name the file from where
    # ppconf ran (``runs/X/logs/...``): try that, and the part from the run's folder on
    candidates = [root / ref, Path(ref)] + [root.joinpath(*parts[i:]) for i, p in enumerate(parts) if p == folder]
    for candidate in candidates:
        path = candidate.resolve()
        if path.is_relative_to(root) and (path.is_dir() if is_dir else path.is_file()):
            return path
    return None


def repair(run_dir: Path) -> bool:
    """Cut a torn last line off the file so later appends start on a fresh line."""
    path = run_dir / RESULTS
    if not path.exists():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    safe_write.truncate(path, data.rfind(b"\n") + 1)
    return True

"""What every checked file of a run directory shares, and the shape of run.json.

Reports, diffs and sign-offs trust what they read; a file that does not fit is an error naming
the offending field and value in one line (``problem``, ``describe``), never a traceback deep in
a renderer. Models are strict (JSON's types, no coercion) and keep unknown keys, so older and
newer writers stay readable. The shape of a results.jsonl record is ``harness.results.result``.
"""

from __future__ import annotations

import datetime
import math
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harness.redact import Redactor, secret_name


class Checked(BaseModel):
    """A JSON object of a run directory: checked strictly, unknown keys kept."""

    model_config = ConfigDict(extra="allow", strict=True)


def finite(v: float | None) -> float | None:
    if v is not None and (not math.isfinite(v) or v < 0):
        raise ValueError("must be a finite number >= 0")
    return v


def iso_datetime(v: str | None) -> str | None:
    if v is not None:
        datetime.datetime.fromisoformat(v)  # ValueError names the bad text
    return v


def _key(part: str | int) -> str:
    """A step of an error's location as the path shows it: a key that is empty, or holds a line
    break or another unprintable character, quoted (the message stays on one line)."""
    text = str(part)
    return text if text and text.isprintable() else repr(text)


def describe(err: ValidationError) -> str:
    """The first reason of ``err``, in one line: where, why, and the offending value."""
    e = err.errors()[0]
    where = ".".join(_key(p) for p in e["loc"]) or "(record)"
    value = e.get("input")
    if isinstance(value, (dict, list)):  # its type and size: what is in it may be anything, secrets too
        got = f"a JSON {'object' if isinstance(value, dict) else 'list'} of {len(value)}"
    elif e["loc"] and secret_name(str(e["loc"][-1])):
        got = "a value not shown: its key names a secret"
    else:
        got = Redactor().text(repr(value))
        got = got if len(got) <= 80 else got[:77] + "..."
    return f"{where}: {e['msg']} (got {got})"


def uuid_text(v: str | None) -> str | None:
    if v is not None:
        uuid.UUID(v)  # ValueError: "badly formed hexadecimal UUID string"
    return v


class RunMeta(Checked):
    run_id: str | None = None  # a UUID; runs written before it have none (the index derives one)
    suite: str | None = None
    cluster: str | None = None
    # one directory, or several where --matrices was given more than once
    matrices: str | list[str] | None = None
    started: str | None = None
    pid: int | None = None
    host: str | None = None  # where pid runs; runs written before it have none (taken as this host)
    versions: dict[str, dict[str, str | None]] = {}
    cases: list[str] | None = None
    select: str | None = None
    cluster_ref: str | None = None
    network: str | None = None
    reference_cache: str | None = None

    _started = field_validator("started")(iso_datetime)
    _run_id = field_validator("run_id")(uuid_text)


def problem(model: type[BaseModel], data: Any) -> str | None:
    """The first reason ``data`` does not fit ``model``, in one line, or None."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    try:
        model.model_validate(data)
    except ValidationError as err:
        return describe(err)
    return None

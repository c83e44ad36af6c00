"""JSON read back from disk (run directories, tool outputs, recorded durations), within bounds.

Python's ``json`` nests by recursion: a document nested a few thousand levels deep raises
RecursionError, and one a few hundred deep makes every recursive reader after it fail the same
way. Files are read only if regular and at most ``MAX_BYTES``; values nested deeper than
``MAX_DEPTH`` are refused. Every refusal is a ``JsonInputError`` naming the file and line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_BYTES = 256 * 1024 * 1024  # a results.jsonl of some 100,000 records
MAX_DEPTH = 64  # ppconf's own records nest 8 levels at most


class JsonInputError(ValueError):
    """A JSON file or line that cannot be read: ``where`` is ``file:line``."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def _too_deep_at(text: str, limit: int) -> int | None:
    """Offset of the bracket that opens level ``limit + 1`` (strings skipped), if any."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return i
        elif ch in "]}":
            depth -= 1
    return None


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def loads(text: str, file: str, line: int = 1) -> Any:
    """``text`` parsed; ``JsonInputError`` at ``file:line`` (the line within the text added) when
    it is not JSON or nests deeper than ``MAX_DEPTH``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"{file}:{line + err.lineno - 1}"
        raise JsonInputError(where, f"not valid JSON ({err.msg} at column {err.colno})") from None
    except RecursionError:
        deep = True
    else:
        deep = _depth(value) > MAX_DEPTH
    if deep:
        at = _too_deep_at(text, MAX_DEPTH) or 0
        raise JsonInputError(f"{file}:{line + text.count(chr(10), 0, at)}", f"nested deeper than {MAX_DEPTH} levels")
    return value


def read_text(path: Path, limit: int | None = None) -> str:
    """The text of a regular file of at most ``limit`` bytes (``MAX_BYTES``; undecodable bytes
    replaced); ``JsonInputError`` otherwise, and ``OSError`` when it cannot be opened."""
    limit = MAX_BYTES if limit is None else limit
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JsonInputError(f"{path}:1", "not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise JsonInputError(f"{path}:1", f"larger than {limit} bytes: not read")
    return data.decode("utf-8", errors="replace")


def load(path: Path) -> Any:
    """The JSON document of the file at ``path``, read within the bounds above."""
    return loads(read_text(path), str(path))

"""YAML with positions: every error about a matrix file names the file, line and column.

ruamel.yaml's round-trip loader keeps the line/column of every key and list item, which plain
PyYAML throws away. Values are converted to plain dicts/lists for validation; the original node
tree is kept so that a pydantic error location can be mapped back to the text.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError


@dataclass(frozen=True)
class Where:
    file: str
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class SourceError(Exception):
    """One problem in one matrix file."""

    def __init__(self, where: Where | None, message: str):
        super().__init__(message)
        self.where = where
        self.message = message

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class MatrixError(Exception):
    """All problems found while loading a matrix; loading reports every one, not just the first."""

    def __init__(self, errors: Sequence[SourceError]):
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def suggest(value: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest valid name, or ''."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


@dataclass
class Document:
    """One parsed YAML file: plain data plus the position tree."""

    path: Path
    display: str
    root: Any  # the ruamel node tree

    def where(self, loc: Sequence[Any] = ()) -> Where:
        """Position of the deepest node along ``loc`` (keys and list indexes) that exists."""
        node = self.root
        line, col = 0, 0
        for step in loc:
            if isinstance(node, CommentedMap) and step in node:
                line, col = node.lc.key(step)
                node = node[step]
            elif isinstance(node, CommentedSeq) and isinstance(step, int) and 0 <= step < len(node):
                line, col = node.lc.item(step)
                node = node[step]
            else:
                break
        return Where(self.display, line + 1, col + 1)

    def value_where(self, loc: Sequence[Any]) -> Where:
        """Position of the value at ``loc`` (rather than its key), for pointing at a bad value."""
        *parent_loc, last = loc
        node = self.root
        for step in parent_loc:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                return self.where(loc)
        if isinstance(node, CommentedMap) and last in node:
            line, col = node.lc.value(last)
            return Where(self.display, line + 1, col + 1)
        return self.where(loc)


def plain(node: Any) -> Any:
    if isinstance(node, CommentedMap):
        return {str(k) if not isinstance(k, (int, bool)) else k: plain(v) for k, v in node.items()}
    if isinstance(node, CommentedSeq):
        return [plain(v) for v in node]
    if isinstance(node, str):
        return str(node)
    return node


def load_document(path: Path, display: str | None = None) -> Document:
    display = display or str(path)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise MatrixError([SourceError(Where(display, 1, 1), f"cannot read file: {err}")]) from err
    try:
        root = yaml.load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = Where(display, mark.line + 1, mark.column + 1) if mark else Where(display, 1, 1)
        problem = " ".join(p for p in (err.context, err.problem) if p)
        raise MatrixError([SourceError(where, f"invalid YAML: {problem}")]) from err
    except Exception as err:  # ruamel raises a few unmarked errors (e.g. duplicate anchors)
        raise MatrixError([SourceError(Where(display, 1, 1), f"invalid YAML: {err}")]) from err
    return Document(path=path, display=display, root=root)

"""YAML with positions: every error about a matrix file names the file, line and column.

libyaml (PyYAML's C parser) composes the node tree, which carries the line and column of every
key and value; this module builds plain dicts/lists from it, resolving scalars by YAML 1.2's
core schema (``yes``, ``on`` and ``010`` stay what they read as), and keeps each key's and
value's position, so that a pydantic error location can be mapped back to the text. A
round-trip loader kept positions too, but spent about 18 s on a 1.6 MB file gathering comments.

Aliases are expanded, within limits: a file with more than ``MAX_ALIASES`` alias uses, or whose
expanded data would exceed ``MAX_NODES`` nodes (a "billion laughs"), is refused with the position
of the alias that crossed the limit. A file is read only if it is a regular file of at most
``MAX_BYTES`` (a FIFO or a device never blocks nor fills memory), and data nested deeper than
``MAX_DEPTH`` levels is refused at the node that crossed it (before Python's recursion gives out).
"""

from __future__ import annotations

import datetime
import difflib
import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAX_ALIASES = 10_000
MAX_NODES = 1_000_000
MAX_BYTES = 32 * 1024 * 1024  # 80 times the largest shipped matrix file
MAX_DEPTH = 64  # levels of nested mappings and lists; the shipped matrices use 8


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
    """One parsed YAML file: plain data, and where each key and value was written."""

    path: Path
    display: str
    root: Any  # plain dicts, lists and scalars
    # location (keys and list indexes from the root) -> (key line, key column, value line,
    # value column), 0-based; a list item's key position is its value's
    marks: dict[tuple[Any, ...], tuple[int, int, int, int]] = field(default_factory=dict)

    def where(self, loc: Sequence[Any] = ()) -> Where:
        """Position of the deepest node along ``loc`` (keys and list indexes) that exists."""
        line, col = 0, 0
        for i in range(1, len(loc) + 1):
            mark = self.marks.get(tuple(loc[:i]))
            if mark is None:
                break
            line, col = mark[0], mark[1]
        return Where(self.display, line + 1, col + 1)

    def value_where(self, loc: Sequence[Any]) -> Where:
        """Position of the value at ``loc`` (rather than its key), for pointing at a bad value."""
        mark = self.marks.get(tuple(loc))
        if mark is None:
            return self.where(loc)
        return Where(self.display, mark[2] + 1, mark[3] + 1)


# YAML 1.2 core schema, for plain (unquoted) scalars
_NULL = re.compile(r"~|null|Null|NULL|")
_TRUE = re.compile(r"true|True|TRUE")
_FALSE = re.compile(r"false|False|FALSE")
_INT = re.compile(r"[-+]?[0-9]+")
_OCT = re.compile(r"0o[0-7]+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"([-+]?)\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_STR = "tag:yaml.org,2002:str"


def _scalar(node: yaml.ScalarNode) -> Any:
    value = node.value
    if node.tag != _STR:  # an explicit tag (!!int, !!binary ...): PyYAML's safe constructors
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    if node.style not in (None, ""):  # quoted or block text (libyaml writes plain as "")
        return value
    if _NULL.fullmatch(value):
        return None
    if _TRUE.fullmatch(value):
        return True
    if _FALSE.fullmatch(value):
        return False
    if _INT.fullmatch(value):
        return int(value)
    if _OCT.fullmatch(value):
        return int(value[2:], 8)
    if _HEX.fullmatch(value):
        return int(value[2:], 16)
    if _FLOAT.fullmatch(value):
        return float(value)
    if m := _INF.fullmatch(value):
        return -math.inf if m[1] == "-" else math.inf
    if _NAN.fullmatch(value):
        return math.nan
    if _DATE.fullmatch(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return value
    return value


class _Builder:
    """Plain data and positions from a composed node tree, aliases expanded within limits."""

    def __init__(self, display: str):
        self.display = display
        self.marks: dict[tuple[Any, ...], tuple[int, int, int, int]] = {}
        self.seen: set[int] = set()
        self.open: set[int] = set()  # the nodes being built: an alias to one of them is a cycle
        self.aliases = 0
        self.nodes = 0

    def fail(self, node: yaml.Node, message: str, loc: tuple[Any, ...] | None = None) -> SourceError:
        """An error at ``node``; or at the key that holds ``loc``, since an alias node carries
        the position of its anchor, not of the alias."""
        line, col = self.marks[loc][:2] if loc in self.marks else (node.start_mark.line, node.start_mark.column)
        return SourceError(Where(self.display, line + 1, col + 1), message)

    def build(self, node: yaml.Node, loc: tuple[Any, ...]) -> Any:
        self.nodes += 1
        if len(loc) > MAX_DEPTH:
            raise self.fail(node, f"nested deeper than {MAX_DEPTH} levels")
        if self.nodes > MAX_NODES:
            raise self.fail(node, f"the file expands to more than {MAX_NODES} values (aliases of aliases?)", loc)
        if isinstance(node, yaml.ScalarNode):
            return _scalar(node)
        if id(node) in self.open:
            raise self.fail(node, "an alias refers to a node that contains it (recursive alias)", loc)
        if id(node) in self.seen:
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise self.fail(node, f"more than {MAX_ALIASES} alias uses in one file", loc)
        self.seen.add(id(node))
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                out_list = []
                for i, item in enumerate(node.value):
                    here = loc + (i,)
                    self.marks[here] = (
                        item.start_mark.line,
                        item.start_mark.column,
                        item.start_mark.line,
                        item.start_mark.column,
                    )
                    out_list.append(self.build(item, here))
                return out_list
            assert isinstance(node, yaml.MappingNode)  # the composer makes scalars, sequences and mappings only
            return self.mapping(node, loc)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, loc: tuple[Any, ...]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" and key_node.style in (None, ""):
                # a merge key: the mapping(s) it names fill in the keys this mapping lacks
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise self.fail(source, "a merge key (<<) takes a mapping or a list of mappings")
                    for k, v in self.build(source, loc).items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, "a mapping key must be a plain value")
            key = _scalar(key_node)
            key = key if isinstance(key, (int, bool)) else str(key)
            if key in out:
                raise self.fail(key_node, f"duplicate key '{key}'")
            here = loc + (key,)
            self.marks[here] = (
                key_node.start_mark.line,
                key_node.start_mark.column,
                value_node.start_mark.line,
                value_node.start_mark.column,
            )
            out[key] = self.build(value_node, here)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out


def read_text(path: Path, display: str, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes (``MAX_BYTES``); a SourceError
    naming the file otherwise. Opened without blocking, so a FIFO is refused rather than waited on."""
    limit = MAX_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise SourceError(Where(display, 1, 1), f"cannot read file: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(Where(display, 1, 1), "not a regular file (a FIFO, a device or a directory?)")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SourceError(Where(display, 1, 1), f"larger than {limit} bytes: not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise SourceError(Where(display, line, 1), f"cannot read file: not UTF-8 ({err.reason})") from None


def load_document(path: Path, display: str | None = None) -> Document:
    display = display or str(path)
    try:
        text = read_text(path, display)
    except SourceError as err:
        raise MatrixError([err]) from None
    loader = yaml.CBaseLoader(text)  # scalars are resolved here (YAML 1.2), not by PyYAML (1.1)
    builder = _Builder(display)
    try:
        node = loader.get_single_node()
        root = builder.build(node, ()) if node is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = Where(display, mark.line + 1, mark.column + 1) if mark else Where(display, 1, 1)
        problem = " ".join(p for p in (err.context, err.problem) if p)
        raise MatrixError([SourceError(where, f"invalid YAML: {problem}")]) from err
    except SourceError as err:
        raise MatrixError([err]) from None
    except (yaml.YAMLError, ValueError, TypeError) as err:
        raise MatrixError([SourceError(Where(display, 1, 1), f"invalid YAML: {err}")]) from err
    finally:
        loader.dispose()
    return Document(path=path, display=display, root=root, marks=builder.marks)

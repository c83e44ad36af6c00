"""Rewriting a matrix directory to this ppconf's format: ``ppconf lint --migrate [PATH]``.

Each key that moved is put where it lives now, each key that went is dropped, and a known-issue
or flaky rule without ``waives`` gets the checks a waiver covered before waivers named theirs
(``harness.matrix.changes``). Files are read and written with ruamel.yaml's round trip, so
comments, quoting and key order stay as they were; only files with a change are written (whole,
or not at all), and a file so changed states its format (``ppconf: {format: N}``). A format
newer than this ppconf's, a key set at its old and its new place, or a file that does not
parse is an error naming it, and nothing of that directory is written.
"""

from __future__ import annotations

import io
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from harness import safe_write
from harness.matrix import changes
from harness.matrix.load import DATA_DIRS, DEFAULT_MATRICES, matrix_files
from harness.matrix.schema import SECTIONS, DiagnosisRule, Rule
from harness.matrix.source import MatrixError, SourceError, Where, load_document

LISTS: dict[str, type[BaseModel]] = {"rules": Rule, "diagnosis": DiagnosisRule}
WAIVERS = ("known-issue", "flaky")


@dataclass(frozen=True)
class Migrated:
    where: Where
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class _File:
    """One matrix file being migrated: its round-trip data and what was changed in it."""

    def __init__(self, path: Path, display: str):
        self.path, self.display = path, display
        load_document(path, display)  # what the loader refuses (bad text, duplicate keys, alias bombs)
        text = path.read_text(encoding="utf-8")
        try:
            self.data, seq_indent, offset = load_yaml_guess_indent(text)
        except YAMLError as err:
            raise MatrixError([SourceError(None, f"{display}: not YAML ruamel.yaml can read back: {err}")]) from None
        self.yaml = YAML()
        self.yaml.preserve_quotes = True
        self.yaml.width = 4096  # no line is folded that was not folded
        keys = [len(m[1]) for m in re.finditer(r"^( +)[^\s#-]", text, re.M)]
        self.yaml.indent(mapping=min(keys, default=2), sequence=seq_indent or 2, offset=offset or 0)
        self.changes: list[Migrated] = []
        self.errors: list[SourceError] = []

    def at(self, node: Any, key: Any) -> Where:
        line, col = node.lc.key(key) if isinstance(node, CommentedMap) else node.lc.item(key)
        return Where(self.display, line + 1, col + 1)

    def note(self, node: Any, key: Any, what: str) -> None:
        self.changes.append(Migrated(self.at(node, key), what))

    def migrate(self) -> None:
        data = self.data
        if not isinstance(data, CommentedMap):
            return  # not a mapping of sections: the loader says so
        mark = data.get(changes.MARK)
        if mark is not None:
            problem = changes.format_problem(dict(mark) if isinstance(mark, CommentedMap) else mark)
            if problem:
                self.errors.append(SourceError(self.at(data, changes.MARK), problem[1]))
                return
        for section, body in data.items():
            if section in SECTIONS and isinstance(body, CommentedMap):
                for name, entry in body.items():
                    self.walk(SECTIONS[section], entry, f"{section}.{name}")
            elif section in LISTS and isinstance(body, CommentedSeq):
                for i, entry in enumerate(body):
                    self.walk(LISTS[section], entry, f"{section}.{i}")
        if not self.changes:
            return
        if mark is None:
            stated = CommentedMap(format=changes.FORMAT)
            stated.fa.set_flow_style()
            data.insert(0, changes.MARK, stated)
            self.changes.append(Migrated(Where(self.display, 1, 1), f"{changes.MARK}.format: {changes.FORMAT} stated"))
        elif mark["format"] != changes.FORMAT:
            self.note(mark, "format", f"{changes.MARK}.format: {mark['format']} -> {changes.FORMAT}")
            mark["format"] = changes.FORMAT

    def walk(self, model: type[BaseModel], node: Any, dotted: str) -> None:
        if not isinstance(node, CommentedMap):
            return
        for key in list(node):
            change = changes.key_change(model.__name__, str(key))
            if change:
                self.apply(node, key, change, dotted)
            elif key in model.model_fields:
                self.descend(model.model_fields[key].annotation, node[key], f"{dotted}.{key}")
        if model is Rule and node.get("expect") in WAIVERS and not node.get("waives"):
            waives = CommentedSeq(changes.FORMAT_1_CHECKS)
            waives.fa.set_flow_style()
            _append(node, "waives", waives)
            self.note(
                node,
                "expect",
                f"{dotted}.waives: [{', '.join(changes.FORMAT_1_CHECKS)}] added (a {node['expect']} waiver once "
                f"covered every check; keep only those the issue breaks)",
            )

    def descend(self, annotation: Any, value: Any, dotted: str) -> None:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin in (typing.Union, types.UnionType):
            for arg in args:
                self.descend(arg, value, dotted)
        elif origin is list and isinstance(value, CommentedSeq):
            for i, item in enumerate(value):
                self.descend(args[0], item, f"{dotted}.{i}")
        elif origin is dict and isinstance(value, CommentedMap):
            for k, v in value.items():
                self.descend(args[1], v, f"{dotted}.{k}")
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            self.walk(annotation, value, dotted)

    def apply(self, node: CommentedMap, key: Any, change: changes.KeyChange, dotted: str) -> None:
        where = self.at(node, key)
        target = node
        for step in change.to[:-1]:  # the new place's mappings, made where missing
            if step not in target:
                target.insert(list(target).index(key) if target is node else len(target), step, CommentedMap())
            target = target[step]
            if not isinstance(target, CommentedMap):
                self.errors.append(SourceError(where, f"{dotted}.{step} is not a mapping: move {key} by hand"))
                return
        if change.to and change.to[-1] in target:
            self.errors.append(
                SourceError(where, f"{dotted}.{key} is set, and {dotted}.{'.'.join(change.to)} too: keep one")
            )
            return
        pos = list(node).index(key)
        value = node.pop(key)
        own, following = _split(node.ca.items.pop(key, None))
        if following and pos > 0:
            _append_comment(*_last_leaf(node, list(node)[pos - 1]), following)
        if change.to:
            _append(target, change.to[-1], value)
            if own:
                target.ca.items[change.to[-1]] = [None, None, own, None]
            self.changes.append(Migrated(where, f"{dotted}.{key} -> {dotted}.{'.'.join(change.to)}"))
        else:
            self.changes.append(Migrated(where, f"{dotted}.{key} removed: {change.why}"))

    def write(self) -> None:
        """The migrated file in place of the old one, with its mode. The file is the user's own,
        rewritten because they asked (``--migrate``); never through a link (``harness.safe_write``)."""
        out = io.StringIO()
        self.yaml.dump(self.data, out)
        try:
            mode = self.path.stat().st_mode & 0o7777
            safe_write.write_bytes(self.path, out.getvalue().encode("utf-8"), force=True, mode=mode)
        except OSError as err:
            raise MatrixError([SourceError(None, f"{self.path}: cannot write it: {err.strerror}")]) from None
        except safe_write.WriteRefused as err:
            raise MatrixError([SourceError(None, f"cannot write it: {err}")]) from None


def _split(comment: list | None) -> tuple[CommentToken | None, str]:
    """A key's comment as ruamel keeps it, split into the key's own end-of-line comment and the
    comment lines that follow it (up to the next key), which stay where they were."""
    token = comment[2] if comment and len(comment) > 2 else None
    if token is None:
        return None, ""
    own, _, following = token.value.partition("\n")
    return (CommentToken(own + "\n", token.start_mark, None) if own.strip() else None), following


def _last_leaf(node: Any, key: Any) -> tuple[Any, Any]:
    """The last key (or item) written under ``node[key]``, in block style: where the comment lines
    after that entry belong."""
    value = node[key]
    while isinstance(value, (CommentedMap, CommentedSeq)) and len(value) and not value.fa.flow_style():
        node, key = value, (list(value)[-1] if isinstance(value, CommentedMap) else len(value) - 1)
        value = node[key]
    return node, key


def _append(node: CommentedMap, key: str, value: Any) -> None:
    """``node[key] = value`` as the mapping's last entry: the comment lines after what was last
    (before the next entry of the file) stay after the new entry."""
    following = ""
    if len(node):
        leaf, at = _last_leaf(node, list(node)[-1])
        slot = 2 if isinstance(leaf, CommentedMap) else 0
        item = leaf.ca.items.get(at)
        if item and item[slot] is not None:
            own, following = _split([None, None, item[slot]])
            item[slot] = own
    node[key] = value
    if following:
        _append_comment(node, key, following)


def _append_comment(node: Any, key: Any, text: str) -> None:
    slot = 2 if isinstance(node, CommentedMap) else 0
    item = node.ca.items.setdefault(key, [None, None, None, None] if slot == 2 else [None, None])
    if item[slot] is None:
        item[slot] = CommentToken("\n" + text, CommentMark(0), None)
    else:
        item[slot].value += text


def migrate(root: Path) -> list[Migrated]:
    """Rewrite the matrix directory ``root`` to this format; what changed, file by file. Nothing
    is written when any file has a problem (MatrixError names each)."""
    if not root.is_dir():
        raise MatrixError([SourceError(None, f"matrix directory not found: {root}")])
    files, errors = [], []
    for path in matrix_files(root):
        if DATA_DIRS.intersection(path.relative_to(root).parts[:-1]):
            continue
        try:
            f = _File(path, str(path.relative_to(root.parent)) if root.parent in path.parents else str(path))
        except MatrixError as err:
            errors += err.errors
            continue
        f.migrate()
        files.append(f)
        errors += f.errors
    if errors:
        raise MatrixError(errors)
    for f in files:
        if f.changes:
            f.write()
    return [c for f in files for c in sorted(f.changes, key=lambda c: (c.where.line, c.where.column))]


def migrate_for_lint(path: Path | None, matrices: list[Path] | None) -> tuple[list[Path], Iterator[Migration]]:
    """``lint --migrate [PATH]``: migrate PATH (else the --matrices given, else the shipped ones);
    the directories lint then reads (the --matrices given, else those) and what changed in each,
    one directory migrated as each is asked for (so what a later one refuses leaves the earlier said)."""
    roots = [path] if path else (matrices or [DEFAULT_MATRICES])
    return matrices or roots, (Migration(root, migrate(root)) for root in roots)


@dataclass(frozen=True)
class Migration:
    """What ``lint --migrate`` changed in one matrix directory."""

    root: Path
    changes: list[Migrated]

    def lines(self) -> list[str]:
        files = len({c.where.file for c in self.changes})
        return [f"migrated: {change}" for change in self.changes] + [
            f"{self.root}: {len(self.changes)} change(s) in {files} file(s), now matrix format {changes.FORMAT}"
            if self.changes
            else f"{self.root}: nothing to migrate (matrix format {changes.FORMAT})"
        ]

    def to_json(self) -> dict:
        return {
            "root": str(self.root),
            "format": changes.FORMAT,
            "changes": [
                {"file": c.where.file, "line": c.where.line, "column": c.where.column, "message": c.what}
                for c in self.changes
            ],
        }

"""MkDocs hook: the matrix reference page, written from the schema (harness/matrix/schema.py) at
every build, so it cannot drift from what the loader accepts.

`python scripts/docs_hooks.py` prints the page. Each key's notes are the comments the schema's
source puts on its line or just above it; each model's text is its docstring.
"""

from __future__ import annotations

import inspect
import io
import textwrap
import tokenize
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from harness.matrix import schema

PAGE = "reference/matrix.md"

INTRO = """\
# Matrix reference

Every key a matrix file may hold, generated from `harness/matrix/schema.py` when the docs are
built: this page cannot disagree with what the loader accepts. Every model refuses a key it does
not list here, with the closest valid one named ([The matrix](../release-manager/matrix.md)
explains how the sections work together; a walk-through is in
[Adding a family, a feature, a rule](../release-manager/walkthrough.md)).

A matrix file's top-level sections:

| section | holds |
|---|---|
"""


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment on its line of the class body, or the comment lines just above it."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    notes: dict[str, str] = {}
    above: list[str] = []
    lines = source.splitlines()
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text = tok.string.lstrip("#").strip()
        if tok.type == tokenize.COMMENT and not text.startswith(("type:", "noqa")):  # for the tools, not readers
            trailing[tok.start[0]] = text
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if line.startswith("    #"):
            above.append(stripped.lstrip("#").strip())
            continue
        if line.startswith("    ") and not line.startswith("     ") and ":" in stripped:
            name = stripped.split(":", 1)[0]
            if name.isidentifier() and name in model.model_fields:
                own = trailing.get(number, "") if not stripped.startswith("#") else ""
                notes[name] = " ".join([*above, own]).strip()
        above = []
    return notes


def _type(tp: Any, models: list[type[BaseModel]]) -> str:
    """A field's type as a reader writes it in YAML; models link to their section below."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _type(args[0], models)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return " \\| ".join(_type(a, models) for a in kept)
    if origin in (list, tuple):
        return f"list of {_type(args[0], models)}" if args else "list"
    if origin is dict:
        return f"map of {_type(args[0], models)} → {_type(args[1], models)}" if args else "map"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp not in models:
            models.append(tp)
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    if tp is Any:
        return "any"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "map", list: "list"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _constraints(field: Any) -> str:
    said = []
    for m in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥")):
            value = getattr(m, attr, None)
            if value is not None:
                said.append(f"{sign} {value}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            said.append(f"matches `{pattern.strip('^$')}`")
    return ", ".join(said)


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        return "(empty)"
    value = field.default
    if value is PydanticUndefined or value is None:
        return "—"
    if isinstance(value, BaseModel):
        return "(its defaults)"
    if value in ([], {}, ""):
        return "(empty)"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def model_section(model: type[BaseModel], models: list[type[BaseModel]]) -> list[str]:
    notes = _comments(model)
    out = [f"## {model.__name__}", ""]
    if model.__doc__ and model.__doc__ is not schema.Strict.__doc__:
        out += [inspect.cleandoc(model.__doc__), ""]
    out += ["| key | type | default | notes |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        note = "; ".join(x for x in (_constraints(field), notes.get(name, "")) if x)
        out.append(f"| `{key}` | {_type(field.annotation, models)} | {_default(field)} | {_cell(note)} |")
    return [*out, ""]


def matrix_reference() -> str:
    """The whole page: the top-level sections, then every model they reach, in reading order."""
    tops: list[tuple[str, str, type[BaseModel]]] = [
        (section, f"map of name → [{model.__name__}](#{model.__name__.lower()})", model)
        for section, model in schema.SECTIONS.items()
    ]
    tops += [
        ("rules", f"list of [{schema.Rule.__name__}](#rule), first match wins", schema.Rule),
        ("diagnosis", f"list of [{schema.DiagnosisRule.__name__}](#diagnosisrule)", schema.DiagnosisRule),
    ]
    out = [INTRO.rstrip("\n")]
    out += [f"| `{section}` | {holds} |" for section, holds, _ in tops]
    out.append("")
    models = [model for _, _, model in tops]
    done: list[type[BaseModel]] = []
    while len(done) < len(models):
        model = models[len(done)]
        out += model_section(model, models)
        done.append(model)
    return "\n".join(out).rstrip() + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Adds the generated page to the site (nothing is written into docs/)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=matrix_reference()))
    return files


if __name__ == "__main__":
    print(matrix_reference(), end="")

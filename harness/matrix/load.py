"""Loading a matrix directory: every *.yaml file under it, validated and cross-checked.

A file holds any of the sections ``platforms``, ``families``, ``features``, ``topologies``,
``suites`` (mappings of name -> entry), ``rules`` (an ordered list) and ``diagnosis`` (known
symptoms with the log patterns that identify them and advice). Names are global across
files; rules are taken in file path order, then in order within a file, and the first rule that
matches a case decides its expectation.

Several directories can be layered (``load_matrix([shipped, private])``): a later directory adds
entries and replaces an earlier directory's entry of the same name, whole; its rules come before
the earlier directories' rules, so its claims decide first.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.matrix import changes
from harness.matrix import condition as cond
from harness.matrix.attributes import ATTRIBUTES
from harness.matrix.facts import EngineFacts, read_facts
from harness.matrix.requests import RequestFile
from harness.matrix.schema import (
    NAME,
    SECTIONS,
    DiagnosisRule,
    Family,
    Feature,
    Platform,
    Rule,
    Suite,
    Topology,
    Variant,
)
from harness.matrix.source import Document, MatrixError, SourceError, Where, load_document, suggest
from harness.redact import Redactor, secret_name

DEFAULT_MATRICES = Path(__file__).resolve().parents[2] / "matrices"
# Folders of data that matrix entries point at (lm-eval task files and files of explicit requests
# are YAML too): not matrix files.
DATA_DIRS = frozenset({"eval", "requests"})


@dataclass(frozen=True)
class RuleEntry:
    index: int
    rule: Rule
    condition: cond.Condition
    where: Where


@dataclass
class Matrix:
    root: Path
    platforms: dict[str, Platform] = field(default_factory=dict)
    families: dict[str, Family] = field(default_factory=dict)
    features: dict[str, Feature] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    suites: dict[str, Suite] = field(default_factory=dict)
    rules: list[RuleEntry] = field(default_factory=list)
    diagnosis: list[DiagnosisRule] = field(default_factory=list)
    where: dict[tuple[str, str], Where] = field(default_factory=dict)
    # every layered directory, least specific first (root is the first)
    roots: tuple[Path, ...] = ()
    # (section, name) or ("rules", index) -> the document and the path of that entry in it
    positions: dict[tuple[str, str], tuple[Document, tuple]] = field(default_factory=dict)
    # each file read, by the name positions give it: files it names are relative to its folder
    files: dict[str, Path] = field(default_factory=dict)

    def at(self, section: str, name: str, *path: Any) -> Where | None:
        """Position of ``path`` inside an entry (e.g. a serve flag in a variant's list)."""
        found = self.positions.get((section, str(name)))
        if found is None:
            return self.where.get((section, str(name)))
        doc, base = found
        return doc.where((*base, *path))

    def dir_of(self, where: Where | None) -> Path:
        """The directory of the matrix file a declaration stands in (positions name files
        relative to the matrix directory's parent): files the declaration names are relative to it."""
        if where is None or not getattr(where, "file", None):
            return self.root
        if where.file in self.files:
            return self.files[where.file].parent
        path = Path(where.file)
        return (path if path.is_absolute() else self.root.parent / path).parent

    def variant(self, family: str, variant: str) -> Variant:
        return self.families[family].variants[variant]

    def checks_of(self, features: tuple[str, ...] | list[str]) -> set[str]:
        """The checks a feature stack names (``Feature.checks``)."""
        return {name for f in features for name in self.features[f].checks}

    def pools(self, features: tuple[str, ...] | list[str]) -> bool:
        """A stack one of whose features declares the `embeddings` or `classifications` check
        serves a pooling runner: it answers embeddings or classifications, and no completions."""
        return bool(self.pooling_task(features))

    def pooling_task(self, features: tuple[str, ...] | list[str]) -> str:
        """The pooling task a feature stack serves: "embed" (its sequential requests are
        embeddings, compared by cosine), "classify" (classifications: the same label, class
        probabilities within the score tolerance), or "" (a generating runner)."""
        checks = self.checks_of(features)
        return "classify" if "classifications" in checks else "embed" if "embeddings" in checks else ""

    def suite(self, name: str) -> Suite:
        if name not in self.suites:
            raise MatrixError(
                [
                    SourceError(
                        None,
                        f"unknown suite '{name}'{suggest(name, self.suites)}; suites: {', '.join(sorted(self.suites))}",
                    )
                ]
            )
        return self.suites[name]

    def domains(self) -> dict[str, set[str]]:
        return {
            "platform": set(self.platforms),
            "family": set(self.families),
            "variant": {v for f in self.families.values() for v in f.variants},
            "arch": {v.architecture for f in self.families.values() for v in f.variants.values()},
            "topology": set(self.topologies),
            "features": set(self.features),
            "backend": {"mp", "ray", "default"},
            "suite": set(self.suites),
            "origin": {"upstream", "ascend", "upstream+ascend-adapter"},
        }


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


# the fields a tagged union of ppconf's tells its members by (a request's endpoint, a part's type)
TAGS = ("endpoint", "type")


def _tag(model: type[BaseModel]) -> str | None:
    """The value a tagged union tells ``model`` by (its `endpoint` or `type` literal), if it has one."""
    for name in TAGS:
        field = model.model_fields.get(name)
        args = typing.get_args(field.annotation) if field is not None else ()
        if len(args) == 1 and isinstance(args[0], str):
            return args[0]
    return None


def _member_label(step: Any) -> bool:
    """A step pydantic adds to name which member of a plain union it tried (``str``,
    ``list[...]``): not a key of the file."""
    return isinstance(step, str) and (step in ("str", "int", "float", "bool", "none") or step.endswith("]"))


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None, tuple[Any, ...]]:
    """The (nested) model that ``loc`` points into (None where it points into no model), and
    ``loc`` without the steps pydantic adds for a tagged union's member (not keys of the file)."""
    current: Any = model
    kept: list[Any] = []
    for i, step in enumerate(loc):
        if isinstance(step, int):  # an index into a list already unwrapped
            kept.append(step)
            continue
        if _member_label(step) and not (_is_model(current) and step in current.model_fields):
            continue
        if _is_model(current):
            if step not in current.model_fields:
                return None, (*kept, *loc[i:])
            current = current.model_fields[step].annotation
            kept.append(step)
        elif isinstance(current, list):  # the members of a tagged union: the step is a tag
            current = next((m for m in current if _tag(m) == step), None)
            continue
        else:
            kept.append(step)
        # unwrap Annotated, Optional[...], list[...], dict[str, ...] down to a model class, or to
        # the members of a tagged union
        while typing.get_origin(current) in (typing.Annotated, typing.Union, types.UnionType, list, dict):
            if typing.get_origin(current) is typing.Annotated:
                current = typing.get_args(current)[0]
                continue
            args = [a for a in typing.get_args(current) if a is not type(None)]
            models = [a for a in args if _is_model(a)]
            if len(models) > 1 and all(_tag(m) for m in models):
                current = models
                break
            current = models[-1] if models else (args[-1] if args else None)
    return (current if _is_model(current) else None), tuple(kept)


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The (nested) model that ``loc`` points into, or None where it points into no model."""
    return _walk(model, loc)[0]


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid keys of the (nested) model that ``loc`` points into, for typo suggestions."""
    found = _model_at(model, loc)
    return list(found.model_fields) if found else []


def validation_errors(
    doc: Document,
    model: type[BaseModel],
    base: tuple[Any, ...],
    err: ValidationError,
    removed: Mapping[str, str] | None = None,
) -> list[SourceError]:
    """Positioned messages; a key that moved or went (``harness.matrix.changes``, or a key of
    ``removed``: once a setting) says where its choice lives now."""
    out = []
    errors = err.errors()
    for e in errors:
        raw = tuple(e["loc"])
        if _other_member_failed(e, errors):
            continue
        loc = _walk(model, raw)[1]
        full = base + loc
        dotted = ".".join(str(p) for p in full)
        if e["type"] == "extra_forbidden":
            key = loc[-1]
            holder = _model_at(model, raw[:-1])
            change = changes.key_change(holder.__name__, str(key)) if holder else None
            if change:
                out.append(SourceError(doc.where(full), changes.describe(change, dotted)))
                continue
            if isinstance(key, str) and key in (removed or {}):
                out.append(
                    SourceError(doc.where(full), f"{dotted}: '{key}' is no longer a setting: {(removed or {})[key]}")
                )
                continue
            out.append(
                SourceError(
                    doc.where(full), f"{dotted}: unknown key '{key}'{suggest(str(key), _field_names(model, raw[:-1]))}"
                )
            )
            continue
        msg = e["msg"]
        hint = ""
        if e["type"] == "literal_error":
            choices = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
            hint = suggest(str(e.get("input")), choices)
        if e["type"] == "union_tag_invalid":  # a tagged union's tag (an explicit request's endpoint)
            ctx = e.get("ctx", {})
            hint = suggest(str(ctx.get("tag")), re.findall(r"'([^']*)'", str(ctx.get("expected_tags", ""))))
            full = (*full, ctx.get("discriminator", "").strip("'"))
        if e["type"] != "missing" and not isinstance(e.get("input"), (dict, list)):
            # the value, unless its key names a secret; a URL's password or a token in it masked
            shown = "a value not shown (its key names a secret)" if secret_name(str(loc[-1] if loc else "")) else None
            msg += f", got {shown or Redactor().text(repr(e.get('input')))}"
        out.append(SourceError(doc.value_where(full) if loc else doc.where(full), f"{dotted}: {msg}{hint}"))
    return out


def _other_member_failed(e: Any, errors: list[Any]) -> bool:
    """Whether ``e`` only says a value is not of a plain union's scalar member (``str``) while the
    union's other member reports what is wrong inside it: that one is the message."""
    raw = tuple(e["loc"])
    if not raw or raw[-1] not in ("str", "int", "float", "bool") or isinstance(e.get("input"), (str, int, float)):
        return False
    head = raw[:-1]
    return any(len(o["loc"]) > len(raw) and tuple(o["loc"])[: len(head)] == head for o in errors)


def beside(matrix_file: Path) -> dict[str, Any]:
    """The validation context of one matrix file: how a file of explicit requests or of engine
    facts it names (relative to its own directory) is read, a problem in it a ValueError naming its file,
    line and column."""

    def request_file(name: str) -> list[Any]:
        path = matrix_file.parent / name
        if not path.is_file():
            raise ValueError(f"file of requests {path} not found")
        try:
            doc = load_document(path, str(path))
        except MatrixError as err:
            raise ValueError("; ".join(str(e) for e in err.errors)) from None
        try:
            return list(RequestFile.model_validate(doc.root).requests)
        except ValidationError as err:
            raise ValueError("; ".join(str(e) for e in validation_errors(doc, RequestFile, (), err))) from None

    def facts_file(name: str) -> EngineFacts:
        return read_facts(matrix_file.parent / name)

    return {"request_file": request_file, "facts_file": facts_file}


def matrix_files(root: Path) -> list[Path]:
    """Every *.yaml / *.yml under ``root``, through symlinked folders too (a private matrix
    linked in); a link back into a folder already read is not followed twice."""
    files: list[Path] = []
    seen: set[Path] = set()
    for folder, dirs, names in os.walk(root, followlinks=True):
        real = Path(folder).resolve()
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        found = [Path(folder) / n for n in names if n.endswith((".yaml", ".yml"))]
        odd = [p for p in found if not p.is_file()]
        if odd:
            # a dangling link or a FIFO would be skipped silently (or block the read): say so
            raise MatrixError(
                [
                    SourceError(None, f"{p}: a matrix file name, but not a regular file (a dangling link, a FIFO?)")
                    for p in sorted(odd)
                ]
            )
        files += found
    return sorted(files)


def load_matrix(root: Path | str | Sequence[Path | str] | None = None) -> Matrix:
    """One matrix directory, or several layered (later ones add and override)."""
    if root is None:
        roots = [DEFAULT_MATRICES]
    elif isinstance(root, (str, Path)):
        roots = [Path(root)]
    else:
        roots = [Path(r) for r in root] or [DEFAULT_MATRICES]
    matrix = Matrix(root=roots[0], roots=tuple(roots))
    errors: list[SourceError] = []
    layers_rules: list[list[tuple[Document, int, Any]]] = []
    for base in roots:
        if not base.is_dir():
            errors.append(SourceError(None, f"matrix directory not found: {base}"))
            continue
        files = [p for p in matrix_files(base) if not DATA_DIRS.intersection(p.relative_to(base).parts[:-1])]
        if not files:
            errors.append(SourceError(None, f"no *.yaml files in matrix directory {base}"))
            continue
        raw_rules: list[tuple[Document, int, Any]] = []
        layers_rules.append(raw_rules)
        defined_here: set[tuple[str, str]] = set()
        for path in files:
            errors.extend(_load_file(matrix, base, path, raw_rules, defined_here))
    errors.extend(_check_references(matrix))
    attrs = dict(ATTRIBUTES)
    domains = matrix.domains()
    # the most specific layer's rules decide first
    ordered = [r for raw in reversed(layers_rules) for r in raw]
    for doc, i, entry in ordered:
        here = doc.where(("rules", i))
        try:
            rule = Rule.model_validate(entry, context=beside(doc.path))
        except ValidationError as err:
            errors.extend(validation_errors(doc, Rule, ("rules", i), err))
            continue
        try:
            condition = cond.parse(rule.when, attrs, domains)
        except cond.ConditionError as err:
            errors.append(SourceError(doc.value_where(("rules", i, "when")), f"rules[{i}].when: {err}"))
            continue
        index = len(matrix.rules)
        matrix.positions[("rules", str(index))] = (doc, ("rules", i))
        matrix.rules.append(RuleEntry(index=index, rule=rule, condition=condition, where=here))
    if errors:
        raise MatrixError(errors)
    return matrix


def _load_file(matrix: Matrix, base: Path, path: Path, raw_rules: list, defined_here: set) -> list[SourceError]:
    errors: list[SourceError] = []
    display = str(path.relative_to(base.parent)) if base.parent in path.parents else str(path)
    if matrix.files.get(display, path) != path:  # two layers in folders of the same name
        display = str(path)
    matrix.files[display] = path
    try:
        doc = load_document(path, display)
    except MatrixError as err:
        return list(err.errors)
    if doc.root is None:
        return errors
    data = doc.root
    if not isinstance(data, dict):
        return [SourceError(doc.where(), "a matrix file must be a mapping of sections")]
    problem = changes.format_problem(data[changes.MARK]) if changes.MARK in data else None
    if problem:  # alone: the keys of a format this ppconf does not know would only be misread
        inner, message = problem
        mark = (changes.MARK, inner) if inner else (changes.MARK,)
        return [SourceError(doc.value_where(mark) if inner else doc.where(mark), message)]
    for section, body in data.items():
        if section == changes.MARK:
            continue
        if section == "rules":
            if not isinstance(body, list):
                errors.append(SourceError(doc.where(("rules",)), "rules must be a list"))
                continue
            raw_rules.extend((doc, i, entry) for i, entry in enumerate(body))
            continue
        if section == "diagnosis":
            if not isinstance(body, list):
                errors.append(SourceError(doc.where(("diagnosis",)), "diagnosis must be a list"))
                continue
            for i, entry in enumerate(body):
                try:
                    matrix.diagnosis.append(DiagnosisRule.model_validate(entry))
                except ValidationError as err:
                    errors.extend(validation_errors(doc, DiagnosisRule, ("diagnosis", i), err))
            continue
        model = SECTIONS.get(section)
        if model is None:
            errors.append(
                SourceError(
                    doc.where((section,)),
                    f"unknown section '{section}'{suggest(section, [*SECTIONS, 'rules', 'diagnosis', changes.MARK])}",
                )
            )
            continue
        if not isinstance(body, dict):
            errors.append(SourceError(doc.where((section,)), f"{section} must be a mapping of name -> entry"))
            continue
        target: dict[str, Any] = getattr(matrix, section)
        for name, entry in body.items():
            name = str(name)
            here = doc.where((section, name))
            if not re.fullmatch(NAME, name):
                errors.append(SourceError(here, f"{section}: name '{name}' must match {NAME}"))
                continue
            if (section, name) in defined_here:
                errors.append(
                    SourceError(here, f"{section}: '{name}' is already defined at {matrix.where[(section, name)]}")
                )
                continue
            try:
                target[name] = model.model_validate(entry, context=beside(path))
            except ValidationError as err:
                errors.extend(validation_errors(doc, model, (section, name), err))
                continue
            if section == "families":
                target[name], bad = _zoo_spec_files(target[name], path.parent, doc, name)
                errors.extend(bad)
            # an earlier layer's entry of this name is replaced whole
            defined_here.add((section, name))
            matrix.where[(section, name)] = here
            matrix.positions[(section, name)] = (doc, (section, name))
    return errors


def _zoo_spec_files(family: Family, folder: Path, doc: Document, name: str) -> tuple[Family, list[SourceError]]:
    """``zoo:PATH.json`` (a tiny model from the user's config.json) names PATH from the folder of
    the matrix file that says it; it becomes absolute here, so plans, runs and other layers need
    not know where it was written. A file that is not there is an error at its line."""
    errors: list[SourceError] = []
    variants = dict(family.variants)
    for vname, v in family.variants.items():
        update: dict[str, Any] = {}
        refs: dict[tuple[str, ...], str] = {("model",): v.model} | {("drafters", k): d for k, d in v.drafters.items()}
        for loc, ref in refs.items():
            if not (ref.startswith("zoo:") and ref.endswith(".json")):
                continue
            path = Path(ref[4:]).expanduser()
            path = path if path.is_absolute() else (folder / path).resolve()
            if not path.is_file():
                where = doc.where(("families", name, "variants", vname, *loc))
                errors.append(
                    SourceError(
                        where, f"families.{name}.variants.{vname}.{'.'.join(loc)}: {ref!r}: no such file {path}"
                    )
                )
                continue
            if loc == ("model",):
                update["model"] = f"zoo:{path}"
            else:
                update.setdefault("drafters", dict(v.drafters))[loc[-1]] = f"zoo:{path}"
        if update:
            variants[vname] = v.model_copy(update=update)
    if variants == family.variants:
        return family, errors
    return family.model_copy(update={"variants": variants}), errors


# Speculative methods that draft without a model of their own: n-gram lookup, and MTP heads
# inside the target's checkpoint (vllm/config/speculative.py).
SELF_DRAFTING = frozenset({"ngram", "suffix", "mtp", "deepseek_mtp"})


def _reference_drafter_problem(m: Matrix, variant: Variant) -> str | None:
    """Why a variant's ``reference_drafter`` cannot be what a plain reference drafts with, if it
    cannot: it is no feature, drafts nothing, needs other features (a reference keeping only it
    could not launch it), or drafts with a model the variant does not name in ``drafters``."""
    name = variant.reference_drafter
    if name is None:
        return None
    if name not in m.features:
        return f"unknown feature '{name}'{suggest(name, m.features)}"
    feature = m.features[name]
    spec = feature.configs.get("speculative-config")
    if spec is None:
        return f"feature '{name}' drafts no tokens (it gives no speculative-config)"
    if feature.requires:
        return f"feature '{name}' requires {', '.join(feature.requires)}: a reference keeps it alone"
    method = str(spec.get("method", ""))
    if method not in SELF_DRAFTING and "model" not in spec and method not in variant.drafters:
        return (
            f"feature '{name}' drafts with a {method!r} model the variant's drafters do not name"
            f"{suggest(method, variant.drafters)}"
        )
    return None


def _check_references(m: Matrix) -> list[SourceError]:
    errors: list[SourceError] = []

    def unknown(section: str, name: str, what: str, value: str, pool: Any) -> None:
        errors.append(
            SourceError(
                m.where.get((section, name)), f"{section}.{name}: unknown {what} '{value}'{suggest(value, pool)}"
            )
        )

    for fname, family in m.families.items():
        for vname, variant in family.variants.items():
            for p in variant.platforms:
                if p not in m.platforms:
                    unknown("families", fname, f"platform in variant {vname}", p, m.platforms)
            problem = _reference_drafter_problem(m, variant)
            if problem is not None:
                errors.append(
                    SourceError(
                        m.at("families", fname, "variants", vname, "reference_drafter"),
                        f"families.{fname}.variants.{vname}.reference_drafter: {problem}",
                    )
                )
    for name, feature in m.features.items():
        for other in [*feature.requires, *feature.conflicts]:
            if other not in m.features:
                unknown("features", name, "feature", other, m.features)
    for name, suite in m.suites.items():
        if suite.platform not in m.platforms:
            unknown("suites", name, "platform", suite.platform, m.platforms)
        for group in suite.groups:
            for ref in group.families:
                if ref == "*":
                    continue
                fam, _, var = ref.partition("/")
                if fam not in m.families:
                    unknown("suites", name, "family", fam, m.families)
                elif var and var != "*" and var not in m.families[fam].variants:
                    unknown("suites", name, f"variant of {fam}", var, m.families[fam].variants)
            for topo in group.topologies:
                if topo not in m.topologies:
                    unknown("suites", name, "topology", topo, m.topologies)
            for stack in group.features:
                for feat in stack.split("+"):
                    if feat != "none" and feat not in m.features:
                        unknown("suites", name, "feature", feat, m.features)
            for feat in group.toggles:
                if feat not in m.features:
                    unknown("suites", name, "feature", feat, m.features)
            for role in ("prefill", "decode"):
                side = getattr(group, role)
                for feat in side.skip_features if side else ():
                    if feat not in m.features:
                        unknown("suites", name, f"feature in a group's {role}.skip_features", feat, m.features)
    return errors

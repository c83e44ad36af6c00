"""The attribute layout of vLLM's model runners, read from the installed engine's source with
``ast`` (nothing of vLLM is imported: the V2 runner needs GPU pieces), and checked against what
the stage probe (harness/target/worker_probe.py, ``RUNNER_LAYOUTS``) reads from a runner.

Used by tests/test_runner_contract.py (the contract) and tests/test_worker_probe.py (runners
built from the extracted names, so the probe's V2 answers in tests are not written by hand)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "harness" / "target" / "worker_probe.py"


@dataclass(frozen=True)
class RunnerSource:
    """Where one runner and the base class of its drafters are defined, relative to vLLM's package."""

    runner: str
    runner_class: str
    drafter: str
    drafter_class: str


SOURCES = {
    "v2": RunnerSource(
        "v1/worker/gpu/model_runner.py",
        "GPUModelRunner",
        "v1/worker/gpu/spec_decode/speculator.py",
        "DraftModelSpeculator",
    ),
    "v1": RunnerSource(
        "v1/worker/gpu_model_runner.py",
        "GPUModelRunner",
        "v1/spec_decode/llm_base_proposer.py",
        "SpecDecodeBaseProposer",
    ),
}

# a call that builds a drafter: NgramProposer(...), create_custom_proposer(...), init_speculator(...)
_DRAFTER_CALL = re.compile(r"proposer|speculator", re.I)

# a call that loads the draft model: self._get_model(), self.load_draft_model(...)
_MODEL_CALL = re.compile(r"model$", re.I)


@dataclass(frozen=True)
class Layout:
    """What one runner class's source says it holds."""

    where: str  # file:class
    always: frozenset[str]  # assigned by a statement of __init__'s own body: present on every rank
    assigned: frozenset[str]  # assigned anywhere in the class
    drafters: dict[str, int]  # attributes __init__ assigns a proposer or speculator -> first line
    model: dict[str, int]  # attributes load_model assigns what the model loader loads -> line
    draft_model: frozenset[str]  # attributes the drafters' base class's load_model assigns a model


def vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # finds the package without running it
    assert spec is not None and spec.submodule_search_locations, "vLLM is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def _class(source: str, name: str, where: str) -> ast.ClassDef:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"{where}: no class {name}")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _self_assignments(nodes) -> list[tuple[str, ast.expr | None, int]]:
    """(attribute, value, line) of every ``self.<attribute> = ...`` among ``nodes``."""
    out = []
    for node in nodes:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                out.append((t.attr, value, node.lineno))
    return out


def _calls(value: ast.expr | None) -> list[str]:
    names = []
    for node in ast.walk(value) if value is not None else ():
        if isinstance(node, ast.Call):
            f = node.func
            names.append(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
    return names


def extract(runner: str, runner_class: str, drafter: str, drafter_class: str, where: str = "") -> Layout:
    """The layout of ``runner_class`` in the source text ``runner``, and of its drafters' base class
    ``drafter_class`` in ``drafter``."""
    cls = _class(runner, runner_class, where)
    init, load = _method(cls, "__init__"), _method(cls, "load_model")
    everywhere = _self_assignments(ast.walk(cls))
    in_init = _self_assignments(ast.walk(init)) if init else []
    drafters: dict[str, int] = {}
    for attr, value, line in in_init:
        if any(_DRAFTER_CALL.search(c) for c in _calls(value)):
            drafters.setdefault(attr, line)
    model = {
        attr: line
        for attr, value, line in (_self_assignments(ast.walk(load)) if load else [])
        if "load_model" in _calls(value)
    }
    dcls = _class(drafter, drafter_class, where)
    dload = _method(dcls, "load_model")
    return Layout(
        where=f"{where}:{runner_class}",
        always=frozenset(a for a, _, _ in _self_assignments(init.body if init else [])),
        assigned=frozenset(a for a, _, _ in everywhere),
        drafters=drafters,
        model=model,
        draft_model=frozenset(
            a
            for a, v, _ in _self_assignments(ast.walk(dload) if dload else [])
            if any(_MODEL_CALL.search(c) for c in _calls(v))
        ),
    )


def installed(root: Path | None = None) -> dict[str, Layout]:
    """The layout of each runner of the installed vLLM (a fresh dict: callers may replace one)."""
    return dict(_installed(root or vllm_root()))


@functools.cache
def _installed(root: Path) -> dict[str, Layout]:
    out = {}
    for version, src in SOURCES.items():
        out[version] = extract(
            (root / src.runner).read_text(),
            src.runner_class,
            (root / src.drafter).read_text(),
            src.drafter_class,
            where=f"vllm/{src.runner}",
        )
    return out


def probe_layouts(path: Path = PROBE) -> dict[str, dict[str, str]]:
    """``RUNNER_LAYOUTS`` as the probe's source states it (read, not imported: the probe imports torch)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "RUNNER_LAYOUTS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path}: no RUNNER_LAYOUTS")


def problems(wanted: dict[str, dict[str, str]], layouts: dict[str, Layout]) -> list[str]:
    """Every name the probe reads that the runners' source no longer holds where the probe looks."""
    out = []
    order = list(wanted)
    for i, (version, want) in enumerate(wanted.items()):
        got = layouts[version]
        marker = want["marker"]
        if marker not in got.always:
            out.append(
                f"{got.where}: the probe tells the {version} runner by `{marker}`, which its __init__ "
                f"no longer assigns on every path"
            )
        # the probe checks layouts in order: no later runner may carry an earlier runner's marker
        for other in order[i + 1 :]:
            if marker in layouts[other].assigned:
                out.append(
                    f"{layouts[other].where}: assigns `{marker}`, the attribute that tells the {version} runner: "
                    f"the probe would take this {other} runner for {version}"
                )
        if want["drafter"] not in got.drafters:
            held = ", ".join(f"`{a}` (line {n})" for a, n in got.drafters.items()) or "no attribute"
            out.append(
                f"{got.where}: the probe reads the drafter from `{want['drafter']}`; __init__ builds it into {held}"
            )
        if want["model"] not in got.model:
            held = ", ".join(f"`{a}` (line {n})" for a, n in got.model.items()) or "no attribute"
            out.append(
                f"{got.where}: the probe reads the model from `{want['model']}`; load_model loads it into {held}"
            )
        if want["draft_model"] not in got.draft_model:
            out.append(
                f"{SOURCES[version].drafter}:{SOURCES[version].drafter_class}: the probe reads the draft model from "
                f"`{want['draft_model']}`, which its load_model does not load a model into"
            )
    return out

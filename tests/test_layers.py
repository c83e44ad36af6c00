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

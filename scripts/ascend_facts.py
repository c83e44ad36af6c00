"""Write matrices/ascend/vllm-ascend-facts.json from a vllm-ascend checkout: the facts `ppconf lint
--plans` checks Ascend plans against, read from vllm-ascend's own source instead of kept by hand.

    python scripts/ascend_facts.py SOURCE [--commit REV] [--out FILE]

SOURCE is a vllm-ascend git repository (a work tree or a bare git directory; REV, default HEAD,
is read with `git ls-tree` / `git cat-file`, so the work tree's state does not matter) or a plain
directory laid out as one (then --commit names what it is a copy of). What it reads:

- the ``--additional-config`` keys: every key the package (``vllm_ascend/**/*.py``) reads from
  ``additional_config`` (``.get``, ``[...]``, ``in``, ``_get_config_value``), with the keys of
  each sub-config read the same way through the classes the value is handed to (their
  ``_defaults`` included); a sub-config whose class takes ``**kwargs`` is open. A key only tested
  to raise (``if "k" in additional_config: raise ...``) is listed as removed, with its message;
- the environment variables it reads: ``vllm_ascend/envs.py``'s ``env_variables`` and every
  ``os.getenv`` / ``os.environ`` read in the package;
- the port ranges its transports reserve, where its documentation states them (the Mooncake
  P/D tutorial's AscendDirectTransport range, ``[first, first + NPUs per node x per_device)``).

The file records the commit it was read at; a source in which a fact is no longer found is an
error, not an empty list.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "matrices" / "ascend" / "vllm-ascend-facts.json"
PACKAGE = "vllm_ascend/"
ENVS = "vllm_ascend/envs.py"
DOCS = "docs/source/"
REPOSITORY = "vllm-project/vllm-ascend"
# "... Mooncake uses AscendDirectTransport for RDMA data transfer, which randomly allocates ports
# within range `[20000, 20000 + npu_per_node × 1000)`."
RESERVED = re.compile(
    r"(?P<user>\w+) uses (?P<transport>\w+Transport)\b[^`]*?range `\[(?P<first>\d+), (?P=first) \+ "
    r"npu_per_node\s*[×x*]\s*(?P<per_device>\d+)\)`"
)


class Tree:
    """The files of a checkout at one commit: a git repository read at a revision, or a folder."""

    def __init__(self, source: Path, rev: str | None):
        self.source = source
        # a repository of its own (not a folder inside another one, as a test's copy is)
        bare = (_git(source, "rev-parse", "--is-bare-repository", check=False) or "").strip() == "true"
        self.git = bare or (source / ".git").exists()
        if self.git:
            self.commit = _git(source, "rev-parse", f"{rev or 'HEAD'}^{{commit}}").strip()
            listing = _git(source, "ls-tree", "-r", "--full-tree", self.commit)
            self._blobs = {
                path: meta.split()[2]
                for meta, path in (line.split("\t", 1) for line in listing.splitlines())
                if meta.split()[1] == "blob"
            }
        else:
            if not rev:
                raise SystemExit(f"{source} is not a git repository: name the commit it is a copy of (--commit)")
            self.commit = rev
            self._blobs = {p.relative_to(source).as_posix(): "" for p in source.rglob("*") if p.is_file()}

    def paths(self, prefix: str, suffix: str) -> list[str]:
        return sorted(p for p in self._blobs if p.startswith(prefix) and p.endswith(suffix))

    def texts(self, paths: list[str]) -> dict[str, str]:
        if not self.git:
            return {p: (self.source / p).read_text(encoding="utf-8") for p in paths}
        batch = subprocess.run(
            ["git", "-C", str(self.source), "cat-file", "--batch"],
            input="".join(f"{self._blobs[p]}\n" for p in paths).encode(),
            capture_output=True,
            check=True,
        ).stdout
        out, at = {}, 0
        for p in paths:
            header_end = batch.index(b"\n", at)
            size = int(batch[at:header_end].split()[2])
            out[p] = batch[header_end + 1 : header_end + 1 + size].decode("utf-8", errors="replace")
            at = header_end + 1 + size + 1
        return out


def _git(source: Path, *args: str, check: bool = True) -> str | None:
    done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True)
    if done.returncode:
        if check:
            raise SystemExit(f"git {' '.join(args)} in {source}: {done.stderr.strip()}")
        return None
    return done.stdout


# --- --additional-config keys -----------------------------------------------------------------


@dataclass
class Key:
    read_in: str
    keys: dict[str, Key] = field(default_factory=dict)
    open: bool = False

    def as_json(self) -> dict:
        out: dict = {"read_in": self.read_in}
        if self.open:
            out["open"] = True
        if self.keys:
            out["keys"] = {k: self.keys[k].as_json() for k in sorted(self.keys)}
        return out


KeyPath = tuple[str, ...]


class ConfigReader:
    """Follows ``additional_config`` through the package: each value read from it, the names it
    is bound to, and the classes it is handed to, recording every key read on the way."""

    def __init__(self, modules: dict[str, ast.Module]):
        self.modules = modules
        self.root = Key("")
        self.removed: dict[str, dict[str, str]] = {}
        self.classes: dict[str, tuple[str, ast.ClassDef]] = {}
        for path, tree in modules.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, (path, node))
        self._done: set[tuple[str, tuple]] = set()

    def read(self) -> None:
        for path, tree in self.modules.items():
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._function(path, fn, {})

    def _note(self, at: KeyPath, path: str, node: ast.AST) -> Key:
        key = self.root
        for step in at:
            key = key.keys.setdefault(step, Key(f"{path}:{node.lineno}"))
        return key

    def _path(self, e: ast.expr, env: dict[str, KeyPath]) -> KeyPath | None:
        """Where in the additional config the value of ``e`` comes from, if it does."""
        if isinstance(e, ast.Name):
            return () if e.id == "additional_config" else env.get(e.id)
        if isinstance(e, ast.Attribute) and e.attr == "additional_config":
            return ()
        if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or):
            return self._path(e.values[0], env)
        if isinstance(e, ast.IfExp):
            return self._path(e.orelse, env) or self._path(e.body, env)
        if isinstance(e, ast.Subscript) and _string(e.slice) is not None:
            base = self._path(e.value, env)
            return None if base is None else (*base, _string(e.slice))
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.args:
            name = _string(e.args[0])
            if e.func.attr in ("get", "setdefault", "pop") and name is not None:
                base = self._path(e.func.value, env)
                return None if base is None else (*base, name)
            if e.func.attr.endswith("_get_config_value"):
                return self._config_value(e, env)
        return None

    def _config_value(self, call: ast.Call, env: dict[str, KeyPath]) -> KeyPath | None:
        # vllm-ascend's helper: (config, [additional_config,] key, ...); the key is read from the
        # first mapping, and from the top level too where additional_config comes after it
        # (the top-level spelling is the deprecated alias of a scheduler_config key)
        names = [i for i, a in enumerate(call.args) if _string(a) is not None]
        if not names:
            return None
        key = _string(call.args[names[0]])
        base = self._path(call.args[0], env)
        if base is None:
            return None
        if base and any(self._path(a, env) == () for a in call.args[1 : names[0]]):
            self._top_alias.append(key)
        return (*base, key)

    def _function(self, path: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, KeyPath]) -> None:
        env = dict(env)
        for node in _walk_in_order(fn):
            self._top_alias: list[str] = []
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                at = self._path(node.value, env)
                if at is not None:
                    env[node.targets[0].id] = at
            if isinstance(node, ast.If):
                self._removed(path, node, env)
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
                name, base = _string(node.left), self._path(node.comparators[0], env)
                if name is not None and base is not None and not self._is_removed(base, name):
                    self._note((*base, name), path, node)
            if isinstance(node, (ast.Subscript, ast.Call)):
                at = self._path(node, env)
                if at and not self._is_removed(at[:-1], at[-1]):
                    self._note(at, path, node)
                    for alias in self._top_alias:
                        self._note((alias,), path, node)
            if isinstance(node, ast.Call):
                self._handed(path, node, env)

    def _is_removed(self, base: KeyPath, name: str) -> bool:
        return base == () and name in self.removed

    def _removed(self, path: str, node: ast.If, env: dict[str, KeyPath]) -> None:
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)):
            return
        name = _string(test.left)
        if name is None or self._path(test.comparators[0], env) != () or not isinstance(node.body[0], ast.Raise):
            return
        raised = node.body[0].exc
        strings = ast.walk(raised) if raised is not None else ()
        message = "".join(s.value for s in strings if isinstance(s, ast.Constant) and isinstance(s.value, str))
        self.removed[name] = {"read_in": f"{path}:{node.lineno}", "message": message}
        self.root.keys.pop(name, None)

    def _handed(self, path: str, call: ast.Call, env: dict[str, KeyPath]) -> None:
        """A value from the additional config handed to a class of the package: what its
        ``__init__`` reads from the parameter it lands in is read from that value."""
        name = call.func.id if isinstance(call.func, ast.Name) else None
        if name not in self.classes:
            return
        cpath, cls = self.classes[name]
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return
        params = [a.arg for a in init.args.args[1:]]
        bound: dict[str, KeyPath] = {}
        for i, arg in enumerate(call.args):
            at = self._path(arg, env)
            if at is not None and i < len(params):
                bound[params[i]] = at
        for kw in call.keywords:
            at = self._path(kw.value, env)
            if at is None:
                continue
            if kw.arg is not None:
                bound[kw.arg] = at
                continue
            # **value: its keys are the named parameters, and any key where __init__ takes **kwargs
            key = self._note(at, path, call)
            for p in params:
                self._note((*at, p), cpath, init)
            if init.args.kwarg is not None:
                key.open = True
                bound[init.args.kwarg.arg] = at
        defaults = _class_defaults(cls)
        for at in bound.values():
            if at:
                for d in defaults:
                    self._note((*at, d), cpath, cls)
        signature = (name, tuple(sorted(bound.items())))
        if bound and signature not in self._done:
            self._done.add(signature)
            self._function(cpath, init, bound)
            for method in cls.body:  # the validation helpers of the class read what __init__ kept
                if isinstance(method, ast.FunctionDef) and method.name != "__init__":
                    self._function(cpath, method, {})


def _class_defaults(cls: ast.ClassDef) -> list[str]:
    """The keys of a class-level ``_defaults`` / ``_DEFAULTS`` mapping (the sub-config's keys)."""
    for node in cls.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        target = node.target if isinstance(node, ast.AnnAssign) else target
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and target.id.lower() == "_defaults" and isinstance(value, ast.Dict):
            return [k for k in (_string(k) for k in value.keys if k is not None) if k is not None]
    return []


def _walk_in_order(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function in source order, nested functions and classes left out."""
    for child in ast.iter_child_nodes(fn):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield child
        yield from _walk_in_order(child)


def _string(e: ast.AST | None) -> str | None:
    return e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None


# --- environment variables --------------------------------------------------------------------


def env_names(modules: dict[str, ast.Module]) -> dict[str, str]:
    """Each variable name the package reads, with the first place that reads it."""
    found: dict[str, str] = {}

    def add(name: str | None, path: str, node: ast.AST) -> None:
        if name and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            found.setdefault(name, f"{path}:{node.lineno}")

    declared = modules.get(ENVS)
    if declared is None:
        raise SystemExit(f"{ENVS} not found: vllm-ascend's environment variables moved")
    for node in ast.walk(declared):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "env_variables" and isinstance(node.value, ast.Dict):
            for k in node.value.keys:
                add(_string(k), ENVS, k)
    if not found:
        raise SystemExit(f"{ENVS}: no env_variables mapping found")
    for path, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr == "getenv" and _is_os(f.value):
                    add(_string(node.args[0]), path, node)
                if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault") and _is_environ(f.value):
                    add(_string(node.args[0]), path, node)
            if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
                add(_string(node.slice), path, node)
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                if _is_environ(node.comparators[0]):
                    add(_string(node.left), path, node)
    return found


def _is_os(e: ast.expr) -> bool:
    return isinstance(e, ast.Name) and e.id == "os"


def _is_environ(e: ast.expr) -> bool:
    return (isinstance(e, ast.Attribute) and e.attr == "environ" and _is_os(e.value)) or (
        isinstance(e, ast.Name) and e.id == "environ"
    )


# --- reserved port ranges ---------------------------------------------------------------------


def reserved_ports(docs: dict[str, str]) -> list[dict]:
    """The port ranges a transport allocates from, as vllm-ascend's documentation states them."""
    out = []
    for path, text in docs.items():
        for match in RESERVED.finditer(text):
            out.append(
                {
                    "transport": match["transport"],
                    "used_by": match["user"],
                    "first": int(match["first"]),
                    "per_device": int(match["per_device"]),
                    "read_in": f"{path}:{text.count(chr(10), 0, match.start()) + 1}",
                }
            )
    if not out:
        raise SystemExit(f"no transport's reserved port range found under {DOCS}: the statement moved")
    return out


# --- the facts file ---------------------------------------------------------------------------


def facts(tree: Tree) -> dict:
    sources = tree.texts(tree.paths(PACKAGE, ".py"))
    modules = {}
    for path, text in sources.items():
        try:
            modules[path] = ast.parse(text, filename=path)
        except SyntaxError as err:
            raise SystemExit(f"{path}:{err.lineno}: not Python this script can parse: {err.msg}") from None
    reader = ConfigReader(modules)
    reader.read()
    if not reader.root.keys:
        raise SystemExit(f"no additional_config key read under {PACKAGE}: its configuration moved")
    return {
        "source": {"repository": REPOSITORY, "commit": tree.commit},
        "additional_config": {k: reader.root.keys[k].as_json() for k in sorted(reader.root.keys)},
        "removed_additional_config": dict(sorted(reader.removed.items())),
        "env": {k: {"read_in": v} for k, v in sorted(env_names(modules).items())},
        "reserved_ports": sorted(
            reserved_ports(tree.texts(tree.paths(DOCS, ".md"))), key=lambda r: (r["transport"], r["read_in"])
        ),
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a vllm-ascend checkout (work tree or git directory)")
    parser.add_argument("--commit", help="the revision to read (default HEAD); required for a plain folder")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    text = render(facts(Tree(args.source, args.commit)))
    args.out.write_text(text, encoding="utf-8")
    data = json.loads(text)
    print(
        f"{args.out}: {len(data['additional_config'])} additional-config keys, {len(data['env'])} env names, "
        f"{len(data['reserved_ports'])} reserved port range(s), from {REPOSITORY}@{data['source']['commit']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

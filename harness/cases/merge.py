"""One merge of a case's serve flags, env and JSON configs, with one stated precedence.

Layers, least specific first:

    platform < topology < variant (the family's) < the variant's P/D side < features < suite
    < suite group < rule

A more specific layer replaces a flag's value (or an env value, or a key of a JSON flag) that a
less specific one gave; it never appends a second copy, which argparse would silently resolve
by keeping the last. Entries of the same layer (two stacked features) that give one flag, env
name or JSON key different values are an error naming both, unless a more specific layer sets
it and so decides. JSON flags (``--speculative-config``, ``--hf-overrides`` …) merge key by key,
whether a layer gives them as ``configs`` or as the flag in its args. Within the env of one
level, its per-backend env (``backend_env: {ray: …}``) is more specific than its plain env, and
applies to vLLM processes only (never to ``ray start``).

Every value keeps its origins (``file:line:col (what)``), so a plan checked later can say which
matrix entries contributed a flag.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from harness import json_input
from harness.matrix.load import Matrix
from harness.matrix.schema import JSON_FLAGS

LEVELS = ("platform", "topology", "variant", "variant-side", "features", "suite", "group", "group-side", "rule")

# Flags vLLM spells with a --no- prefix for the same destination (BooleanOptionalAction).
_NUMBER = re.compile(r"^-\d")
PCP_FLAGS = ("--prefill-context-parallel-size", "-pcp")


@dataclass(frozen=True)
class Layer:
    level: str  # one of LEVELS
    name: str  # e.g. "feature pcp", for messages
    args: tuple[tuple[str, str], ...] = ()  # (token, origin)
    env: tuple[tuple[str, str, str], ...] = ()  # (name, value, origin)
    configs: tuple[tuple[str, dict, str], ...] = ()  # (json flag without --, fragment, origin)
    backend_env: tuple[tuple[str, str, str], ...] = ()  # for vLLM processes of the backend only

    @property
    def rank(self) -> int:
        return LEVELS.index(self.level)


@dataclass(frozen=True)
class Unit:
    """One flag as given: ``--flag v1 v2`` or ``--flag=v``."""

    flag: str
    values: tuple[str, ...]
    origin: str

    @property
    def key(self) -> str:
        return "--" + self.flag[5:] if self.flag.startswith("--no-") else self.flag

    def tokens(self) -> list[str]:
        return [self.flag, *self.values]


@dataclass
class Merged:
    head: list[Unit] = field(default_factory=list)  # the topology's flags, in their order
    tail: list[Unit] = field(default_factory=list)  # everything else, in order of first appearance
    configs: dict[str, dict] = field(default_factory=dict)
    config_origins: dict[str, list[str]] = field(default_factory=dict)  # json flag -> origins
    env: dict[str, str] = field(default_factory=dict)  # without backend env (ray start)
    vllm_env: dict[str, str] = field(default_factory=dict)  # with it (vLLM processes)
    env_origins: dict[str, list[str]] = field(default_factory=dict)
    flag_origins: dict[str, list[str]] = field(default_factory=dict)  # flag key -> origins
    errors: list[str] = field(default_factory=list)

    def args(self, part: str = "tail") -> list[str]:
        return [t for u in getattr(self, part) for t in u.tokens()]

    def value(self, *flags: str) -> str | None:
        for u in (*self.head, *self.tail):
            if u.flag in flags and u.values:
                return u.values[-1]
        return None

    @property
    def pcp(self) -> int:
        return _int(self.value(*PCP_FLAGS))


def _int(text: str | None) -> int:
    try:
        return max(1, int(text)) if text is not None else 1
    except ValueError:
        return 1  # not a number: the engine's own parser reports it (harness.plan.validate)


def units(tokens: tuple[tuple[str, str], ...], errors: list[str], what: str) -> list[Unit]:
    out: list[Unit] = []
    for token, origin in tokens:
        if token.startswith("-") and not _NUMBER.match(token):
            flag, eq, value = token.partition("=")
            out.append(Unit(flag, (value,) if eq else (), origin))
        elif out:
            out[-1] = Unit(out[-1].flag, (*out[-1].values, token), out[-1].origin)
        else:
            errors.append(f"{origin}: {what}: value {token!r} comes before any flag")
    return out


@dataclass
class _Slot:
    rank: int
    value: Any
    origins: list[str]
    layer: str
    conflict: list[str] = field(default_factory=list)  # same-level entries that disagree


def _put(slots: dict, key: Any, rank: int, value: Any, origin: str, layer: str, errors: list[str], label: str) -> None:
    prev = slots.get(key)
    if prev is None or prev.rank < rank:
        slots[key] = _Slot(rank, value, (prev.origins if prev else []) + [origin], layer)
    elif prev.layer == layer:
        errors.append(f"{label} is given twice by {layer}: at {prev.origins[-1]} and at {origin}")
    elif _same(prev.value, value):
        prev.origins.append(origin)
    else:
        prev.conflict.append(f"{_show(value)} from {layer} at {origin}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Unit) and isinstance(b, Unit):
        return (a.flag, a.values) == (b.flag, b.values)
    return a == b


def _unsettled(slots: dict, label) -> list[str]:
    return [
        f"{label(k)} has different values from two {LEVELS[s.rank]} entries: {_show(s.value)} from {s.layer} at "
        f"{s.origins[-1]} and {'; '.join(s.conflict)}; set it in a more specific layer (suite, suite group or "
        f"rule) to decide"
        for k, s in slots.items()
        if s.conflict
    ]


def _show(value: Any) -> str:
    return repr(" ".join(value.tokens())) if isinstance(value, Unit) else repr(value)


def _leaves(value: dict, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out = []
    for k, v in value.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, (*path, k))
        else:
            out.append(((*path, k), v))
    return out


def merge(layers: list[Layer]) -> Merged:
    result = Merged()
    errors = result.errors
    flags: dict[str, _Slot] = {}
    order: list[str] = []
    head_keys: list[str] = []
    configs: dict[tuple, _Slot] = {}
    env: dict[str, _Slot] = {}
    vllm_env: dict[str, _Slot] = {}
    for layer in sorted(layers, key=lambda l: l.rank):  # stable: same-level layers keep their order
        for u in units(layer.args, errors, layer.name):
            name = u.flag[2:]
            if name in JSON_FLAGS and len(u.values) == 1:
                try:
                    fragment = json_input.loads(u.values[0], str(u.origin))
                except ValueError as err:  # JsonInputError too: nested beyond json_input.MAX_DEPTH
                    errors.append(f"{u.origin}: {layer.name}: {u.flag} is not valid JSON: {err}")
                    continue
                if not isinstance(fragment, dict):
                    errors.append(f"{u.origin}: {layer.name}: {u.flag} must be a JSON object, got {u.values[0]!r}")
                    continue
                layer_configs: tuple[tuple[str, dict, str], ...] = ((name, fragment, u.origin),)
            else:
                layer_configs = ()
                if u.key not in flags:
                    (head_keys if layer.level == "topology" else order).append(u.key)
                _put(flags, u.key, layer.rank, u, u.origin, layer.name, errors, f"flag {u.key}")
                continue
            for flag, fragment, origin in layer_configs:
                _merge_config(configs, flag, fragment, layer, origin, errors)
        for flag, fragment, origin in layer.configs:
            _merge_config(configs, flag, fragment, layer, origin, errors)
        for name, value, origin in layer.env:
            _put(env, name, layer.rank, value, origin, layer.name, errors, f"env {name}")
            _put(vllm_env, name, layer.rank, value, origin, layer.name, [], f"env {name}")
        for name, value, origin in layer.backend_env:
            # more specific than the level's own env: it wins over it for vLLM processes
            prev = vllm_env.get(name)
            if prev is not None and prev.rank == layer.rank:
                prev.value, prev.conflict = value, []
                prev.origins.append(origin)
            else:
                _put(vllm_env, name, layer.rank, value, origin, layer.name, errors, f"env {name}")
    errors += _unsettled(flags, lambda k: f"flag {k}")
    errors += _unsettled(configs, lambda k: f"--{k[0]} key {'.'.join(map(str, k[1]))}")
    errors += _unsettled(vllm_env, lambda k: f"env {k}")
    # a flag and its --no- form are one destination: the winner's spelling is kept
    result.head = [flags[k].value for k in head_keys]
    result.tail = [flags[k].value for k in order]
    result.flag_origins = {k: s.origins for k, s in flags.items()}
    for (flag, path), slot in sorted(configs.items(), key=lambda kv: JSON_FLAGS.index(kv[0][0])):
        node = result.configs.setdefault(flag, {})
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = slot.value
        result.config_origins.setdefault(flag, []).extend(
            o for o in slot.origins if o not in result.config_origins[flag]
        )
    result.env = {k: s.value for k, s in env.items()}
    result.vllm_env = {k: s.value for k, s in vllm_env.items()}
    result.env_origins = {k: s.origins for k, s in vllm_env.items()}
    return result


def _merge_config(configs: dict, flag: str, fragment: dict, layer: Layer, origin: str, errors: list[str]) -> None:
    for path, value in _leaves(fragment):
        key = (flag, path)
        # a key replaced by a more specific layer takes its sub-keys (or its parent leaf) with it
        for other in [
            k for k in configs if k[0] == flag and k != key and (k[1][: len(path)] == path or path[: len(k[1])] == k[1])
        ]:
            if configs[other].rank < layer.rank:
                del configs[other]
        _put(configs, key, layer.rank, value, origin, layer.name, errors, f"--{flag} key {'.'.join(map(str, path))}")


def json_args(configs: dict[str, dict]) -> list[str]:
    out: list[str] = []
    for flag in JSON_FLAGS:
        if flag in configs:
            out += [f"--{flag}", json.dumps(configs[flag], separators=(",", ":"))]
    return out


def _where(m: Matrix, section: str, name: str, *path: Any) -> str:
    return str(m.at(section, name, *path) or f"{section}.{name}")


def _entry(
    m: Matrix,
    level: str,
    what: str,
    section: str,
    name: str,
    base: tuple,
    args: list[str],
    env: dict[str, str],
    configs: dict | None = None,
    backend_env: dict | None = None,
    backend: str | None = None,
    args_key: str = "args",
) -> Layer:
    label = f"{what}"
    return Layer(
        level,
        label,
        tuple((t, f"{_where(m, section, name, *base, args_key, i)} ({label})") for i, t in enumerate(args)),
        tuple((k, v, f"{_where(m, section, name, *base, 'env', k)} ({label})") for k, v in env.items()),
        tuple(
            (f, frag, f"{_where(m, section, name, *base, 'configs', f)} ({label})")
            for f, frag in (configs or {}).items()
        ),
        tuple(
            (k, v, f"{_where(m, section, name, *base, 'backend_env', backend, k)} ({label}, {backend} only)")
            for k, v in ((backend_env or {}).get(backend, {}) if backend else {}).items()
        ),
    )


def _side(
    m: Matrix, level: str, what: str, section: str, name: str, base: tuple, entry: Any, role: str | None
) -> list[Layer]:
    """The layer of an entry's ``prefill:``/``decode:`` side on that instance, if it gives one."""
    own = getattr(entry, role) if role else None
    if own is None:
        return []
    return [
        _entry(m, level, f"{what} on the {role} instance", section, name, (*base, role), own.args, own.env, own.configs)
    ]


def instance_features(
    m: Matrix, features: tuple[str, ...] | list[str], suite: str | None, group: int | None, role: str | None
) -> list[str]:
    """The case's features expressed on one instance of a P/D pair (``role``): all of them but
    those its suite group's side of that instance skips (``skip_features``)."""
    side = None
    if role and suite in m.suites and group is not None and group < len(m.suites[suite].groups):
        side = getattr(m.suites[suite].groups[group], role)
    skipped = set(side.skip_features) if side is not None else set()
    return [f for f in features if f not in skipped]


def matrix_layers(
    m: Matrix,
    platform: str,
    family: str,
    variant: str,
    features: tuple[str, ...] | list[str],
    suite: str | None = None,
    group: int | None = None,
    rule: int | None = None,
    backend: str | None = None,
    role: str | None = None,
) -> list[Layer]:
    """The matrix's layers of one case (the topology's own flags are the planner's to add); with
    ``role`` (a P/D side), each feature as it is expressed on that side."""
    p = m.platforms[platform]
    v = m.variant(family, variant)
    layers = [
        _entry(
            m,
            "platform",
            f"platform {platform}",
            "platforms",
            platform,
            (),
            p.serve_args,
            p.env,
            backend_env=p.backend_env,
            backend=backend,
            args_key="serve_args",
        ),
        _entry(
            m,
            "variant",
            f"variant {family}/{variant}",
            "families",
            family,
            ("variants", variant),
            v.serve_args,
            v.env,
            v.configs,
            args_key="serve_args",
        ),
    ]
    # what the variant adds on this instance of a P/D pair
    layers += _side(
        m, "variant-side", f"variant {family}/{variant}", "families", family, ("variants", variant), v, role
    )
    for name in instance_features(m, features, suite, group, role):
        f = m.features[name].side(role)
        layers.append(_entry(m, "features", f"feature {name}", "features", name, (), f.args, f.env, f.configs))
    if suite in m.suites:  # a case made outside any suite (a baseline) has none of its layers
        s = m.suites[suite]
        layers.append(
            _entry(
                m,
                "suite",
                f"suite {suite}",
                "suites",
                suite,
                (),
                s.args,
                s.env,
                backend_env=s.backend_env,
                backend=backend,
            )
        )
        if group is not None and group < len(s.groups):
            g = s.groups[group]
            layers.append(
                _entry(
                    m,
                    "group",
                    f"suite {suite} group {group}",
                    "suites",
                    suite,
                    ("groups", group),
                    g.args,
                    g.env,
                    backend_env=g.backend_env,
                    backend=backend,
                )
            )
            # what the group gives on this instance of a P/D pair
            layers += _side(
                m, "group-side", f"suite {suite} group {group}", "suites", suite, ("groups", group), g, role
            )
    if rule is not None and rule < len(m.rules):
        r = m.rules[rule].rule
        layers.append(_entry(m, "rule", f"rule {rule}", "rules", str(rule), (), r.args, r.env))
    return layers


def topology_layer(name: str, args: list[str], configs: dict | None = None, where: str = "") -> Layer:
    """The flags the planner derives from the topology (TP, PP, DP, executor, P/D roles)."""
    origin = f"{where} (topology {name}, planned)" if where else f"topology {name} (planned)"
    return Layer(
        "topology",
        f"topology {name}",
        tuple((t, origin) for t in args),
        (),
        tuple((f, frag, origin) for f, frag in (configs or {}).items()),
    )


def pcp_size(
    m: Matrix, platform: str, family: str, variant: str, features, suite: str | None = None, group: int | None = None
) -> int:
    """The PCP size the case's pre-rule layers give: vLLM's world per DP rank is TP x PP x PCP."""
    return merge(matrix_layers(m, platform, family, variant, features, suite, group)).pcp

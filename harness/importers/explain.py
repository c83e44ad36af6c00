"""`ppconf import --explain`: each node of an imported config beside the launch ppconf plans for it,
with every difference and why: a flag or variable kept, dropped (and why ppconf does not take it
from the config), changed, or added by ppconf (and which matrix entry gives it).

A config's node is matched with the plan's launch of the same place: the n-th ``vllm serve`` of a
layout, or the n-th host of a P/D pair's side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.importers.argv import Flag, flags_of
from harness.importers.vllm_ascend import PARALLEL, PLANNED, PLANNED_ENV, RANK_ENV, ConfigNode, Test
from harness.launch import Deployment, LaunchSpec
from harness.matrix.schema import JSON_FLAGS

# Why ppconf does not take a flag from the config: it plans the flag itself, from the case's
# topology and the cluster it runs on.
_LAYOUT = "the node layout: ppconf plans each node's part of the topology"
DROPPED = {
    **{flag: f"a size of the topology ({key}): ppconf writes it from there" for flag, key in PARALLEL.items()},
    "--distributed-executor-backend": "the topology's backend: ppconf writes it from there",
    "--host": "the address: ppconf binds what the cluster inventory gives",
    "--port": "the port: ppconf picks the ports of every process",
    **{
        flag: _LAYOUT
        for flag in PLANNED
        if flag not in PARALLEL and flag not in ("--distributed-executor-backend", "--host", "--port")
    },
    "--kv-transfer-config": "the P/D connector: ppconf's P/D plan writes it (connector, role, ports, sizes)",
}
ENV_DROPPED = {
    **{name: "the runner's port variable: ppconf picks the ports" for name in PLANNED_ENV},
    **{name: "the DP rank's devices: ppconf gives each rank its slice of the node's lease" for name in RANK_ENV},
}
PLANNED_BY = "planned by ppconf for this node"
SERVE_ROLES = ("api", "headless", "dp-rank", "prefill", "decode")  # the launches that run `vllm serve`


@dataclass(frozen=True)
class Line:
    """One difference (or agreement): ``what`` kept | dropped | changed | added, for a flag or env."""

    what: str
    kind: str  # "flag" or "env"
    name: str
    config: str | None
    plan: str | None
    why: str

    def render(self) -> str:
        value = {
            "kept": self.plan,
            "dropped": self.config,
            "added": self.plan,
            "changed": f"{self.config} -> {self.plan}",
        }[self.what]
        shown = f"{self.name}={value}" if self.kind == "env" else f"{self.name}" + (f" {value}" if value else "")
        return f"  {self.what:8s}{self.kind:5s}{shown}" + (f"  # {self.why}" if self.why else "")


def _same(name: str, a: str | None, b: str | None) -> bool:
    """Equal values; a JSON flag compared as JSON (the config may spread it over lines)."""
    if a == b:
        return True
    if name[2:] in JSON_FLAGS and a is not None and b is not None:
        try:
            return json.loads(a) == json.loads(b)
        except ValueError:
            return False
    return False


def _compact(name: str, value: str | None) -> str | None:
    """A JSON flag's value on one line (a config may spread it over several)."""
    if value is None or name[2:] not in JSON_FLAGS:
        return value
    try:
        return json.dumps(json.loads(value), separators=(",", ":"))
    except ValueError:
        return value


def _plan_flags(launch: LaunchSpec) -> list[Flag]:
    """The flags after `vllm serve MODEL` of a planned launch."""
    argv = list(launch.argv[launch.argv.index("serve") + 2 :])
    return flags_of([(word, None) for word in argv], None)


def node_lines(node: ConfigNode, launch: LaunchSpec, parser: Any | None) -> list[Line]:
    """Every flag and variable of the config's node beside the planned launch's."""
    given = {f.name: _compact(f.name, f.value) for f in flags_of(node.tokens, parser)}
    planned = {f.name: f.value for f in _plan_flags(launch)}
    origins = dict(launch.origins)
    out = []
    for name, value in given.items():
        if name in planned and _same(name, value, planned[name]):
            out.append(Line("kept", "flag", name, value, planned[name], ""))
        elif name in DROPPED:
            why = DROPPED[name] + (f"; planned: {planned[name]}" if name in planned and planned[name] else "")
            out.append(Line("dropped", "flag", name, value, None, why))
        elif name in planned:
            out.append(Line("changed", "flag", name, value, planned[name], ", ".join(origins.get(name, ()))))
        else:
            out.append(Line("dropped", "flag", name, value, None, "not in the plan (a bug of the import)"))
    for name, value in planned.items():
        if name not in given:
            out.append(Line("added", "flag", name, None, value, ", ".join(origins.get(name, ())) or PLANNED_BY))
    env = {k: v for k, (v, _) in node.env.items()}
    plan_env = launch.env_dict()
    for name, value in node.planned_env.items():
        if plan_env.get(name) == value:  # planned, and to the config's own value
            out.append(Line("kept", "env", name, value, value, ""))
            continue
        why = ENV_DROPPED[name] + (f"; planned: {plan_env[name]}" if name in plan_env else "")
        out.append(Line("dropped", "env", name, value, None, why))
    env_origins = dict(launch.env_origins)
    for name, value in env.items():
        if plan_env.get(name) == value:
            out.append(Line("kept", "env", name, value, value, ""))
        elif name in plan_env:
            out.append(Line("changed", "env", name, value, plan_env[name], ", ".join(env_origins.get(name, ()))))
        else:
            out.append(Line("dropped", "env", name, value, None, ENV_DROPPED.get(name, "not in the plan")))
    for name, value in plan_env.items():
        if name not in env and name not in node.planned_env:
            out.append(Line("added", "env", name, None, value, ", ".join(env_origins.get(name, ())) or PLANNED_BY))
    return out


def serving(test: Test, d: Deployment) -> list[tuple[int, LaunchSpec]]:
    """Each config node's index with the planned launch of its place."""
    launches = [launch for launch in d.launches if launch.role in SERVE_ROLES]
    if not test.prefill:
        return list(enumerate(launches))
    out = []
    for role, hosts in (("prefill", test.prefill), ("decode", test.decode)):
        mine = [launch for launch in launches if launch.role == role]
        out += list(zip(hosts, mine, strict=False))
    return out


def explain(path: Path, test: Test, case_id: str, d: Deployment, parser: Any | None) -> list[str]:
    """The lines `--explain` prints for one test of a config, planned as the case ``case_id``."""
    lines = [f"== {path}: {test.title} -> case {case_id}"]
    pairs = serving(test, d)
    if len(pairs) != len(test.nodes):
        lines.append(f"  the config has {len(test.nodes)} servers, the plan {len(pairs)}")
    for index, launch in pairs:
        node = test.nodes[index]
        lines.append(f"-- config node {index} ({node.where}) -> {launch.name} ({launch.role} on {launch.node})")
        flags = flags_of(node.tokens, parser)
        words = [f"vllm serve {test.model}"]
        words += [f"{f.name} {_compact(f.name, f.value)}" if f.value else f.name for f in flags]
        lines.append("   config: " + " ".join(words))
        lines.append("   plan:   " + " ".join(launch.argv))
        lines += [line.render() for line in node_lines(node, launch, parser)]
    lines += [f"-- not planned by ppconf: {what}" for what in test.unplanned]
    others = [launch for launch in d.launches if launch not in [p[1] for p in pairs]]
    for launch in others:
        lines.append(f"-- added by ppconf: {launch.name} ({launch.role} on {launch.node}): " + " ".join(launch.argv))
    return lines

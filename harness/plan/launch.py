"""What a plan is made of: the processes of one deployment per node (argv, env, ports), where
they are placed, and how a person pastes them on a node. Types and small pure helpers only."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field, replace

from harness.plan.cluster import Cluster
from harness.results import redact

API_PORT = 8000
MASTER_PORT = 29501
RAY_PORT = 6379
KV_PORT = 30000
PD_PORTS = (8100, 8200)  # prefill, decode API ports behind the proxy
DP_RPC_PORT = 29550  # vLLM's --data-parallel-rpc-port default


@dataclass(frozen=True)
class Ports:
    api: int = API_PORT
    master: int = MASTER_PORT
    ray: int = RAY_PORT
    kv: int = KV_PORT
    prefill: int = PD_PORTS[0]
    decode: int = PD_PORTS[1]
    dp_rpc: int = DP_RPC_PORT


@dataclass(frozen=True)
class Placement:
    """Which cluster node and which of its devices each node rank of the deployment uses."""

    nodes: tuple[tuple[str, tuple[int, ...]], ...]


PAYLOAD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Payload:
    """A file a launch needs on its node (the stage probe): the runner writes it into the launch's
    own directory there before starting it, and puts that directory first on the launch's
    PYTHONPATH, so the node needs nothing of ppconf installed."""

    name: str  # a plain file name, e.g. "ppconf_stage_probe.py"
    content: str

    def __post_init__(self) -> None:
        if not PAYLOAD_NAME.fullmatch(self.name):
            raise PlanError(f"payload file name {self.name!r} is not a plain file name")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


@dataclass(frozen=True)
class LaunchSpec:
    name: str  # unique within the deployment, e.g. "node0-api"
    role: str  # api | headless | ray-head | ray-worker | prefill | decode | proxy
    node: str  # cluster node name
    host: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # set on top of the node's environment
    port: int | None = None  # HTTP port when this process serves the OpenAI API
    set_env: str | None = None  # script sourced first on the node
    # flag -> the matrix entries (file:line:col) that gave it, for messages about the plan
    origins: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    env_origins: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    payload: tuple[Payload, ...] = ()  # files written into the launch's directory on its node

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shell(self) -> str:
        """A command a person can paste on the node. Its secrets are not in it: each is read from
        a variable of the pasting shell (``"${HF_TOKEN:?}"`` stops if it is unset)."""
        secrets = redact.Secrets()
        lines = []
        if self.set_env:
            lines.append(f"source {shlex.quote(self.set_env)}")
        for k, v in self.env:
            hidden = secrets.env(k, v)
            lines.append(export(k, v) if hidden is None else export(k, "", _shell_word([hidden])))
        lines += payload_lines(self.payload)
        argv = redact.split_argv(self.argv, secrets)
        lines.append(" \\\n    ".join(_shell_words(self.argv, [_shell_word(w) for w in argv])))
        if secrets.values:
            lines.insert(0, f"# set in this shell first: {' '.join(secrets.values)} (the plan's secrets)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """For results and reports: secret-looking variables and flags are masked, and so is
        any of their values wherever else it appears (inside a JSON config, another flag)."""
        scrub = redact.Redactor().learn(self).scrub
        return {
            "name": self.name,
            "role": self.role,
            "node": self.node,
            "host": self.host,
            "argv": scrub(redact.argv(self.argv)),
            "env": scrub(redact.env(dict(self.env))),
            "port": self.port,
            "set_env": self.set_env,
            **({"payload": [{"name": p.name, "sha256": p.sha256} for p in self.payload]} if self.payload else {}),
        }


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def export(name: str, value: str, quoted: str | None = None) -> str:
    """``export NAME=VALUE`` for a shell (``quoted``: the value already as shell words); a name
    that is not a shell identifier is refused, since it cannot be quoted (``A=1; touch X; B``
    would run ``touch X``)."""
    if not ENV_NAME.fullmatch(name):
        raise PlanError(f"environment variable name {name!r} is not a valid identifier")
    return f"export {name}={shlex.quote(value) if quoted is None else quoted}"


PAYLOAD_END = "PPCONF_PAYLOAD_END"


def payload_lines(payload: tuple[Payload, ...]) -> list[str]:
    """Shell lines that do what a runner does with a launch's payload: write each file, inline,
    into a fresh directory and put that directory first on PYTHONPATH."""
    if not payload:
        return []
    lines = [f"payload=$(mktemp -d)  # this launch's own directory: {', '.join(p.name for p in payload)}"]
    for p in payload:
        if PAYLOAD_END in p.content:
            raise PlanError(f"payload file {p.name} holds {PAYLOAD_END}, which ends it inline")
        lines += [f"cat > \"$payload\"/{shlex.quote(p.name)} <<'{PAYLOAD_END}'", p.content.rstrip("\n"), PAYLOAD_END]
    return [*lines, 'export PYTHONPATH="$payload${PYTHONPATH:+:$PYTHONPATH}"']


def _shell_word(pieces: list[redact.Piece]) -> str:
    """One word for a shell: literal text quoted, a secret as a reference to its variable."""
    return "".join(
        f'"${{{p.name}:?}}"' if isinstance(p, redact.Hidden) else shlex.quote(p) for p in pieces if p != ""
    ) or shlex.quote("")


def _shell_words(argv: tuple[str, ...], quoted: list[str]) -> list[str]:
    """The quoted words of argv, a flag and its value on one line as the guide writes them."""
    words: list[str] = []
    i = 0
    while i < len(argv):
        word = quoted[i]
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            word += " " + quoted[i + 1]
            i += 1
        words.append(word)
        i += 1
    # the command, its subcommand and the model stay on the first line
    n = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return [" ".join(words[:n])] + words[n:]


@dataclass(frozen=True)
class Deployment:
    case_ids: tuple[str, ...]
    launches: tuple[LaunchSpec, ...]
    api: str  # name of the launch that answers requests
    model: str = ""
    model_name: str = ""  # the name requests use (vLLM's served model name)
    placement: Placement | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """Identical launches (ports aside) make one deployment, whatever cases need it."""
        # a payload counts only where there is one, so plans without any keep their keys
        launches = [
            (l.role, l.node, l.argv, l.env, *([[p.sha256 for p in l.payload]] if l.payload else []))
            for l in self.launches
        ]
        body = json.dumps(launches, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def launch(self, name: str) -> LaunchSpec:
        return next(l for l in self.launches if l.name == name)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "cases": list(self.case_ids),
            "api": self.api,
            "model": self.model,
            "launches": [l.to_json() for l in self.launches],
        }


class PlanError(ValueError):
    pass


def default_placement(cluster: Cluster, devices_per_node: int, nnodes: int) -> Placement:
    """First fit: node ranks on distinct cluster nodes when there are enough, else packed onto
    the nodes in turn (the local host plays several nodes on disjoint cores)."""
    slots: list[tuple[str, tuple[int, ...]]] = []
    for node in cluster.nodes:
        free = list(node.devices)
        while len(free) >= devices_per_node and len(slots) < nnodes:
            slots.append((node.name, tuple(free[:devices_per_node])))
            free = free[devices_per_node:]
            if len(cluster.nodes) >= nnodes:
                break
    if len(slots) < nnodes:
        raise PlanError(f"cluster '{cluster.name}' cannot hold {nnodes} node(s) of {devices_per_node} device(s)")
    return Placement(tuple(slots))


def group_deployments(deployments: list[Deployment]) -> list[Deployment]:
    """Merge deployments with identical launches into one that serves all their cases."""
    merged: dict[str, Deployment] = {}
    for d in deployments:
        if d.key in merged:
            prev = merged[d.key]
            merged[d.key] = replace(prev, case_ids=prev.case_ids + d.case_ids)
        else:
            merged[d.key] = d
    return list(merged.values())

"""What a deployment is made of: the processes of one case per node (argv, env, ports), where
they are placed, how a person pastes them on a node, and the form a result records them in
(``Deployment.to_json``: secrets masked, payloads by digest) and reads them back from
(``Deployment.from_json``). The plan makes them (``harness.plan``), runners start them, results
hold them."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import TypeAdapter

from harness import redact


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
    content: str  # "" in a launch read back from a record: it keeps the file's digest only
    sha256: str = ""  # of the content, made from it

    def __post_init__(self) -> None:
        if not PAYLOAD_NAME.fullmatch(self.name):
            raise PlanError(f"payload file name {self.name!r} is not a plain file name")
        if not self.sha256:
            object.__setattr__(self, "sha256", hashlib.sha256(self.content.encode()).hexdigest())


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

    def to_json(self) -> dict[str, Any]:
        """The launch as a result records it: every field but the plan's own notes (where a flag
        came from), env as an object, each payload file by its digest, and secret-looking
        variables and flags masked, with any of their values wherever else it appears (inside a
        JSON config, another flag)."""
        scrub = redact.Redactor().learn(self).scrub
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in PLAN_ONLY}
        out |= {"argv": scrub(redact.argv(self.argv)), "env": scrub(redact.env(dict(self.env)))}
        payload = out.pop("payload")
        return out | ({"payload": [{"name": p.name, "sha256": p.sha256} for p in payload]} if payload else {})


PLAN_ONLY = ("origins", "env_origins")  # where the plan's flags came from: not recorded


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
    # a deployment read back from a record: the record as it was read, written back as it is
    # (with any key of another writer); its launches are this record's, secrets masked
    as_read: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """Identical launches (ports aside) make one deployment, whatever cases need it."""
        if self.as_read is not None and isinstance(self.as_read.get("key"), str):
            return self.as_read["key"]  # the key of the launches before their secrets were masked
        # a payload counts only where there is one, so plans without any keep their keys
        launches = [
            (l.role, l.node, l.argv, l.env, *([[p.sha256 for p in l.payload]] if l.payload else []))
            for l in self.launches
        ]
        body = json.dumps(launches, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def launch(self, name: str) -> LaunchSpec:
        return next(l for l in self.launches if l.name == name)

    def to_json(self) -> dict[str, Any]:
        """The deployment as a result records it (``LaunchSpec.to_json``: secrets masked)."""
        if self.as_read is not None:
            return json.loads(json.dumps(self.as_read))
        return {
            "key": self.key,
            "cases": list(self.case_ids),
            "api": self.api,
            "model": self.model,
            "launches": [l.to_json() for l in self.launches],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Deployment:
        """A deployment as ``to_json`` wrote it (a record's, or an older writer's, whose keys
        may be missing); a ValueError (pydantic's ValidationError, most) names the field that
        does not fit."""
        if not isinstance(data.get("key"), str | None):
            raise ValueError(f"key: should be a string (got {data['key']!r:.80})")
        launches = data.get("launches", [])
        body = {
            "case_ids": data.get("cases", []),
            "launches": [_launch_fields(l) for l in launches] if isinstance(launches, list) else launches,
            "api": data.get("api") or "",
            "model": data.get("model") or "",
            "as_read": data,
        }
        return _RECORDED.validate_json(json.dumps(body), strict=True)

    def recorded(self) -> Deployment:
        """This deployment as its record holds it, and reads it back."""
        return Deployment.from_json(self.to_json())


def _launch_fields(data: Any) -> Any:
    """A recorded launch (``LaunchSpec.to_json``'s form) as LaunchSpec's fields, for checking;
    anything else as it is, for the check to refuse."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if isinstance(data.get("env"), dict):
        out["env"] = list(data["env"].items())
    if isinstance(data.get("payload"), list):
        out["payload"] = [p | {"content": ""} if isinstance(p, dict) else p for p in data["payload"]]
    return out


class PlanError(ValueError):
    pass


_RECORDED = TypeAdapter(Deployment)

"""What a reference is checked with: goldens (recorded outputs with the stack they came from)
and the cache key of a reference launch.

Reference launches are deployments like the others: planned (``harness.plan.reference``),
leased, shared by every case that needs the same launch within a run, and cached across runs
under a key made of what they compute: their argv and env without where they run, the model,
every node's versions and what was asked of them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from harness.check.traffic.compare import Outputs, request_shape
from harness.launch import Deployment
from harness.plan.cluster import Cluster
from harness.plan.content import launch_content
from harness.plan.reference import ReferenceUnavailable
from harness.plan.resolved import ResolvedCase

GOLDEN_FORMAT = 1


# ---- goldens -------------------------------------------------------------------------------------


def load_golden(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReferenceUnavailable(f"golden file {path} not found (record it with `ppconf golden record`)") from None
    except (OSError, ValueError) as err:
        raise ReferenceUnavailable(f"golden file {path} cannot be read: {err}") from None
    if not isinstance(data, dict) or data.get("ppconf_golden") != GOLDEN_FORMAT or "outputs" not in data:
        raise ReferenceUnavailable(f"{path} is not a ppconf golden (format {GOLDEN_FORMAT})")
    return data


def golden_record(
    outputs: Outputs,
    shape: dict[str, Any],
    deployment: Deployment | None,
    versions: dict[str, dict[str, str]],
    model: str,
    score: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "ppconf_golden": GOLDEN_FORMAT,
        "model": model,
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "request": shape,
        "reference": [
            {k: v for k, v in s.to_json().items() if k in ("node", "role", "argv", "env")} for s in deployment.launches
        ]
        if deployment
        else [],
        "versions": versions,
        "outputs": outputs.to_json(),
        "score": score,
    }


def stack_difference(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]) -> list[str]:
    """The versions that differ between the stack a golden was recorded on and the one now."""

    def flat(v: dict[str, dict[str, str]]) -> dict[str, str]:
        out: dict[str, str] = {}
        for node in sorted(v):
            for k, val in v[node].items():
                if k != "error":
                    out.setdefault(k, val)
        return out

    a, b = flat(recorded), flat(current)
    return [f"{k} {a.get(k, '-')} → {b.get(k, '-')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


# ---- the cache key -------------------------------------------------------------------------------


def _model_fingerprint(model: str) -> str:
    config = Path(model) / "config.json"
    if config.is_file():
        return hashlib.sha256(config.read_bytes()).hexdigest()[:16]
    return model


def cache_content(
    d: Deployment,
    cluster: Cluster,
    device_env: str,
    versions: dict[str, dict[str, str]],
    shape: dict[str, Any],
    score: dict[str, Any] | None = None,
    id_prompts: list[list[int]] | None = None,
) -> dict[str, Any]:
    """What a reference launch computes, and so what its outputs answer: the content of its
    launches (``launch_content``: no node names, hosts, addresses, device ids, ports or paths of
    this run or host), the model's identity, the versions on its nodes (by node rank) and what is
    asked of it (the token ids it is sent included). The same counterpart run by another test, on
    other nodes or through another runner has the same content."""
    nodes = list(dict.fromkeys(s.node for s in d.launches))
    body: dict[str, Any] = {
        "launches": launch_content(d, cluster, device_env),
        "model": _model_fingerprint(d.model),
        "versions": [versions.get(n, {}) for n in nodes],
        "request": shape,
        "score": score,
    }
    if id_prompts:
        body["id_prompts"] = id_prompts
    return json.loads(json.dumps(body, sort_keys=True, default=str))  # as it reads back from a file


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def cache_key(content: dict[str, Any]) -> str:
    """Outputs of a reference launch are reused while what it computes (``cache_content``) is unchanged."""
    return digest(content)[:20]


# The format of a kept reference: what it answers (its content and key), its outputs and their digest.
REFERENCE_FORMAT = 2


def reference_entry(key: str, content: dict[str, Any], outputs: Outputs, extra: dict[str, Any]) -> dict[str, Any]:
    out = outputs.to_json()
    return (
        {"ppconf_reference": REFERENCE_FORMAT, "key": key, "content": content}
        | extra
        | {
            "outputs": out,
            "outputs_digest": digest(out),
        }
    )


def entry_problem(data: Any, key: str, content: dict[str, Any], phases: list[str]) -> str | None:
    """Why a kept reference does not answer what is asked (None: it does): another format, key,
    launch, stack or request than asked, outputs that are not the ones recorded, or a phase
    asked of it that it has no answers for."""
    if not isinstance(data, dict) or data.get("ppconf_reference") != REFERENCE_FORMAT:
        return f"not a ppconf reference of format {REFERENCE_FORMAT}"
    if data.get("key") != key or cache_key(data.get("content") or {}) != key:
        return f"recorded for key {str(data.get('key'))[:40]!r}, not {key!r}"
    recorded = data["content"]
    parts = ("launches", "launch"), ("model", "model"), ("versions", "engine stack"), ("request", "requests")
    for part, label in (*parts, ("score", "score"), ("id_prompts", "token ids")):
        if recorded.get(part) != content.get(part):
            return f"it answers another {label} than asked"
    outputs = data.get("outputs")
    if not isinstance(outputs, dict) or data.get("outputs_digest") != digest(outputs):
        return "its outputs are not the ones it recorded (digest differs)"
    held = outputs.get("phases")
    missing = [name for name in phases if not isinstance(held, dict) or name not in held]
    if missing:
        return f"it holds no answers for phase(s) {', '.join(map(str, missing))}"
    return None


def shape_for(rc: ResolvedCase) -> dict[str, Any]:
    """What is asked of a case's reference (its sequential requests, then its workload's phases)."""
    phases = [p.to_json() for p in rc.asked_phases]
    return request_shape(rc.accuracy, rc.compare, rc.pooling, phases)

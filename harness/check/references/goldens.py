"""What a reference is checked with: goldens (recorded outputs with the stack they came from),
the cache key of a reference launch, and whether a case's reference can run on a cluster.

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

from harness.cases.case import Case
from harness.cases.workload import plan_workload
from harness.check.traffic.compare import Outputs, request_shape
from harness.launch import Deployment, PlanError
from harness.matrix.load import Matrix
from harness.plan.cluster import Cluster
from harness.plan.content import launch_content
from harness.plan.reference import ReferenceUnavailable, ResolvedReference, plan_reference, resolve

GOLDEN_FORMAT = 1


def check_plannable(m: Matrix, case: Case, cluster: Cluster) -> str | None:
    """Why the case's reference cannot run on ``cluster`` (None when it can): lint's question."""
    ref = resolve(m, case)
    try:
        if ref.launches:
            plan_reference(m, case, cluster, ref)
        elif ref.spec.kind == "golden":
            load_golden(ref.path(ref.spec.golden or ""))
        if ref.spec.score is not None:
            from harness.check.scores.evaluate import missing_files

            missing = missing_files(ref.spec.score, ref.base_dir)
            if missing:
                return missing
    except (PlanError, ReferenceUnavailable) as err:
        return f"{ref.describe()}: {err}"
    return None


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


def cache_key(
    d: Deployment,
    cluster: Cluster,
    device_env: str,
    versions: dict[str, dict[str, str]],
    shape: dict[str, Any],
    score: dict[str, Any] | None = None,
    id_prompts: list[list[int]] | None = None,
) -> str:
    """Outputs of a reference launch are reused while what it computes is unchanged: the content
    of its launches (``launch_content``: no node names, hosts, addresses, device ids, ports or
    paths of this run or host), the model's identity, the versions on its nodes (by node rank)
    and what is asked of it (the token ids it is sent included). So the same counterpart run by
    another test, on other nodes or through another runner is found again."""
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
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def shape_for(m: Matrix, case: Case, ref: ResolvedReference) -> dict[str, Any]:
    pooling = m.pools(case.features)
    phases = [] if pooling else [p.to_json() for p in plan_workload(m, case)]
    return request_shape(m.suite(case.suite).accuracy, ref.compare, pooling, phases)

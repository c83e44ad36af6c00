"""The reference each supported case is compared with, declared as data.

A reference is resolved per case, the most specific declaration winning: the rule that decided
the case, then its variant, its family, its suite; the default is the case's counterpart (the
same launch with PP folded away). Reference launches are deployments like the others: planned,
leased, shared by every case that needs the same launch within a run, and cached across runs
under a key made of their argv, env, model, every node's versions and what was asked of them.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.check.compare import Outputs, request_shape
from harness.matrix.load import Matrix
from harness.matrix.schema import Compare, Reference, Topology
from harness.plan.cluster import Cluster
from harness.plan.deployment import Deployment, Placement, PlanError, Ports, plan

GOLDEN_FORMAT = 1
# Outcomes whose case is served and compared; the others never need a reference.
NEEDS_REFERENCE = ("supported", "known-issue", "flaky")


class ReferenceUnavailable(Exception):
    """The reference could not be planned, started or read: the case cannot be judged for accuracy."""


@dataclass(frozen=True)
class ResolvedReference:
    spec: Reference
    compare: Compare
    source: str  # where the declaration came from, for the evidence
    base_dir: Path  # files the declaration names are relative to this directory

    @property
    def launches(self) -> bool:
        return self.spec.kind in ("counterpart", "topology")

    def path(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() else self.base_dir / p

    def describe(self) -> str:
        s = self.spec
        what = {"counterpart": f"counterpart (PP folded away{', TP×PP folded into TP' if s.fold == 'tp' else ''})",
                "topology": f"topology {s.topology}", "golden": f"golden {s.golden}",
                "score": "task score only"}[s.kind]
        return f"{what}, declared by {self.source}"


def _dir_of(where: Any, m: Matrix) -> Path:
    """The directory of the matrix file a declaration stands in (positions name files relative to
    the matrix directory's parent)."""
    if where is None or not getattr(where, "file", None):
        return m.root
    path = Path(where.file)
    return (path if path.is_absolute() else m.root.parent / path).parent


def resolve(m: Matrix, case: Case) -> ResolvedReference:
    """The case's reference and comparison mode: rule > variant > family > suite > counterpart."""
    suite = m.suite(case.suite)
    family = m.families[case.family]
    variant = family.variants[case.variant]
    rule = next((e for e in m.rules if e.index == case.expectation.rule), None) if case.expectation.rule is not None \
        else None
    compare = suite.accuracy.compare
    if rule is not None and rule.rule.compare is not None:
        compare = rule.rule.compare
    layers = [
        (rule.rule.reference if rule else None, f"rule {rule.index} ({rule.where})" if rule else "",
         _dir_of(rule.where if rule else None, m)),
        (variant.reference, f"variant {case.family}/{case.variant}", _dir_of(m.where.get(("families", case.family)), m)),
        (family.reference, f"family {case.family}", _dir_of(m.where.get(("families", case.family)), m)),
    ]
    for spec, source, base in layers:
        if spec is not None:
            return ResolvedReference(spec, compare, source, base)
    where = m.where.get(("suites", case.suite))
    source = f"suite {case.suite}" if "reference" in suite.model_fields_set else f"suite {case.suite} (default)"
    return ResolvedReference(suite.reference, compare, source, _dir_of(where, m))


def counterpart_topology(name: str, topo: Topology, fold: str) -> tuple[str, Topology]:
    """The case's layout with PP folded away: PP=1 with the case's TP (``none``), or TP×PP folded
    into TP (``tp``), on as many of the case's nodes as those ranks need. A P/D pair folds into its
    prefill instance served alone; DP folds to one rank (outputs of one request do not depend on it)."""
    tp = topo.tp * (topo.pp if fold == "tp" else 1)
    per_node = max(1, topo.world // topo.nnodes)
    nnodes = max(1, -(-tp // per_node))
    backend = topo.backend if nnodes == 1 else (topo.backend or "mp")
    ref = Topology(tp=tp, pp=1, dp=1, nnodes=nnodes, backend=backend,
                   title=f"reference of {name}: PP folded away" + (" into TP" if fold == "tp" else ""))
    return f"{name}~{'tp' + str(tp) if fold == 'tp' else 'pp1'}", ref


def reference_case(m: Matrix, case: Case, ref: ResolvedReference) -> tuple[Case, Topology]:
    """The launch a counterpart or topology reference stands for, as a case of its own."""
    if ref.spec.kind == "topology":
        name = ref.spec.topology or ""
        if name not in m.topologies:
            raise ReferenceUnavailable(f"reference topology '{name}' is not in the matrix")
        topo = m.topologies[name]
        if topo.pp != 1 or topo.decode is not None:
            raise ReferenceUnavailable(f"reference topology '{name}' must be a PP=1 layout without P/D")
    else:
        name, topo = counterpart_topology(case.topology, m.topologies[case.topology], ref.spec.fold)
    rid = f"{case.model_key}/reference/{name}/{'+'.join(case.features) or 'none'}"
    return replace(case, id=rid, topology=name, partition="auto"), topo


def plan_reference(m: Matrix, case: Case, cluster: Cluster, ref: ResolvedReference | None = None,
                   placement: Placement | None = None, ports: Ports = Ports()) -> Deployment:
    """The reference launch of a case, exactly as ``plan`` plans a case (PlanError when it does not fit)."""
    ref = ref or resolve(m, case)
    if not ref.launches:
        raise ReferenceUnavailable(f"the reference of {case.id} is {ref.describe()}: nothing to launch")
    rcase, topo = reference_case(m, case, ref)
    need = m.variant(case.family, case.variant).min_devices
    if need and topo.devices < need:
        raise ReferenceUnavailable(f"{case.family}/{case.variant} needs at least {need} devices to hold its weights; "
                                   f"this reference has {topo.devices} (fold TP×PP into TP, or use a golden or score)")
    return plan(m, rcase, cluster, placement=placement, ports=ports, topology=topo)


def check_plannable(m: Matrix, case: Case, cluster: Cluster) -> str | None:
    """Why the case's reference cannot run on ``cluster`` (None when it can): lint's question."""
    ref = resolve(m, case)
    try:
        if ref.launches:
            plan_reference(m, case, cluster, ref)
        elif ref.spec.kind == "golden":
            load_golden(ref.path(ref.spec.golden or ""))
        if ref.spec.score is not None:
            task = ref.path(ref.spec.score.task)
            if not task.is_file():
                return f"score task file {task} not found"
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


def golden_record(outputs: Outputs, shape: dict[str, Any], deployment: Deployment | None,
                  versions: dict[str, dict[str, str]], model: str, score: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "ppconf_golden": GOLDEN_FORMAT,
        "model": model,
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "request": shape,
        "reference": [{k: v for k, v in s.to_json().items() if k in ("node", "role", "argv", "env")}
                      for s in deployment.launches] if deployment else [],
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


def cache_key(d: Deployment, versions: dict[str, dict[str, str]], shape: dict[str, Any],
              score: dict[str, Any] | None = None) -> str:
    """Outputs of a reference launch are reused while its argv, env, model, the versions on its
    nodes and what is asked of it are all unchanged."""
    nodes = sorted({s.node for s in d.launches})
    body = {"launches": [(s.role, s.node, list(s.argv), sorted(s.env)) for s in d.launches],
            "model": _model_fingerprint(d.model), "versions": {n: versions.get(n, {}) for n in nodes},
            "request": shape, "score": score}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def shape_for(m: Matrix, case: Case, ref: ResolvedReference) -> dict[str, Any]:
    return request_shape(m.suite(case.suite).accuracy, ref.compare, "pooling" in case.features)

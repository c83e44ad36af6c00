"""The reference a supported case is compared with, resolved from the matrix and planned like a
case: the most specific declaration wins (the rule that decided the case, then its variant, its
family, its suite; the default is the case's counterpart, the same launch with PP folded away).
Pure: nothing here launches or reads outputs (``harness.check.references.goldens`` does)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.cases.case import Case
from harness.launch import Deployment, Placement
from harness.matrix.load import Matrix
from harness.matrix.schema import Compare, Reference, Topology
from harness.outcomes import NEEDS_REFERENCE, Kind
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.instance import ModelResolver, resolve_model_default
from harness.plan.launch import Ports


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
        what = {
            "counterpart": f"counterpart (PP folded away{', TP×PP folded into TP' if s.fold == 'tp' else ''})",
            "topology": f"topology {s.topology}",
            "golden": f"golden {s.golden}",
            "score": "task score only",
        }[s.kind]
        return f"{what}, declared by {self.source}"


def resolve(m: Matrix, case: Case) -> ResolvedReference:
    """The case's reference and comparison mode: rule > variant > family > suite > counterpart."""
    suite = m.suite(case.suite)
    family = m.families[case.family]
    variant = family.variants[case.variant]
    rule = (
        next((e for e in m.rules if e.index == case.expectation.rule), None)
        if case.expectation.rule is not None
        else None
    )
    compare = suite.accuracy.compare
    if rule is not None and rule.rule.compare is not None:
        compare = rule.rule.compare
    layers = [
        (
            rule.rule.reference if rule else None,
            f"rule {rule.index} ({rule.where})" if rule else "",
            m.dir_of(rule.where if rule else None),
        ),
        (
            variant.reference,
            f"variant {case.family}/{case.variant}",
            m.dir_of(m.where.get(("families", case.family))),
        ),
        (family.reference, f"family {case.family}", m.dir_of(m.where.get(("families", case.family)))),
    ]
    for spec, source, base in layers:
        if spec is not None:
            return ResolvedReference(spec, compare, source, base)
    where = m.where.get(("suites", case.suite))
    source = f"suite {case.suite}" if "reference" in suite.model_fields_set else f"suite {case.suite} (default)"
    return ResolvedReference(suite.reference, compare, source, m.dir_of(where))


def counterpart_topology(name: str, topo: Topology, fold: str, node_devices: int | None = None) -> tuple[str, Topology]:
    """The case's layout with PP folded away: PP=1 with the case's TP (``none``), or TP×PP folded
    into TP (``tp``), on the fewest nodes that hold those ranks evenly (``node_devices``: devices of
    the cluster's largest node; without it, as many per node as the case has). A P/D pair folds
    into its prefill instance served alone; DP folds to one rank (outputs of one request do not
    depend on it). The executor is mp whatever the case's: it decides how ranks are started, not
    what they compute, so the mp and Ray cases of a model share one reference."""
    tp = topo.tp * (topo.pp if fold == "tp" else 1)
    per_node = max(1, node_devices or topo.world // topo.nnodes)
    nnodes = max(1, -(-tp // per_node))
    while tp % nnodes:
        nnodes += 1
    ref = Topology(
        tp=tp,
        pp=1,
        dp=1,
        nnodes=nnodes,
        backend="mp",
        title=f"reference of {name}: PP folded away" + (" into TP" if fold == "tp" else ""),
    )
    return f"pp1-tp{tp}" + (f"-{nnodes}node" if nnodes > 1 else ""), ref


def largest_node(cluster: Cluster) -> int | None:
    """The devices of the cluster's largest node: how many ranks of a reference one node holds."""
    return max((len(n.devices) for n in cluster.nodes), default=None)


def reference_features(m: Matrix, case: Case) -> tuple[str, ...]:
    """The features a case's reference launch keeps: those meant to change outputs (a feature
    without ``preserves_output``), those a kept one requires, and a drafter whose acceptance the
    case's workload bounds against the reference's. Every other feature is left out, so one
    reference serves every stack of output-preserving features on a model. A reference that keeps
    nothing drafts with the variant's ``reference_drafter`` when it declares one (unless the case
    bounds its throughput by the reference's), so that launch also serves the cases whose
    acceptance is bounded against that drafter."""
    from harness.cases.workload import drafts, workload_of

    bounded = any(p.min_acceptance_ratio is not None for p in workload_of(m, case))
    kept = [f for f in case.features if not m.features[f].preserves_output or (bounded and drafts(m, f))]
    todo = list(kept)
    while todo:
        for need in m.features[todo.pop()].requires:
            if need in case.features and need not in kept:
                kept.append(need)
                todo.append(need)
    drafter = m.variant(case.family, case.variant).reference_drafter
    if drafter is not None and not kept and not relative_perf(m, case):  # checked at load
        return (drafter,)  # a reference otherwise plain drafts as the variant's bounded cases do
    return tuple(f for f in case.features if f in kept)


def relative_perf(m: Matrix, case: Case) -> bool:
    """Whether the case bounds its throughput by the reference's: a drafter changes that figure,
    so such a case keeps a reference without one."""
    from harness.cases.workload import workload_of

    return any(p.min_throughput_ratio is not None for p in workload_of(m, case))


def reference_case(
    m: Matrix, case: Case, ref: ResolvedReference, node_devices: int | None = None
) -> tuple[Case, Topology]:
    """The launch a counterpart or topology reference stands for, as a case of its own."""
    if ref.spec.kind == "topology":
        name = ref.spec.topology or ""
        if name not in m.topologies:
            raise ReferenceUnavailable(f"reference topology '{name}' is not in the matrix")
        topo = m.topologies[name]
        if topo.pp != 1 or topo.decode is not None:
            raise ReferenceUnavailable(f"reference topology '{name}' must be a PP=1 layout without P/D")
    else:
        name, topo = counterpart_topology(case.topology, m.topologies[case.topology], ref.spec.fold, node_devices)
    features = reference_features(m, case)
    rid = f"{case.model_key}/reference/{name}/{'+'.join(features) or 'none'}"
    return case.model_copy(update={"id": rid, "topology": name, "partition": "auto", "features": features}), topo


def reference_expected(case: Case) -> bool:
    """Whether the runner is expected to launch the case's reference: it asks a reference only of
    a case that served its requests, so not of a rejection, nor of a known issue whose waiver
    says it fails at startup or at its first request (a flaky case may serve: it counts)."""
    exp = case.expectation
    if exp.kind not in NEEDS_REFERENCE:
        return False
    return not (exp.kind is Kind.KNOWN_ISSUE and {"startup", "request"} & set(exp.waives))


def plan_reference(
    m: Matrix,
    case: Case,
    cluster: Cluster,
    ref: ResolvedReference | None = None,
    placement: Placement | None = None,
    ports: Ports | None = None,
    resolve_model: ModelResolver = resolve_model_default,
) -> Deployment:
    """The reference launch of a case, exactly as ``plan`` plans a case (PlanError when it does not fit)."""
    ref = ref or resolve(m, case)
    if not ref.launches:
        raise ReferenceUnavailable(f"the reference of {case.id} is {ref.describe()}: nothing to launch")
    rcase, topo = reference_case(m, case, ref, largest_node(cluster))
    need = m.variant(case.family, case.variant).min_devices
    if need and topo.devices < need:
        raise ReferenceUnavailable(
            f"{case.family}/{case.variant} needs at least {need} devices to hold its weights; "
            f"this reference has {topo.devices} (fold TP×PP into TP, or use a golden or score)"
        )
    return plan(
        m, rcase, cluster, placement=placement, ports=ports or Ports(), resolve_model=resolve_model, topology=topo
    )

"""A case as the check step consumes it: every fact the matrix decides about it (its timeouts,
requests and comparison, reference, workload, stage bounds, feature checks and patterns, the
split it must build) resolved once, before the run, into a frozen ``ResolvedCase``; and the
``Planner``, the one object that still holds the matrix for what must be planned again at lease
time (a case's or its reference's launch on the places and ports it is given).

The check step reads these and never the matrix: what a case is judged on is fixed before the
first launch, and the same object is what a test builds to check one step alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.cases.case import Case
from harness.cases.merge import instance_features
from harness.cases.partition import stage_ranges
from harness.cases.workload import PhasePlan, kind_of, plan_workload, stage_bounds_of, workload_dir, workload_of
from harness.launch import Deployment, Placement
from harness.matrix.effective import Requirement
from harness.matrix.load import Matrix
from harness.matrix.schema import Accuracy, Compare, DiagnosisRule, StageBounds
from harness.plan.adapters import adapter_ref, feature_adapters, request_adapters, resolve_requests
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.instance import resolve_model_default
from harness.plan.launch import Ports
from harness.plan.pd import KV_TRANSFER_CHECK, PD_ROLES
from harness.plan.reference import ResolvedReference, plan_reference, reference_features, resolve
from harness.results.result import Expectation


@dataclass(frozen=True)
class RequestsKey:
    """What a case asks of a deployment: cases with equal keys share one set of answers."""

    compare: str  # the comparison's fields, as canonical JSON
    pooling: str


@dataclass(frozen=True)
class ResolvedCase:
    case: Case
    startup_timeout_s: float
    request_timeout_s: float
    accuracy: Accuracy  # the suite's sequential requests
    reference: ResolvedReference  # the reference and the comparison mode
    # a pooling runner's task ("embed": embeddings compared by cosine; "classify": labels and class
    # probabilities), no completions; "" for a generating runner
    pooling: str
    pp: int
    phases: tuple[PhasePlan, ...]  # the workload after the sequential requests, planned
    workload_dir: Path  # files the workload names are relative to it
    stage_bounds: StageBounds | None
    checks: frozenset[str]  # the checks the case's features name, and a P/D pair's KV transfer
    # the WARNING texts that say a feature was turned off, each with the instance whose log may
    # say it (a P/D side's name, None: any log): a side is judged only on the features it runs
    silent_disable: tuple[tuple[str, str | None], ...]
    partition_expected: tuple[tuple[int, int], ...] | None  # each stage's [start, end) vLLM must build
    partition_tuning: bool
    device_env: str  # the platform's device-control variable
    reference_features: tuple[str, ...]  # the case's features its reference launch keeps
    # each of the case's features with a field it needs of the configuration the engine built,
    # and the instance that must have built it (a P/D side, None: the one deployment)
    effective: tuple[tuple[str, Requirement, str | None], ...] = ()

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def expectation(self) -> Expectation:
        return self.case.expectation

    @property
    def compare(self) -> Compare:
        return self.reference.compare

    @property
    def asked_phases(self) -> tuple[PhasePlan, ...]:
        """The phases the deployment is asked: a pooling runner answers no completions, so only
        those of a kind it can answer (explicit requests)."""
        return tuple(p for p in self.phases if not self.pooling or kind_of(p).pooling)

    @property
    def requests(self) -> RequestsKey:
        return RequestsKey(json.dumps(self.compare.model_dump(), sort_keys=True), self.pooling)


def resolve_case(m: Matrix, case: Case) -> ResolvedCase:
    suite = m.suite(case.suite)
    topo = m.topologies[case.topology]
    layers = case.attrs.get("layers")
    expected = None
    if layers and topo.pp > 1 and not case.attrs.get("partition_error"):
        split = None if case.partition == "auto" else case.partition
        expected = tuple(stage_ranges(layers, topo.pp, split))
    return ResolvedCase(
        case=case,
        startup_timeout_s=suite.startup_timeout_s,
        request_timeout_s=suite.request_timeout_s,
        accuracy=suite.accuracy,
        reference=resolve(m, case),
        pooling=m.pooling_task(case.features),
        pp=topo.pp,
        phases=tuple(
            resolve_requests(p, m.variant(case.family, case.variant), resolve_model_default, case.id)
            for p in plan_workload(m, case)
        ),
        workload_dir=workload_dir(m, case),
        stage_bounds=stage_bounds_of(m, case),
        checks=frozenset(m.checks_of(case.features) | ({KV_TRANSFER_CHECK} if topo.decode is not None else set())),
        silent_disable=tuple(
            (p, role) for role, feats in instances(m, case) for f in feats for p in m.features[f].silent_disable
        ),
        partition_expected=expected,
        partition_tuning=suite.partition_tuning,
        device_env=m.platforms[case.platform].device_env,
        reference_features=reference_features(m, case),
        effective=tuple(
            (f, r, role) for role, feats in instances(m, case) for f in feats for r in m.features[f].requirements()
        ),
    )


def instances(m: Matrix, case: Case) -> list[tuple[str | None, list[str]]]:
    """Each instance of the case with the features it runs: a P/D pair's prefill and decode
    sides (each without its skip_features), else the one deployment (None) with all of them."""
    if m.topologies[case.topology].decode is None:
        return [(None, list(case.features))]
    return [(role, instance_features(m, case.features, case.suite, case.group, role)) for role in PD_ROLES]


class Planner:
    """The matrix and the cluster, for what is planned at run time: each case resolved once, and
    a case's (or its reference's) launches planned again on the places and ports a lease gives."""

    def __init__(self, m: Matrix, cluster: Cluster):
        self._m = m
        self.cluster = cluster
        self._resolved: dict[str, ResolvedCase] = {}

    @property
    def root(self) -> Path:
        return self._m.root

    @property
    def roots(self) -> tuple[Path, ...]:
        """Every matrices directory the run layers, in order (a private suite's over the shipped)."""
        return self._m.roots or (self._m.root,)

    @property
    def diagnosis(self) -> list[DiagnosisRule]:
        return self._m.diagnosis

    def resolved(self, case: Case) -> ResolvedCase:
        rc = self._resolved.get(case.id)
        if rc is None or rc.case != case or rc.expectation != case.expectation:
            rc = self._resolved[case.id] = resolve_case(self._m, case)
        return rc

    def known(self, case: Case) -> ResolvedCase | None:
        """The case as resolved before, if it was: what its record may describe without risking
        a new resolution's error while the verdict is written."""
        rc = self._resolved.get(case.id)
        return rc if rc is not None and rc.case == case else None

    def deployment(self, case: Case, placement: Placement | None = None, ports: Ports | None = None) -> Deployment:
        return plan(self._m, case, self.cluster, placement=placement, ports=ports)

    def reference(
        self,
        case: Case,
        ref: ResolvedReference | None = None,
        placement: Placement | None = None,
        ports: Ports | None = None,
    ) -> Deployment:
        return plan_reference(self._m, case, self.cluster, ref, placement, ports)

    def zoo_models(self, cases: Iterable[Case]) -> list[str]:
        """The tiny models (``zoo:`` names) the cases, their drafters and their LoRA adapters
        (``MODEL#lora-KEY``, ``harness.plan.adapters``) need, once each."""
        names: set[str] = set()
        for c in cases:
            v = self._m.variant(c.family, c.variant)
            keys = [k for f in c.features for k in feature_adapters(self._m.features[f].args)]
            named = [adapter_ref(v, k, c.id) for k in keys + request_adapters(workload_of(self._m, c))]
            names |= {ref[4:] for ref in [v.model, *v.drafters.values(), *named] if ref.startswith("zoo:")}
        return sorted(names)

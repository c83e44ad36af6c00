"""A suite's cases split into N disjoint shards for N CI jobs, whole deployments at a time.

Cases sharing a deployment share one launch, so a shard takes a deployment with all its cases:
splitting them would launch the deployment once per shard. Shards are balanced greedily, the
heaviest deployment first onto the lightest shard (ties to the lower shard), by seconds when
durations are known (a run's, else the schedule's estimate for the deployments it lacks) and
by case count otherwise. The split is a pure function of the plans and the durations, so every
job computes the same one and keeps its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.cases.case import Case
from harness.launch import PlanError
from harness.matrix.load import Matrix
from harness.outcomes import NO_LAUNCH
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.launch import group_deployments
from harness.plan.schedule import duration_of, need_of


@dataclass(frozen=True)
class ShardUnit:
    """What goes to one shard whole: a deployment's cases, or one case that launches nothing."""

    key: str  # the deployment key, or the case id of a case that launches nothing here
    cases: tuple[str, ...]
    weight: float
    launches: bool


@dataclass(frozen=True)
class Shard:
    index: int  # 1 to ``of``
    of: int
    units: tuple[ShardUnit, ...]
    total: float  # the weight of every shard together
    by: str  # "seconds" or "cases"

    @property
    def cases(self) -> list[str]:
        return [c for u in self.units for c in u.cases]

    @property
    def weight(self) -> float:
        return sum(u.weight for u in self.units)

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "of": self.of,
            "balanced_by": self.by,
            "weight": self.weight,
            "total_weight": self.total,
            "cases": self.cases,
            "deployments": [
                {"key": u.key, "cases": list(u.cases), "weight": u.weight} for u in self.units if u.launches
            ],
        }


def units(m: Matrix, cases: Sequence[Case], cluster: Cluster, durations: Mapping[str, float] | None) -> list[ShardUnit]:
    """The cases grouped as a run groups them into deployments, each with its weight."""
    planned = []
    out = []
    for c in cases:
        if c.expectation.kind in NO_LAUNCH:
            out.append(ShardUnit(c.id, (c.id,), 0.0 if durations is not None else 1.0, False))
            continue
        try:
            planned.append(plan(m, c, cluster))
        except PlanError:  # recorded as not fitting the cluster, without a launch
            out.append(ShardUnit(c.id, (c.id,), 0.0 if durations is not None else 1.0, False))
    for d in group_deployments(planned):
        weight = duration_of(need_of(d), durations)[0] if durations is not None else float(len(d.case_ids))
        out.append(ShardUnit(d.key, d.case_ids, weight, True))
    return out


def split(all_units: Sequence[ShardUnit], of: int, by: str) -> list[Shard]:
    """``of`` shards, every unit in exactly one, heaviest first onto the lightest."""
    loads = [0.0] * of
    taken: list[list[ShardUnit]] = [[] for _ in range(of)]
    for u in sorted(all_units, key=lambda u: (-u.weight, u.key)):
        i = min(range(of), key=lambda i: (loads[i], len(taken[i]), i))
        taken[i].append(u)
        loads[i] += u.weight
    total = sum(loads)
    return [Shard(i + 1, of, tuple(taken[i]), total, by) for i in range(of)]

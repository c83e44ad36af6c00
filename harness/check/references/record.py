"""Recording a golden: the outputs of one launch, with the requests, the launch and the stack
they came from, for cases whose reference cannot run where the case runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from harness.cases.case import Case
from harness.cases.workload import plan_workload
from harness.check.references.goldens import golden_record, shape_for
from harness.check.serving.launcher import Launcher
from harness.check.serving.stack import probe_versions
from harness.check.traffic.ask import ask
from harness.launch import Deployment, Placement
from harness.matrix.load import Matrix
from harness.matrix.schema import Reference
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.launch import Ports
from harness.plan.reference import ResolvedReference, plan_reference, resolve
from harness.results.store import write_json_atomic
from harness.target.zoo import default_cache_root, ensure_model


class GoldenError(RuntimeError):
    pass


def record_golden(
    m: Matrix,
    case: Case,
    cluster: Cluster,
    out: Path,
    from_case: bool = False,
    work_dir: Path = Path("runs/golden"),
    fold: Literal["none", "tp"] = "none",
    topology: str | None = None,
) -> Path:
    """Launch the case's counterpart (or ``topology``, or with ``from_case`` the case itself), ask
    it what the case's comparison asks, and write the golden to ``out``."""
    resolved = resolve(m, case)
    source = Reference(kind="topology", topology=topology) if topology else Reference(kind="counterpart", fold=fold)
    launch_ref = ResolvedReference(source, resolved.compare, "golden record", resolved.base_dir)

    def replan(placement: Placement | None, ports: Ports) -> Deployment:
        if from_case:
            return plan(m, case, cluster, placement=placement, ports=ports)
        return plan_reference(m, case, cluster, launch_ref, placement, ports)

    planned = replan(None, Ports())
    variant = m.variant(case.family, case.variant)
    for ref in [variant.model, *variant.drafters.values()]:
        if ref.startswith("zoo:"):
            ensure_model(ref[4:], default_cache_root())
    suite = m.suite(case.suite)
    work_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher(cluster, work_dir, suite.request_timeout_s)
    versions = probe_versions(cluster)
    pooling = m.pools(case.features)
    with launcher.serve(replan, planned.placement, f"golden {case.id}", work_dir / "logs") as live:
        why = live.why_not_ready(suite.startup_timeout_s)
        if why:
            raise GoldenError(f"the launch {why}")
        outputs = ask(live, suite.accuracy, resolved.compare, pooling, plan_workload(m, case))
        score: dict[str, Any] | None = None
        if resolved.spec.score is not None:
            from harness.check.scores.evaluate import evaluate_live

            score = evaluate_live(
                live, resolved.spec.score, resolved.base_dir, work_dir / "score", suite.request_timeout_s
            )
            outputs.score = score
        real = live.deployment
    nodes = {s.node for s in real.launches}
    data = golden_record(
        outputs, shape_for(m, case, resolved), real, {n: versions.get(n, {}) for n in nodes}, real.model, score
    )
    data["case"] = case.id
    data["from"] = "the case itself" if from_case else launch_ref.describe()
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, data)
    json.loads(out.read_text())  # written whole
    return out

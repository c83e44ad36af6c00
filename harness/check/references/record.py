"""Recording a golden: the outputs of one launch, with the requests, the launch and the stack
they came from, for cases whose reference cannot run where the case runs. The launch is asked
exactly what a launched reference is asked during a run (``ask_reference``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from harness.check.references.goldens import golden_record, shape_for
from harness.check.references.runs import ask_reference
from harness.check.serving.launcher import Launcher
from harness.check.serving.stack import probe_versions
from harness.launch import Deployment, Placement
from harness.matrix.schema import Reference
from harness.plan.launch import Ports
from harness.plan.reference import ReferenceUnavailable, ResolvedReference
from harness.plan.resolved import Planner, ResolvedCase
from harness.safe_write import check, write_json
from harness.target.zoo import default_cache_root
from harness.target.zoo_lora import ensure_zoo


class GoldenError(RuntimeError):
    pass


def record_golden(
    planner: Planner,
    rc: ResolvedCase,
    out: Path,
    from_case: bool = False,
    work_dir: Path = Path("runs/golden"),
    fold: Literal["none", "tp"] = "none",
    topology: str | None = None,
    force: bool = False,
) -> Path:
    """Launch the case's counterpart (or ``topology``, or with ``from_case`` the case itself), ask
    it what the case's comparison asks, and write the golden to ``out`` (a golden ppconf recorded
    there before is replaced; any other file only with ``force``: checked before the launch)."""
    check(out, force=force)
    resolved = rc.reference
    source = Reference(kind="topology", topology=topology) if topology else Reference(kind="counterpart", fold=fold)
    launch_ref = ResolvedReference(source, resolved.compare, "golden record", resolved.base_dir)

    def replan(placement: Placement | None, ports: Ports) -> Deployment:
        if from_case:
            return planner.deployment(rc.case, placement, ports)
        return planner.reference(rc.case, launch_ref, placement, ports)

    planned = replan(None, Ports())
    for name in planner.zoo_models([rc.case]):
        ensure_zoo(name, default_cache_root())
    work_dir.mkdir(parents=True, exist_ok=True)
    launcher = Launcher(planner.cluster, work_dir, rc.request_timeout_s)
    versions = probe_versions(planner.cluster)
    with launcher.serve(replan, planned.placement, f"golden {rc.id}", work_dir / "logs") as live:
        why = live.why_not_ready(rc.startup_timeout_s)
        if why:
            raise GoldenError(f"the launch {why}")
        try:
            outputs = ask_reference(live, rc, resolved, work_dir)
        except ReferenceUnavailable as err:
            raise GoldenError(str(err)) from None
        real = live.deployment
    nodes = {s.node for s in real.launches}
    data = golden_record(
        outputs, shape_for(rc), real, {n: versions.get(n, {}) for n in nodes}, real.model, outputs.score
    )
    data["case"] = rc.id
    data["from"] = "the case itself" if from_case else launch_ref.describe()
    write_json(out, data, force=force)
    json.loads(out.read_text())  # written whole
    return out

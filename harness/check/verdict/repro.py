"""Repro bundles: what a reader of a red cell needs to reproduce it by hand or re-run it."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.cases.phases.kind import PhasePlan
from harness.check import logs
from harness.check.verdict import standalone
from harness.launch import Deployment, export, payload_lines
from harness.matrix.schema import Accuracy
from harness.redact import Redactor
from harness.results import store
from harness.results.result import Result


def bundle_dir(run_dir: Path, case_id: str) -> Path:
    """A readable slug of the case id plus a short hash of the whole id: ids that differ only in
    characters the slug folds (``1,4``, ``1;4``, ``1 4``) still get folders of their own."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", case_id)[:120]
    return run_dir / "repro" / f"{slug}-{hashlib.sha256(case_id.encode()).hexdigest()[:8]}"


def _comment(text: str) -> str:
    """One shell comment line, whatever the text holds: a newline in a case id or a reason must
    not end the comment and run what follows."""
    return "# " + " ".join(str(text).splitlines())


def write_bundle(
    run_dir: Path,
    record: Result,
    d: Deployment | None,
    matrices: Path | Sequence[Path],
    attrs: dict[str, Any],
    redactor: Redactor | None = None,
    traffic: tuple[Accuracy | None, tuple[PhasePlan, ...]] | None = None,
) -> dict[str, str]:
    """Per-node commands with env, the case and the rule that applied, versions, the log excerpt
    around the root cause, and the one command that re-runs just this case. Everything written
    has the run's secrets masked (``redactor``; env and flags by name in any case). With the
    case's ``traffic`` (its suite's sequential requests and its phases), also the standalone
    client with the exact requests and expected vs observed answers (``standalone``)."""
    redactor = redactor or Redactor()
    out = safe_write.make_dir(bundle_dir(run_dir, record.case), run_dir)
    # every matrices directory the run layered (a shrink's candidate is a layer over the run's),
    # and the stack the case ran on
    roots = [matrices] if isinstance(matrices, Path) else list(matrices)
    words = ["ppconf", "run", *(w for root in roots for w in ("--matrices", str(root)))]
    words += ["--suite", record.suite, "--case", record.case, *(["--stack", record.stack] if record.stack else [])]
    rerun = " ".join(shlex.quote(w) for w in words)
    lines = [
        "#!/usr/bin/env bash",
        _comment(f"Reproduce {record.case} ({record.outcome.value}): {record.reason}"),
        _comment(f"Re-run just this case through ppconf: {rerun}"),
        "",
    ]
    chunks = []  # masked text, then each launch's payload as it is: ppconf's own files hold no secret
    for spec, launch in zip(d.launches, d.to_json()["launches"], strict=True) if d else []:
        lines.append(_comment(f"--- {launch['name']}: {launch['role']} on {launch['node']} ({launch['host']})"))
        if launch.get("set_env"):
            lines.append(f"source {shlex.quote(launch['set_env'])}")
        lines += [export(k, v) for k, v in sorted(launch["env"].items())]
        if spec.payload:  # the stage probe, written inline as the runner writes it
            chunks += [redactor.text("\n".join(lines)), "\n".join(payload_lines(spec.payload))]
            lines = []
        lines += [" ".join(shlex.quote(w) for w in launch["argv"]), ""]
    chunks.append(redactor.text("\n".join(lines)))
    safe_write.write_text(out / "commands.sh", "\n".join(chunks))
    versions = record.versions or store.read_meta(run_dir).get("versions")
    obs = record.observation
    excerpts = {}
    for key, line in (("root_cause", obs.root_cause), ("expected_error_line", obs.expected_error_line)):
        ref = obs.logs.get(line.log) if line else None
        path = store.log_path(run_dir, ref) if ref else None
        if line and path:
            excerpts[key] = logs.excerpt(path, line.line, before=15, after=5)
    case = json.loads(
        json.dumps(
            {
                "case": record.case,
                "outcome": record.outcome.value,
                "reason": record.reason,
                "diagnosis": record.diagnosis.to_json() if record.diagnosis else None,
                "attributes": attrs,
                "expectation": record.expectation.to_json(),
                "versions": versions,
                "log_excerpts": excerpts,
                "logs": obs.logs,
                "rerun": rerun,
                "harness_error": record.harness_error,
            },
            default=str,
        )
    )
    safe_write.write_text(out / "case.json", json.dumps(redactor.scrub(case), indent=2))
    if traffic is not None and obs.ready:
        standalone.write(out, d, obs, *traffic)
    return {"dir": str(out), "rerun": rerun}

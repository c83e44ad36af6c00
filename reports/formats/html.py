"""support.html: one self-contained page, the support tables with every cell linked to its
evidence (commands, env, log excerpts, workload, stages), by outcome, waivers and a timeline."""

from __future__ import annotations

import datetime
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import redact, safe_write
from harness.check import logs
from harness.launch import PlanError
from harness.outcomes import WAIVER_KINDS, Outcome, symbol
from harness.results import store as results
from harness.results.result import LogLine, Observation, Result
from reports import links, traffic
from reports.cells import Entry, claim_text
from reports.formats import Report, ReportFormat
from reports.render import environment


def write(report: Report, path: Path) -> None:
    evidence = [_evidence(report.run_dir, e, report.out) for e in report.entries]
    present = sorted({Outcome(e.outcome) for e in report.entries if e.outcome}, key=lambda o: -o.severity)
    html = (
        environment(True)
        .get_template("support.html.j2")
        .render(
            **report.context,
            evidence=evidence,
            by_outcome=[(o, [x for x in evidence if x["outcome"] == o]) for o in present],
            waivers=[x for x in evidence if x["waiver"]],
            all_outcomes=list(Outcome),
            timeline=_timeline(report.records),
        )
    )
    safe_write.write_text(path, html, force=report.force)


def _excerpt(run_dir: Path, obs: Observation, line: LogLine | None, title: str) -> dict[str, str] | None:
    ref = obs.logs.get(line.log) if line else None
    if not line or not ref:
        return None
    path = results.log_path(run_dir, ref)
    if path is None:
        return {
            "title": f"{title} — {line.log}:{line.line}",
            "text": f"(no log {ref!r} in the run directory {run_dir}: it was moved, or points outside the run)",
        }
    text = "\n".join(logs.excerpt(path, line.line, before=8, after=3))
    # the run scrubbed its logs of the values it knew; secret-looking NAME=value and flags are
    # masked here too, for logs that outlived the values (a run from an older ppconf)
    return {"title": f"{title} — {line.log}:{line.line}", "text": redact.text(text)}


def _waiver(e: Entry) -> dict[str, Any] | None:
    exp = e.expectation
    if exp.kind not in WAIVER_KINDS:
        return None
    return {
        "kind": exp.kind.value,
        "link": exp.link,
        "href": links.web(exp.link),
        "owner": exp.owner or "none",
        "until": f"until {exp.until.isoformat()}" if exp.until else "no expiry",
    }


def _evidence(run_dir: Path | None, e: Entry, page_dir: Path) -> dict[str, Any]:
    r = e.record
    obs = r.observation if r else Observation()
    launches = []
    for l in r.deployment.launches if r and r.deployment else []:
        try:
            shell = replace(l, env=tuple(sorted(l.env)), payload=()).shell()
        except PlanError as err:  # a record written by hand, or before names were checked
            shell = f"# not shown: {err}"
        for p in l.payload:  # its content is not in the record; the repro bundle writes it inline
            note = f"# {p.name} (sha256 {p.sha256[:12]}) was written into this launch's directory, first on PYTHONPATH"
            shell = f"{note}\n{shell}"
        launches.append({"name": l.name, "role": l.role, "node": l.node, "shell": shell})
    excerpts = (
        [
            x
            for x in (
                _excerpt(run_dir, obs, obs.expected_error_line, "expected error"),
                _excerpt(run_dir, obs, obs.root_cause, "root cause"),
            )
            if x
        ]
        if run_dir
        else []
    )
    return {
        "case": e.case,
        "anchor": e.anchor,
        "cell": e.cell_anchor,
        "where": f"{e.family} / {e.row} / {e.column}",
        "symbol": symbol(e.outcome),
        "waiver": _waiver(e),
        "logs": links.log_links(run_dir, r, page_dir),
        "bundle": links.bundle_links(run_dir, r, page_dir),
        "outcome": e.outcome,
        "reason": e.reason,
        "claim": claim_text(e.expectation),
        "duration": r.duration_s if r else None,
        "ready_s": obs.ready_s,
        "partition": obs.partition,
        "partition_expected": obs.partition_expected,
        "partition_source": obs.partition_source,
        "accuracy": obs.accuracy,
        "reference": obs.reference,
        "reference_error": obs.reference_error,
        "score": obs.score,
        "notes": obs.notes,
        "launches": launches,
        "excerpts": excerpts,
        "feature_checks": obs.feature_checks,
        "workload": [traffic.phase_row(e.case, p) for p in obs.workload],
        "stages": traffic.stage_rows(obs.stages) if obs.stages else [],
        "diagnosis": r.diagnosis if r else None,
        "repro": r.repro.rerun if r and r.repro else None,
    }


def _timeline(records: list[Result]) -> list[dict[str, Any]]:
    spans = []
    for r in records:
        if not r.started:
            continue
        start = datetime.datetime.fromisoformat(r.started).timestamp()
        spans.append((start, r.duration_s or 0.0, r))
    if not spans:
        return []
    t0 = min(s for s, _, _ in spans)
    total = max(s + d for s, d, _ in spans) - t0 or 1.0
    return [
        {
            "case": r.case,
            "outcome": r.outcome.value,
            "duration": d,
            "left": round(100 * (s - t0) / total, 2),
            "width": max(0.3, round(100 * d / total, 2)),
        }
        for s, d, r in sorted(spans, key=lambda x: x[0])
    ]


FORMAT = ReportFormat("support.html", write)

"""Rendering a run directory (or the matrix's claims) into support.md, support.html,
summary.json and junit.xml. Reads only what the run wrote; never launches anything."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jinja2

from harness import redact
from harness.check import logs
from harness.launch import PlanError
from harness.outcomes import WAIVER_KINDS, Outcome, symbol
from harness.results import store as results
from harness.results.result import LogLine, Observation, Result
from harness.target.versions import stack
from reports import traffic

from . import junit, links, markdown
from .cells import LEGEND, Entry, Table, build_tables, claim_text, entries_from_claims, entries_from_results
from .feature_table import feature_claims

TEMPLATES = Path(__file__).parent / "templates"


def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = markdown.text  # Markdown cells: text a run recorded renders as itself
    env.filters["outcome_symbol"] = symbol
    return env


def load_meta(run_dir: Path) -> dict[str, Any]:
    return results.read_meta(run_dir)


def header(meta: dict[str, Any], records: list[Result]) -> str:
    parts = []
    if meta.get("suite"):
        parts.append(f"suite {meta['suite']}")
    if meta.get("cluster"):
        parts.append(f"cluster {meta['cluster']}")
    if meta.get("started"):
        parts.append(f"started {meta['started']}")
    for node, versions in (meta.get("versions") or {}).items():
        parts.append(f"{node}: {stack(versions)}")
    if records:
        counts: dict[str, int] = {}
        for r in records:
            counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
        parts.append(", ".join(f"{n} {o}" for o, n in sorted(counts.items())))
    return " · ".join(parts)


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


def _tuning(entries: list[Entry]) -> list[dict[str, Any]]:
    """The partition-tuning advice of each served case that measured its stages."""
    rows = []
    for e in entries:
        t = e.record.observation.tuning if e.record else None
        if not t:
            continue
        stages = "; ".join(
            f"stage {s.stage}: {s.layers} layer{'' if s.layers == 1 else 's'}, "
            f"{'?' if s.step_ms is None else s.step_ms} ms, "
            f"{'?' if s.peak_mib is None else s.peak_mib} MiB"
            for s in t.stages
        )
        rows.append(
            {
                "case": e.case,
                "partition": t.partition,
                "stages": stages,
                "by_step_time": t.by_step_time.why,
                "by_memory": t.by_memory.why,
                "advice": t.advice.why if t.advice else "",
            }
        )
    return rows


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


def render(
    entries: list[Entry],
    out: Path,
    head: str,
    claims_only: bool,
    titles: dict[str, str],
    records: list[Result],
    features: list | None = None,
    run_dir: Path | None = None,
) -> list[Table]:
    results.out_dir(out)
    tables = build_tables(entries, titles)
    ctx = {
        "tables": tables,
        "legend": LEGEND,
        "header": head,
        "claims_only": claims_only,
        "feature_rows": features or [],
        "tuning": _tuning(entries),
        "traffic": traffic.rows(records),
        "plots": traffic.plots(records),
    }
    results.write_text(out / "support.md", environment(False).get_template("support.md.j2").render(**ctx))
    evidence = [_evidence(run_dir, e, out) for e in entries]
    present = sorted({Outcome(e.outcome) for e in entries if e.outcome}, key=lambda o: -o.severity)
    html = (
        environment(True)
        .get_template("support.html.j2")
        .render(
            **ctx,
            evidence=evidence,
            by_outcome=[(o, [x for x in evidence if x["outcome"] == o]) for o in present],
            waivers=[x for x in evidence if x["waiver"]],
            all_outcomes=list(Outcome),
            timeline=_timeline(records),
        )
    )
    results.write_text(out / "support.html", html)
    results.write_text(
        out / "summary.json", json.dumps(summary(tables, entries, head), indent=2, sort_keys=True, default=str)
    )
    junit.write_junit(entries, out / "junit.xml", run_dir)
    return tables


def summary(tables: list[Table], entries: list[Entry], head: str) -> dict[str, Any]:
    return {
        "header": head,
        "cases": [
            {
                "case": e.case,
                **{k: v for k, v in e.coordinates().items() if k not in ("id", "suite")},  # a report is of one suite
                "claim": e.expectation.to_json(),
                "outcome": e.outcome,
                "reason": e.reason,
            }
            for e in entries
        ],
        "cells": [
            {
                "family": t.family,
                "row": row,
                "column": col,
                "symbol": c.symbol,
                "claimed": c.claimed,
                "outcome": c.outcome,
                "fails_run": c.fails_run,
                "note": c.note,
                "cases": [e.case for e in c.entries],
            }
            for t in tables
            for (row, col), c in t.cells.items()
        ],
    }


def report_run(run_dir: Path, out: Path, titles: dict[str, str] | None = None) -> list[Table]:
    records = results.read(results.check_run_dir(run_dir))
    return render(
        entries_from_results(records),
        out,
        header(load_meta(run_dir), records),
        False,
        titles or {},
        records,
        run_dir=run_dir,
    )


def report_claims(cases, out: Path, titles: dict[str, str] | None = None, head: str = "", matrix=None) -> list[Table]:
    return render(
        entries_from_claims(cases),
        out,
        head,
        True,
        titles or {},
        [],
        feature_claims(matrix, cases) if matrix is not None else [],
    )

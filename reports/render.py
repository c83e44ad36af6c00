"""Rendering a run directory (or the matrix's claims) into a report, in every format of
``harness.registry.REPORT_FORMATS`` (support.md, support.html, summary.json, junit.xml; one module
each in ``reports.formats``). Reads only what the run wrote; never launches anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from harness.outcomes import symbol
from harness.registry import REPORT_FORMATS
from harness.results import store as results
from harness.results.result import Result
from harness.target.versions import stack
from reports import traffic
from reports.formats import Report

from . import markdown
from .cells import LEGEND, Entry, Table, build_tables, entries_from_claims, entries_from_results
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


def render(
    entries: list[Entry],
    out: Path,
    head: str,
    claims_only: bool,
    titles: dict[str, str],
    records: list[Result],
    features: list | None = None,
    run_dir: Path | None = None,
    force: bool = False,
) -> list[Table]:
    results.out_dir(out)
    tables = build_tables(entries, titles)
    ctx: dict[str, Any] = {
        "tables": tables,
        "legend": LEGEND,
        "header": head,
        "claims_only": claims_only,
        "feature_rows": features or [],
        "tuning": _tuning(entries),
        "traffic": traffic.rows(records),
        "plots": traffic.plots(records),
    }
    report = Report(entries, tables, head, ctx, records, run_dir, out, force)
    for fmt in REPORT_FORMATS.values():
        fmt.write(report, out / fmt.file)
    return tables


def report_run(run_dir: Path, out: Path, titles: dict[str, str] | None = None, force: bool = False) -> list[Table]:
    records = results.read(results.check_run_dir(run_dir))
    return render(
        entries_from_results(records),
        out,
        header(load_meta(run_dir), records),
        False,
        titles or {},
        records,
        run_dir=run_dir,
        force=force,
    )


def report_claims(
    cases, out: Path, titles: dict[str, str] | None = None, head: str = "", matrix=None, force: bool = False
) -> list[Table]:
    return render(
        entries_from_claims(cases),
        out,
        head,
        True,
        titles or {},
        [],
        feature_claims(matrix, cases) if matrix is not None else [],
        force=force,
    )

"""Commands that read what runs wrote: report, diff, signoff, docs-drift, ingest, history, triage."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import safe_write
from harness.cases.expand import expand
from harness.commands.common import CliError, matrix, matrix_of_run, say_written
from harness.registry import REPORT_FORMATS
from harness.results import store


def cmd_report(args: argparse.Namespace) -> int:
    from reports.render import report_claims, report_run

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out}: exists and is not a directory")
    if args.claims_only:
        m = matrix(args)
        titles = {name: f.title for name, f in m.families.items()}
        suites = args.suite or sorted(m.suites)
        cases = {c.id: c for s in suites for c in expand(m, s).cases}
        out = args.out or Path("reports-out") / "claims"
        report_claims(
            list(cases.values()), out, titles, f"claims of {', '.join(suites)} in {m.root}", m, force=args.force
        )
    else:
        if args.run_dir is None:
            print("error: give a run directory, or --claims-only", file=sys.stderr)
            return 2
        if (args.run_dir / store.STACKS).is_file():  # a run over several stacks: the table across them
            from reports.stacks import write_stack_report

            for path in write_stack_report(args.run_dir, args.out or args.run_dir / "report", force=args.force):
                print(path)
            return 0
        store.check_run_dir(args.run_dir)
        m = matrix_of_run(args, args.run_dir)
        out = args.out or args.run_dir / "report"
        report_run(args.run_dir, out, {name: f.title for name, f in m.families.items()}, force=args.force)
    say_written(
        "the report" + (" of the claims (default --out)" if args.claims_only and not args.out else ""), out, args.quiet
    )
    for fmt in REPORT_FORMATS.values():
        print(out / fmt.file)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from reports.signoff import diff_runs

    d = diff_runs(args.run_dir, args.baseline_dir)
    if args.format == "json":
        print(json.dumps({"run": str(args.run_dir), "baseline": str(args.baseline_dir), **d.to_json()}, indent=2))
    else:
        lines = d.lines()
        print("\n".join(lines) if lines else "no differences")
    return 1 if d.regressed else 0


def cmd_signoff(args: argparse.Namespace) -> int:
    from reports.signoff import current_claims, signoff

    store.check_run_dir(args.run_dir)
    if args.baseline is not None:
        store.check_run_dir(args.baseline)
    verdict = signoff(args.run_dir, args.baseline, current_claims(args.run_dir, matrix_of_run(args, args.run_dir)))
    safe_write.write_text(args.run_dir / "signoff.md", verdict.page, force=args.force)
    if args.format == "json":
        baseline = str(args.baseline) if args.baseline is not None else None
        print(json.dumps({"run": str(args.run_dir), "baseline": baseline, **verdict.to_json()}, indent=2))
    else:
        print(verdict.page, end="")
    say_written("the sign-off", args.run_dir / "signoff.md", args.quiet)
    return 0 if verdict.ok else 1


def cmd_docs_drift(args: argparse.Namespace) -> int:
    from harness.results import store as results
    from reports.drift import docs_drift

    if not args.doc.is_file():
        raise CliError(f"{args.doc}: no such file")
    m = matrix(args)
    suites = args.suite or sorted(n for n, s in m.suites.items() if s.platform == args.platform)
    cases = list({c.id: c for s in suites for c in expand(m, s).cases}.values())
    records = results.read(results.check_run_dir(args.run)) if args.run else None
    drifts = docs_drift(args.doc, m, cases, records)
    if args.format == "json":
        run = str(args.run) if args.run else None
        out = {
            "doc": str(args.doc),
            "suites": suites,
            "run": run,
            "disagreements": [d.to_json(args.doc) for d in drifts],
        }
        print(json.dumps(out, indent=2))
        return 1 if drifts else 0
    for d in drifts:
        print(f"{args.doc}:{d}")
    print(
        f"{len(drifts)} disagreement(s) between {args.doc} and the claims of {', '.join(suites)}"
        + (f" / the run {args.run}" if args.run else "")
    )
    return 1 if drifts else 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from harness.results import index

    for run_dir in args.run_dirs:
        store.check_run_dir(run_dir)  # every directory is checked before the index is touched
    try:
        conn = index.connect(args.index)
    except index.IndexFileError as err:
        raise CliError(str(err)) from None
    try:
        for run_dir in args.run_dirs:
            run, count, existed = index.ingest(conn, run_dir)
            print(
                f"{run_dir}: run {run.run_id} ({run.suite}, started {run.started}), {count} cases "
                f"{'replaced' if existed else 'added'}"
            )
    finally:
        conn.close()
    print(f"index: {args.index}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from harness.results.index import IndexFileError
    from reports.history import write_history

    if args.last < 1:
        raise CliError(f"--last {args.last}: give a number of runs, 1 or more")
    if not 0 < args.flaky_rate <= 1:
        raise CliError(f"--flaky-rate {args.flaky_rate}: give a fraction in (0, 1]")
    if args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out}: exists and is not a directory")
    try:
        md, html = write_history(args.index, args.out, args.last, args.suite, args.flaky_rate, force=args.force)
    except IndexFileError as err:
        raise CliError(str(err)) from None
    print(md)
    print(html)
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    from reports.triage import clusters, text_report

    found = clusters(args.run_dirs, matrix(args).diagnosis)
    if args.format == "json":
        print(json.dumps({"runs": [str(p) for p in args.run_dirs], "clusters": [c.to_json() for c in found]}, indent=2))
    else:
        print(text_report(found))
    return 0

"""The ppconf command line: thin wrappers over the library's steps, one subcommand each."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.cases.expand import expand, select
from harness.cases.lint import lint
from harness.cases.partition import MAX_LAYERS, MAX_PP, RULE_SETS, PartitionError, stage_ranges, tuning_advice
from harness.check.serving.stack import layer_counts
from harness.matrix.condition import ConditionError
from harness.matrix.load import DEFAULT_MATRICES, Matrix, load_matrix
from harness.matrix.source import MatrixError
from harness.outcomes import Kind
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.launch import PlanError
from harness.results import store
from harness.results.lock import RunBusy, run_lock


class CliError(Exception):
    """A usage error reported as one line, exit status 2."""


def _matrix(args: argparse.Namespace) -> Matrix:
    return load_matrix(args.matrices or [DEFAULT_MATRICES])


def _run_matrix(args: argparse.Namespace, run_dir: Path) -> Matrix:
    """The matrices a run was made with (as run.json records them), unless --matrices says
    otherwise: a run of a private suite is judged against its own claims, not the shipped ones."""
    recorded = store.recorded_matrices(store.read_meta(run_dir))
    if args.matrices is not None or not recorded:
        return _matrix(args)
    missing = [str(p) for p in recorded if not p.is_dir()]
    if missing:
        raise CliError(
            f"{run_dir} was made with the matrices {', '.join(missing)}, which are not here; give --matrices DIR"
        )
    return load_matrix(recorded)


def _check_select(expr: str | None) -> None:
    if expr is not None:
        from harness.matrix import condition
        from harness.matrix.attributes import ATTRIBUTES

        try:
            condition.parse(expr, dict(ATTRIBUTES))
        except ConditionError as err:
            raise CliError(
                f"--select {expr!r}: {err.reason} at column {err.column}"
                + (f" (did you mean '{err.hint}'?)" if err.hint else "")
            ) from None


def cmd_lint(args: argparse.Namespace) -> int:
    m = _matrix(args)
    report = lint(m)
    for w in report.warnings:
        print(f"warning: {w}")
    for e in report.errors:
        print(f"error: {e}")
    unfit = _references_unfit(m, args) if args.cluster else []
    for e in unfit:
        print(f"error: {e}")
    print(
        f"{len(m.rules)} rules, {report.cases} cases in {len(m.suites)} suites: "
        f"{len(report.errors) + len(unfit)} errors, {len(report.warnings)} warnings"
    )
    ok = report.ok and not unfit
    if args.plans:
        ok = _lint_plans(m, args.suite, args.cluster) and ok
    return 0 if ok else 1


def _lint_plans(m: Matrix, suites: list[str] | None, cluster_ref: str | None) -> bool:
    """Plan every case of the suites on the cluster(s) and check the plans against the engine."""
    from harness.plan.cluster import DEFAULT_CLUSTERS
    from harness.plan.validate import PlanReport, summarize, validate_cases

    for name in suites or []:
        m.suite(name)  # an unknown suite is an error before anything is planned
    if cluster_ref:
        cluster = load_cluster(cluster_ref)
        pairs = [
            (s, cluster) for s in (suites or sorted(n for n, x in m.suites.items() if x.platform == cluster.platform))
        ]
    else:  # each suite on every shipped inventory of its platform (the local host for cpu)
        clusters = [load_cluster(None)] + [load_cluster(p) for p in sorted(DEFAULT_CLUSTERS.glob("*.yaml"))]
        pairs = [(s, c) for s in (suites or sorted(m.suites)) for c in clusters if c.platform == m.suites[s].platform]
    total = PlanReport()
    for suite, cluster in pairs:
        report = validate_cases(m, expand(m, suite, layer_counts(cluster)).cases, cluster)
        for note in summarize(report.notes):
            print(f"note: {suite} on {cluster.name}: {note}")
        for err in summarize(report.errors):
            print(f"error: {suite} on {cluster.name}: {err}")
        total.extend(report)
    print(
        f"plans: {total.plans} launch plans of {total.cases} cases in {len(pairs)} suite/cluster pairs: "
        f"{len(summarize(total.errors))} errors, {len(summarize(total.notes))} notes"
    )
    return total.ok


def _references_unfit(m: Matrix, args: argparse.Namespace) -> list[str]:
    """Every case of the cluster's platform whose reference cannot be planned or read there."""
    from harness.check.references.goldens import check_plannable
    from harness.outcomes import NEEDS_REFERENCE

    cluster = load_cluster(args.cluster)
    platform = cluster.platform if getattr(cluster, "platform", None) else None
    suites = args.suite or sorted(n for n, s in m.suites.items() if platform is None or s.platform == platform)
    layers = layer_counts(cluster)
    out = []
    for name in suites:
        for c in expand(m, name, layers).cases:
            if c.expectation.kind not in NEEDS_REFERENCE:
                continue
            try:
                plan(m, c, cluster)
            except PlanError:
                continue  # the case itself does not fit this cluster: its reference is moot here
            why = check_plannable(m, c, cluster)
            if why:
                out.append(f"{name}: {c.id}: no reference on cluster '{cluster.name}': {why}")
    return out


def cmd_expand(args: argparse.Namespace) -> int:
    _check_select(args.select)
    m = _matrix(args)
    suites = args.suite or sorted(m.suites)
    out = []
    layers = layer_counts(load_cluster(args.cluster) if args.cluster else None)
    for name in suites:
        exp = expand(m, name, layers)
        cases = select(exp.cases, expr=args.select)
        if args.json:
            out.append(
                {
                    "suite": name,
                    "summary": exp.summary,
                    "pairs_covered": exp.pairs_covered,
                    "pairs_possible": exp.pairs_possible,
                    "full_product": exp.full_product,
                    "cases": [{"id": c.id, "expectation": c.expectation.to_json()} for c in cases],
                }
            )
            continue
        if not args.count:
            for c in cases:
                e = c.expectation
                extra = f" [{e.phase}] /{e.error}/" if e.kind is Kind.REJECTED else ""
                print(f"{c.id:60s} {e.kind}{extra}")
        print(exp.summary)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    for flag, value, top in (("--layers", args.layers, MAX_LAYERS), ("--pp", args.pp, MAX_PP)):
        if not 1 <= value <= top:
            print(f"error: {flag} {value}: give a whole number from 1 to {top}", file=sys.stderr)
            return 2
    try:
        ranges = stage_ranges(args.layers, args.pp, args.partition, args.rules)
    except PartitionError as err:
        if args.json:
            print(json.dumps({"ok": False, "error": str(err)}))
        else:
            print(str(err), file=sys.stderr)
        return 1
    advice = None
    if args.step_ms or args.peak_mib:
        counts = [e - s for s, e in ranges]
        try:
            step = _per_stage(args.step_ms, len(counts), "--step-ms")
            peak = _per_stage(args.peak_mib, len(counts), "--peak-mib")
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        advice = tuning_advice(
            counts,
            [t / 1000 if t is not None else None for t in step],
            [int(m * 2**20) if m is not None else None for m in peak],
        )
    if args.json:
        print(
            json.dumps(
                {
                    "ok": True,
                    "layers": [e - s for s, e in ranges],
                    "ranges": ranges,
                    **({"tuning": advice} if advice else {}),
                }
            )
        )
    else:
        print(f"[{','.join(str(e - s) for s, e in ranges)}]")
        for rank, (s, e) in enumerate(ranges):
            print(f"PP rank {rank}: [{s}, {e})")
        if advice:
            print(f"by forward time: {advice['by_step_time']['why']}")
            print(f"by memory: {advice['by_memory']['why']}")
    return 0


def _per_stage(text: str | None, n: int, flag: str) -> Sequence[float | None]:
    if not text:
        return [None] * n
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: give one number per stage, comma-separated") from None
    bad = next((v for v in values if not math.isfinite(v) or v < 0), None)
    if bad is not None:
        raise ValueError(f"{flag} {text!r}: {bad} is not a measurement (give finite numbers >= 0)")
    if len(values) != n:
        raise ValueError(f"{flag} {text!r}: {len(values)} values for {n} stages")
    return values


def cmd_plan(args: argparse.Namespace) -> int:
    m = _matrix(args)
    cluster = load_cluster(args.cluster)
    cases = select(expand(m, args.suite, layer_counts(cluster)).cases, ids=[args.case])
    if args.format == "lws" and not args.image:
        raise CliError(
            "--format lws needs --image IMAGE: the container image, with vLLM (and the platform's "
            "plugin), that every pod runs"
        )
    planner = lambda c: plan(m, cases[0], c)  # noqa: E731 — one case, planned on a cluster
    try:
        if args.reference:
            from harness.plan.reference import ReferenceUnavailable, plan_reference, resolve

            ref = resolve(m, cases[0])
            print(f"# reference of {cases[0].id}: {ref.describe()}; compared by {ref.compare.mode}", file=sys.stderr)
            planner = lambda c: plan_reference(m, cases[0], c, ref)  # noqa: E731
            try:
                deployment = planner(cluster)
            except ReferenceUnavailable as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
        else:
            deployment = planner(cluster)
        shells = [launch.shell() for launch in deployment.launches] if args.format == "shell" else []
        if args.format == "lws":
            from harness.plan import lws

            print(
                lws.render(
                    lws.manifests(planner, cluster, m.platforms[cases[0].platform], args.image), deployment.model
                ),
                end="",
            )
            return 0
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(deployment.to_json(), indent=2))
        return 0
    for launch, shell in zip(deployment.launches, shells, strict=True):
        print(f"# {launch.name}: {launch.role} on {launch.node} ({launch.host})")
        print(shell)
        print()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from harness.check.serving.launcher import LIVE

    _check_select(args.select)
    run_dir = args.resume or args.out or Path("runs") / f"{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    meta: dict = {}
    if run_dir.exists() and not run_dir.is_dir():
        raise CliError(f"{run_dir} exists and is not a directory")
    if args.resume:
        if not (run_dir / store.META).is_file():
            raise CliError(f"{run_dir} is not a run directory (no {store.META})")
        meta = store.read_meta(run_dir)
        live = run_dir / LIVE
        if live.exists():
            try:
                json.loads(live.read_text(errors="replace") or "[]")
            except ValueError:
                raise CliError(
                    f"{live} is unreadable (a torn write), so the process groups its interrupted case "
                    f"left running are unknown; stop them (their environment carries "
                    f"PPCONF_RUN_DIR={run_dir}), delete {live}, and resume again"
                ) from None
        # a resumed run keeps the suite, selection and matrices it was started with
        suite = args.suite or meta.get("suite")
        args.case = args.case or meta.get("cases")
        args.select = args.select or meta.get("select")
        _check_select(args.select)
        # ...and its cluster: the nodes its cases ran on, and any groups a killed ppconf left there
        args.cluster = args.cluster or meta.get("cluster_ref")
        args.reference_cache = args.reference_cache or (
            Path(meta["reference_cache"]) if meta.get("reference_cache") else None
        )
        m = _run_matrix(args, run_dir)
    else:
        if (run_dir / store.META).exists() or (run_dir / store.RESULTS).exists():
            raise CliError(
                f"{run_dir} already holds a run; finish it with: ppconf run --resume {run_dir} "
                f"(or give --out a new directory)"
            )
        suite = args.suite
        m = _matrix(args)
    if not suite:
        raise CliError("--suite is required (or --resume DIR)")
    with run_lock(run_dir, meta):
        return _run(args, m, suite, run_dir)


def _run(args: argparse.Namespace, m: Matrix, suite: str, run_dir: Path) -> int:
    from harness.console import progress_display
    from harness.results.meta import write_meta
    from harness.run import RunConfig, SuiteRun

    cfg = RunConfig(
        matrix=m,
        suite=suite,
        cluster=load_cluster(args.cluster),
        run_dir=run_dir,
        case_ids=args.case,
        select=args.select,
        resume=bool(args.resume),
        reference_cache=args.reference_cache,
    )
    if not _plans_ok(m, suite, cfg.cluster, args.case, args.select):
        return 2
    with progress_display(suite) as progress:
        runner = SuiteRun(cfg, progress)
        if not args.resume:  # the run adds the nodes' versions when it starts
            ref = args.cluster
            if ref and Path(ref).exists():
                ref = str(Path(ref).resolve())
            write_meta(
                run_dir,
                suite,
                cfg.cluster.name,
                [str(r.resolve()) for r in m.roots],
                {
                    "argv": sys.argv,
                    "cases": args.case,
                    "select": args.select,
                    "cluster_ref": ref,
                    "network": cfg.cluster.network,
                    "reference_cache": str(args.reference_cache) if args.reference_cache else None,
                },
            )
        try:
            summary = runner.run()
        except KeyboardInterrupt:
            summary = None
    if summary is None:
        print(
            f"interrupted; every launched process was stopped. Resume with: ppconf run --resume {run_dir}",
            file=sys.stderr,
        )
        return 130
    counts = ", ".join(f"{n} {o}" for o, n in sorted(summary.counts().items()))
    print(
        f"{summary.cases} cases ({summary.skipped_finished} already finished), {summary.launches} launches "
        f"({summary.reference_launches} of references, {summary.references_reused} references reused): "
        f"{counts or 'nothing run'}"
    )
    print(f"results: {run_dir / 'results.jsonl'}")
    from reports.render import report_run

    report_run(run_dir, run_dir / "report", {name: f.title for name, f in m.families.items()})
    print(f"report:  {run_dir / 'report' / 'support.md'} (and support.html, summary.json, junit.xml)")
    if args.github:
        _github(suite, run_dir)
    return 1 if summary.failed else 0


def _github(suite: str, run_dir: Path) -> None:
    """Annotations for the failing cases, and the job summary where GitHub Actions asks for one."""
    from reports import github

    records = store.read(run_dir)  # the whole run, a resumed run's earlier cases included
    for line in github.error_annotations(records):
        print(line, flush=True)
    github.write_job_summary(github.job_summary(suite, records, run_dir / "report" / "support.html"))


def _plans_ok(m: Matrix, suite: str, cluster, case_ids: list[str] | None, expr: str | None) -> bool:
    """Check the launch plans of the selected cases before anything launches."""
    from harness.plan.validate import summarize, validate_cases

    cases = select(expand(m, suite, layer_counts(cluster)).cases, ids=case_ids, expr=expr)
    report = validate_cases(m, cases, cluster)
    for err in summarize(report.errors):
        print(f"error: {err}", file=sys.stderr)
    if not report.ok:
        print(
            f"error: {len(summarize(report.errors))} problem(s) in the launch plans; nothing was launched "
            f"(`ppconf lint --plans --suite {suite}` shows them too)",
            file=sys.stderr,
        )
    return report.ok


def cmd_golden_record(args: argparse.Namespace) -> int:
    """Launch a case's reference (or, with --from-case, the case itself) and write its outputs as a golden."""
    from harness.check.references.record import record_golden

    m = _matrix(args)
    cluster = load_cluster(args.cluster)
    cases = select(expand(m, args.suite, layer_counts(cluster)).cases, ids=[args.case])
    path = record_golden(
        m,
        cases[0],
        cluster,
        args.out,
        from_case=args.from_case,
        work_dir=args.work_dir or Path("runs") / f"golden-{time.strftime('%Y%m%d-%H%M%S')}",
        fold=args.fold,
        topology=args.topology,
    )
    print(f"golden: {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from reports.render import report_claims, report_run

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out}: exists and is not a directory")
    if args.claims_only:
        m = _matrix(args)
        titles = {name: f.title for name, f in m.families.items()}
        suites = args.suite or sorted(m.suites)
        cases = {c.id: c for s in suites for c in expand(m, s).cases}
        out = args.out or Path("reports-out") / "claims"
        report_claims(list(cases.values()), out, titles, f"claims of {', '.join(suites)} in {m.root}", m)
    else:
        if args.run_dir is None:
            print("error: give a run directory, or --claims-only", file=sys.stderr)
            return 2
        store.check_run_dir(args.run_dir)
        m = _run_matrix(args, args.run_dir)
        out = args.out or args.run_dir / "report"
        report_run(args.run_dir, out, {name: f.title for name, f in m.families.items()})
    for name in ("support.md", "support.html", "summary.json", "junit.xml"):
        print(out / name)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from reports.signoff import diff_runs

    d = diff_runs(args.run_dir, args.baseline_dir)
    lines = d.lines()
    print("\n".join(lines) if lines else "no differences")
    return 1 if d.regressed else 0


def cmd_signoff(args: argparse.Namespace) -> int:
    from reports.signoff import current_claims, signoff

    store.check_run_dir(args.run_dir)
    if args.baseline is not None:
        store.check_run_dir(args.baseline)
    verdict = signoff(args.run_dir, args.baseline, current_claims(args.run_dir, _run_matrix(args, args.run_dir)))
    store.write_text(args.run_dir / "signoff.md", verdict.page)
    print(verdict.page, end="")
    return 0 if verdict.ok else 1


def cmd_docs_drift(args: argparse.Namespace) -> int:
    from harness.results import store as results
    from reports.drift import docs_drift

    if not args.doc.is_file():
        raise CliError(f"{args.doc}: no such file")
    m = _matrix(args)
    suites = args.suite or sorted(n for n, s in m.suites.items() if s.platform == args.platform)
    cases = list({c.id: c for s in suites for c in expand(m, s).cases}.values())
    records = results.read(results.check_run_dir(args.run)) if args.run else None
    drifts = docs_drift(args.doc, m, cases, records)
    for d in drifts:
        print(f"{args.doc}:{d}")
    print(
        f"{len(drifts)} disagreement(s) between {args.doc} and the claims of {', '.join(suites)}"
        + (f" / the run {args.run}" if args.run else "")
    )
    return 1 if drifts else 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from harness.plan.schedule import load_durations, schedule_suite

    m = _matrix(args)
    try:
        durations = load_durations(args.durations) if args.durations else None
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sched = schedule_suite(m, args.suite, load_cluster(args.cluster), durations)
    print(sched.render())
    return 0


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
        md, html = write_history(args.index, args.out, args.last, args.suite, args.flaky_rate)
    except IndexFileError as err:
        raise CliError(str(err)) from None
    print(md)
    print(html)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppconf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        p.add_argument(
            "--matrices",
            type=Path,
            action="append",
            help="matrix directory; repeat to layer one over another, later ones adding and "
            "overriding (default: the shipped matrices/; for a run directory, the matrices "
            "the run recorded)",
        )
        p.add_argument("-v", "--verbose", action="store_true", help="log what ppconf does (to stderr)")
        return p

    p = add("lint", cmd_lint, "check the rules against every case before anything runs")
    p.add_argument(
        "--plans",
        action="store_true",
        help="also plan every case and check the launches against the installed vLLM's serve parser, "
        "its config classes, world sizes, env names and ports",
    )
    p.add_argument("--suite", action="append", help="with --plans: suite (repeatable; default: all)")
    p.add_argument(
        "--cluster",
        help="list every case whose reference cannot be planned on this cluster; with "
        "--plans, the cluster to plan on (default: every shipped inventory of each "
        "suite's platform, and this host for cpu suites)",
    )

    p = add("expand", cmd_expand, "list the cases of one or all suites with their expectations")
    p.add_argument("--suite", action="append", help="suite name (repeatable; default: all)")
    p.add_argument("--select", help="condition over case attributes, e.g. 'pp > 1 && \"mtp\" in features'")
    p.add_argument("--count", action="store_true", help="print only the summary line per suite")
    p.add_argument(
        "--cluster",
        help="read hidden-layer counts the matrix lacks from the models' config.json on "
        "this inventory's first node (default: where this host can read them)",
    )
    p.add_argument("--json", action="store_true")

    p = add("partition", cmd_partition, "the per-rank [start, end) layer ranges vLLM builds")
    p.add_argument("--layers", type=int, required=True, help="hidden layers of the target model")
    p.add_argument("--pp", type=int, required=True, help="pipeline-parallel size")
    p.add_argument("--partition", help="a VLLM_PP_LAYER_PARTITION string (default: auto)")
    p.add_argument(
        "--rules",
        choices=RULE_SETS,
        default="upstream",
        help="upstream: vLLM's checks; ascend-doc: also every entry positive",
    )
    p.add_argument(
        "--step-ms", help="measured mean forward time per stage, e.g. 12.0,15.1: prints the next partition to try"
    )
    p.add_argument("--peak-mib", help="measured peak memory per stage in MiB, e.g. 51000,60500")
    p.add_argument("--json", action="store_true")

    p = add("plan", cmd_plan, "print the processes, per node, that one case launches")
    p.add_argument("--suite", required=True)
    p.add_argument("--case", required=True, help="case id, as printed by expand")
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument(
        "--format",
        choices=["shell", "json", "lws"],
        default="shell",
        help="shell: commands per node; json: the plan, secrets masked; lws: a Kubernetes "
        "LeaderWorkerSet, one pod per node, secrets read from the Secret ppconf-secrets",
    )
    p.add_argument("--image", help="with --format lws: the container image every pod runs")
    p.add_argument("--reference", action="store_true", help="print the case's reference launch instead")

    p = add("run", cmd_run, "run a suite for real and append one result per case to DIR/results.jsonl")
    p.add_argument("--suite", help="suite to run")
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument("--case", action="append", help="run only this case id (repeatable)")
    p.add_argument("--select", help="run only the cases matching this condition")
    p.add_argument("--out", type=Path, help="run directory (default: runs/SUITE-TIMESTAMP)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="finish an interrupted run; finished cases are kept")
    p.add_argument(
        "--reference-cache",
        type=Path,
        metavar="DIR",
        help="reuse reference outputs across runs while their launch and every node's stack are unchanged",
    )
    p.add_argument(
        "--github",
        action="store_true",
        help="for GitHub Actions: an ::error annotation per failing case, and a job summary appended "
        "to $GITHUB_STEP_SUMMARY when it is set",
    )

    p = add("golden", cmd_golden_record, "record a golden: the outputs of a case's reference launch, with its stack")
    p.add_argument("action", choices=["record"])
    p.add_argument("--suite", required=True)
    p.add_argument("--case", required=True, help="case id, as printed by expand")
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument("--out", type=Path, required=True, help="the golden file to write")
    p.add_argument(
        "--from-case",
        action="store_true",
        help="record the case's own outputs (its reference is itself a golden, or none fits)",
    )
    p.add_argument("--fold", choices=["none", "tp"], default="none", help="the counterpart's fold (default: none)")
    p.add_argument("--topology", help="launch this PP=1 topology instead of the counterpart")
    p.add_argument("--work-dir", type=Path, help="where the launch's logs go (default: runs/golden-TIMESTAMP)")

    p = add("report", cmd_report, "render support tables, an evidence page, summary.json and junit.xml from a run")
    p.add_argument("run_dir", type=Path, nargs="?", help="a run directory (holds results.jsonl)")
    p.add_argument("--out", type=Path, help="output directory (default: RUN_DIR/report)")
    p.add_argument("--claims-only", action="store_true", help="render the matrix's claims, no run needed")
    p.add_argument("--suite", action="append", help="with --claims-only: suites to include (default: all)")

    p = add("diff", cmd_diff, "cells that regressed, recovered, appeared or vanished since a baseline run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("baseline_dir", type=Path)

    p = add("signoff", cmd_signoff, "yes or no for a release, with the reasons; exits 1 on no")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--baseline", type=Path, help="a previous run; any regression since it blocks the sign-off")

    p = add("schedule", cmd_schedule, "place a suite's deployments on a cluster and print the plan and its makespan")
    p.add_argument("--suite", required=True)
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument(
        "--simulate",
        action="store_true",
        required=True,
        help="print the schedule without launching anything (the only mode today)",
    )
    p.add_argument("--durations", type=Path, help="a JSON file of seconds per deployment or case, or a run directory")

    p = add("docs-drift", cmd_docs_drift, "list the cells of a published support table that disagree with the matrix")
    p.add_argument("doc", type=Path, help="a Markdown page (or its plain-text export) with a support table")
    p.add_argument("--platform", default="ascend", help="compare with the suites of this platform (default: ascend)")
    p.add_argument("--suite", action="append", help="compare with these suites instead")
    p.add_argument("--run", type=Path, help="also compare with what this run observed")

    from harness.results.index import DEFAULT_INDEX
    from reports.history import DEFAULT_LAST, FLAKY_RATE

    p = add("ingest", cmd_ingest, "add run directories to the results index (a run ingested again is replaced)")
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--index", type=Path, default=DEFAULT_INDEX, help=f"the SQLite index (default: {DEFAULT_INDEX})")

    p = add(
        "history",
        cmd_history,
        "render every cell's and case's outcomes over the last runs, the stack changes, "
        "flip rates and timing trends from the results index",
    )
    p.add_argument("--index", type=Path, default=DEFAULT_INDEX, help=f"the SQLite index (default: {DEFAULT_INDEX})")
    p.add_argument("--out", type=Path, required=True, help="directory for history.md and history.html")
    p.add_argument(
        "--last", type=int, default=DEFAULT_LAST, help=f"runs of each suite to show (default: {DEFAULT_LAST})"
    )
    p.add_argument("--suite", help="only this suite (default: every suite in the index)")
    p.add_argument(
        "--flaky-rate",
        type=float,
        default=FLAKY_RATE,
        help=f"flip rate from which a case is suggested to be waived as flaky (default: {FLAKY_RATE})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except BrokenPipeError:  # `ppconf plan ... | head`: the reader has all it wanted
        sys.stdout = open(os.devnull, "w")
        return 0
    except MatrixError as err:
        for e in err.errors:
            print(f"error: {e}", file=sys.stderr)
        return 2
    except (CliError, store.RunDirError, RunBusy) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Commands that launch: run a suite (fresh or resumed), record a golden."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness import safe_write
from harness.cases.expand import expand, select
from harness.check.serving.stack import layer_counts
from harness.commands.common import CliError, check_select, matrix, matrix_of_run, say_written
from harness.matrix.load import Matrix
from harness.plan.cluster import Cluster, load_cluster
from harness.results import store
from harness.results.lock import run_lock
from harness.run_dir import open_fresh, open_resumed
from harness.stacks.stack import Stack


def cmd_run(args: argparse.Namespace) -> int:
    if args.stack or (args.resume and (args.resume / store.STACKS).is_file()):
        return _run_stacks(args)
    return _run_dir(args)


def _run_stacks(args: argparse.Namespace) -> int:
    """Each case on each stack: one ordinary run per stack in DIR/<stack id>/, the cluster's nodes
    taken onto the stack first (every stack checked on every node before anything launches),
    then the table across the stacks in DIR/report."""
    from harness.plan.stacks import on_stack
    from harness.stacks.stack import StackError, parse_all

    check_select(args.select)
    if args.resume:
        parent = args.resume
        saved = json.loads((parent / store.STACKS).read_text())
        if args.stack and args.stack != saved["stacks"]:
            raise CliError(f"{parent} runs the stacks {', '.join(saved['stacks'])}; resume it without --stack")
        args.suite = args.suite or saved["suite"]
        names = saved["stacks"]
    else:
        if not args.suite:
            raise CliError("--suite is required (or --resume DIR)")
        parent = args.out or Path("runs") / f"{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
        if (parent / store.STACKS).exists():
            raise CliError(f"{parent} already holds a run; finish it with: ppconf run --resume {parent}")
        names = args.stack
    try:
        stacks = parse_all(names)
        base = load_cluster(args.cluster)
        clusters = {s: on_stack(base, s) for s in stacks}
    except StackError as err:
        raise CliError(f"{err}; nothing was launched") from None
    if not args.resume:
        safe_write.write_json(parent / store.STACKS, {"suite": args.suite, "stacks": [str(s) for s in stacks]})
    code = 0
    for s in stacks:
        sub = parent / s.id
        one = argparse.Namespace(**vars(args))
        one.out, one.resume, one.stack = sub, (sub if (sub / store.META).is_file() else None), None
        print(f"stack {s}: {sub}", flush=True)
        got = _run_dir(one, clusters[s], s)
        if got == 2 or got == 130:
            return got
        code = max(code, got)
    from reports.stacks import write_stack_report

    for path in write_stack_report(parent, parent / "report", force=args.force):
        print(f"across stacks: {path}")
    return code


def _run_dir(args: argparse.Namespace, cluster: Cluster | None = None, stack: Stack | None = None) -> int:
    check_select(args.select)
    run_dir = args.resume or args.out or Path("runs") / f"{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    meta: dict = {}
    if args.resume:
        meta = open_resumed(run_dir, adopt=args.force)
        # a resumed run keeps the suite, selection and matrices it was started with
        suite = args.suite or meta.get("suite")
        args.case = args.case or meta.get("cases")
        args.select = args.select or meta.get("select")
        check_select(args.select)
        # ...and its cluster: the nodes its cases ran on, and any groups a killed ppconf left there
        args.cluster = args.cluster or meta.get("cluster_ref")
        args.reference_cache = args.reference_cache or (
            Path(meta["reference_cache"]) if meta.get("reference_cache") else None
        )
        m = matrix_of_run(args, run_dir)
    else:
        open_fresh(run_dir)
        suite = args.suite
        m = matrix(args)
    if not suite:
        raise CliError("--suite is required (or --resume DIR)")
    with run_lock(run_dir, meta):
        return _run(args, m, suite, run_dir, cluster, stack)


def _run(
    args: argparse.Namespace, m: Matrix, suite: str, run_dir: Path, cluster: Cluster | None, stack: Stack | None
) -> int:
    from harness.console import progress_display
    from harness.run import PlansRefused, RunConfig, SuiteRun

    cfg = RunConfig(
        matrix=m,
        suite=suite,
        cluster=cluster or load_cluster(args.cluster),
        run_dir=run_dir,
        case_ids=args.case,
        select=args.select,
        resume=bool(args.resume),
        reference_cache=args.reference_cache,
        cluster_ref=args.cluster,
        max_parallel=args.max_parallel,
        stack=stack,
    )
    runner = SuiteRun(cfg)
    try:
        runner.check_plans()  # before the progress display: the problems are the whole answer
        runner.check_stack()
    except PlansRefused as err:
        for problem in err.errors:
            print(f"error: {problem}", file=sys.stderr)
        print(f"error: {err}", file=sys.stderr)
        return 2
    with progress_display(suite) as progress:
        runner.progress = progress
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
    from harness.registry import REPORT_FORMATS
    from reports.render import report_run

    report_run(run_dir, run_dir / "report", {name: f.title for name, f in m.families.items()}, force=args.force)
    first, *others = (fmt.file for fmt in REPORT_FORMATS.values())
    print(f"report:  {run_dir / 'report' / first} (and {', '.join(others)})")
    if args.github:
        github_output(suite, run_dir)
    return 1 if summary.failed else 0


def github_output(suite: str, run_dir: Path) -> None:
    """Annotations for the failing and the waived cases, and the job summary where GitHub Actions asks for one."""
    from reports import github

    records = store.read(run_dir)  # the whole run, a resumed run's earlier cases included
    for line in github.all_annotations(records):
        print(line, flush=True)
    github.write_job_summary(github.job_summary(suite, records, run_dir / "report" / "support.html"))


def cmd_golden_record(args: argparse.Namespace) -> int:
    """Launch a case's reference (or, with --from-case, the case itself) and write its outputs as a golden."""
    from harness.check.references.record import record_golden
    from harness.plan.resolved import Planner

    m = matrix(args)
    cluster = load_cluster(args.cluster)
    cases = select(expand(m, args.suite, layer_counts(cluster)).cases, ids=[args.case])
    work_dir = args.work_dir or Path("runs") / f"golden-{time.strftime('%Y%m%d-%H%M%S')}"
    planner = Planner(m, cluster)
    path = record_golden(
        planner,
        planner.resolved(cases[0]),
        args.out,
        from_case=args.from_case,
        work_dir=work_dir,
        fold=args.fold,
        topology=args.topology,
        force=args.force,
    )
    say_written("the launch's logs", work_dir, args.quiet)
    print(f"golden: {path}")
    return 0

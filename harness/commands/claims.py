"""Commands on the claims, before anything runs: lint, expand, partition, plan, schedule."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.cases.case import Case
from harness.cases.expand import expand, select
from harness.cases.lint import lint
from harness.cases.partition import MAX_LAYERS, MAX_PP, PartitionError, stage_ranges, tuning_advice
from harness.check.serving.stack import layer_counts
from harness.commands.common import CliError, check_select, matrix
from harness.launch import PlanError
from harness.matrix.load import Matrix, MatrixError
from harness.outcomes import NO_LAUNCH, Kind
from harness.plan.cluster import Cluster, load_cluster
from harness.plan.deployment import plan
from harness.preflight import lint_plans, references_unfit
from harness.target import readspeed


def _migrate(args: argparse.Namespace) -> list[dict]:
    """``lint --migrate``: migrate first, saying what changed (as text now, or for the JSON)."""
    from harness.matrix.migrate import migrate_for_lint  # ruamel.yaml, only when migrating

    args.matrices, migrations = migrate_for_lint(
        args.migrate if isinstance(args.migrate, Path) else None, args.matrices
    )
    migrated: list[dict] = []
    try:
        for migration in migrations:
            if args.format == "text":
                print("\n".join(migration.lines()))
            migrated.append(migration.to_json())
    except MatrixError as err:
        if args.format == "json":  # what the earlier directories changed is on disk: say so
            print(json.dumps({"ok": False, "migrated": migrated, "errors": [str(e) for e in err.errors]}, indent=2))
        raise
    return migrated


def cmd_lint(args: argparse.Namespace) -> int:
    migrated = _migrate(args) if args.migrate is not None else None
    m = matrix(args)
    report = lint(m)
    unfit = references_unfit(m, args.suite, args.cluster) if args.cluster else []
    errors = report.errors + unfit
    ok = report.ok and not unfit
    out = {
        "ok": ok,
        "rules": len(m.rules),
        "cases": report.cases,
        "suites": len(m.suites),
        "errors": len(errors),
        "warnings": len(report.warnings),
        "findings": [f.to_json() for f in report.warnings + errors],
        **({"migrated": migrated} if migrated is not None else {}),
    }
    if args.format == "text":
        for w in report.warnings:
            print(f"warning: {w}")
        for e in errors:
            print(f"error: {e}")
        print(
            f"{out['rules']} rules, {out['cases']} cases in {out['suites']} suites: "
            f"{out['errors']} errors, {out['warnings']} warnings"
        )
    if args.plans:
        from harness.console import steps_display

        with steps_display(args.quiet) as progress:
            plans = lint_plans(m, args.suite, args.cluster, progress.stage, progress.advance)
        if args.format == "text":
            for line in plans.lines:
                print(line)
        out["plans"] = plans.to_json()
        ok = out["ok"] = plans.ok and ok
    if args.format == "json":
        print(json.dumps(out, indent=2))
    return 0 if ok else 1


def cmd_expand(args: argparse.Namespace) -> int:
    check_select(args.select)
    m = matrix(args)
    suites = args.suite or sorted(m.suites)
    out = []
    cluster = load_cluster(args.cluster)
    layers = layer_counts(cluster if args.cluster else None)
    for name in suites:
        exp = expand(m, name, layers)
        cases = select(exp.cases, expr=args.select)
        if args.format == "json":
            out.append(
                {
                    "suite": name,
                    "summary": exp.summary,
                    "pairs_covered": exp.pairs_covered,
                    "pairs_possible": exp.pairs_possible,
                    "full_product": exp.full_product,
                    "cases": [case_json(m, c, cluster) for c in cases],
                }
            )
            continue
        if not args.count:
            for c in cases:
                e = c.expectation
                extra = f" [{e.phase}] /{e.error}/" if e.kind is Kind.REJECTED else ""
                print(f"{c.id:60s} {e.kind}{extra}")
        print(exp.summary)
    if args.format == "json":
        json.dump(out, sys.stdout, indent=2)
        print()
    return 0


def case_json(m: Matrix, case: Case, cluster: Cluster) -> dict:
    """A case as CI reads it: its coordinates, every attribute rules see, its claim, and the key of
    the deployment it shares with the cases planned alike on ``cluster`` (null where it launches
    nothing there, with the reason)."""
    key, why = None, None
    if case.expectation.kind in NO_LAUNCH:
        why = f"claimed {case.expectation.kind}: nothing launches"
    elif case.platform != cluster.platform:
        why = f"a {case.platform} case, cluster {cluster.name} is {cluster.platform}"
    else:
        try:
            key = plan(m, case, cluster).key
        except PlanError as err:
            why = str(err)
    return {
        **{k: v for k, v in case.coordinates().items() if k != "platform"},
        "group": case.group,
        "claim": case.expectation.kind.value,
        "attributes": case.attrs,
        "expectation": case.expectation.to_json(),
        "deployment": key,
        **({"no_deployment": why} if why else {}),
    }


def cmd_partition(args: argparse.Namespace) -> int:
    for flag, value, top in (("--layers", args.layers, MAX_LAYERS), ("--pp", args.pp, MAX_PP)):
        if not 1 <= value <= top:
            print(f"error: {flag} {value}: give a whole number from 1 to {top}", file=sys.stderr)
            return 2
    try:
        ranges = stage_ranges(args.layers, args.pp, args.partition, args.rules)
    except PartitionError as err:
        if args.format == "json":
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
    if args.format == "json":
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
            print(f"next: {advice['advice']['why']}")
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
    m = matrix(args)
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
            from harness.export import lws

            print(
                lws.render(
                    lws.manifests(
                        planner,
                        cluster,
                        m.platforms[cases[0].platform],
                        args.image,
                        Kind.SUPPORTED if args.reference else cases[0].expectation.kind,
                    ),
                    deployment.model,
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


def with_measured_reads(cluster: Cluster) -> Cluster:
    """The inventory with this host's measured read rate on its local nodes that declare none."""
    rate = readspeed.this_host()
    if rate is None:
        return cluster
    nodes = [
        n.model_copy(update={"read_gb_s": rate}) if n.reach == "local" and not n.read_gb_s else n for n in cluster.nodes
    ]
    return cluster.model_copy(update={"nodes": nodes})


def cmd_schedule(args: argparse.Namespace) -> int:
    from harness.plan.schedule import hms, load_durations, schedule_suite

    if args.simulate:
        print(
            "ppconf: --simulate is deprecated, leave it out: schedule never launches anything "
            "(it goes in the next release)",
            file=sys.stderr,
        )
    m = matrix(args)
    try:
        durations = load_durations(args.durations) if args.durations else None
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cluster = load_cluster(args.cluster)
    if args.measure_read is not None:
        try:
            gb_s, nbytes = readspeed.measure(args.measure_read)
        except (OSError, ValueError) as err:
            print(f"error: cannot measure the read rate: {err}", file=sys.stderr)
            return 2
        kept = readspeed.record(gb_s, args.measure_read, nbytes)
        print(
            f"read {nbytes / 1e9:.2f} GB under {args.measure_read} at {gb_s:.2f} GB/s; kept in {kept}", file=sys.stderr
        )
    sched = schedule_suite(m, args.suite, with_measured_reads(cluster), durations)
    if args.format == "json":
        out = sched.to_json()
        if args.window is not None:
            out |= {"window_s": args.window, "fits": sched.fits(args.window)}
        print(json.dumps(out, indent=2))
    else:
        print(sched.render())
    if args.window is not None and not sched.fits(args.window):
        over = sched.makespan - args.window
        print(
            f"warning: suite {args.suite!r} does not fit the {hms(args.window)} window on {sched.cluster}: "
            f"its night takes {hms(sched.makespan)} ({hms(over)} over)",
            file=sys.stderr,
        )
    return 0

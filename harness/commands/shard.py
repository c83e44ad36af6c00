"""``ppconf shard``: the cases one of N CI jobs runs, whole deployments at a time."""

from __future__ import annotations

import argparse
import json
import sys

from harness.cases.expand import expand, select
from harness.check.serving.stack import layer_counts
from harness.commands.common import CliError, check_select, matrix
from harness.plan.cluster import load_cluster

MAX_SHARDS = 4096  # CI jobs of one suite; each shard is built in memory, empty or not


def cmd_shard(args: argparse.Namespace) -> int:
    from harness.plan.schedule import load_durations
    from harness.plan.shard import split, units

    if not 1 <= args.of <= MAX_SHARDS:
        raise CliError(f"--of {args.of}: give a number of shards from 1 to {MAX_SHARDS}")
    if not 1 <= args.index <= args.of:
        raise CliError(f"--index {args.index}: give a shard from 1 to {args.of}")
    check_select(args.select)
    m = matrix(args)
    cluster = load_cluster(args.cluster)
    cases = select(expand(m, args.suite, layer_counts(cluster)).cases, expr=args.select)
    try:
        durations = load_durations(args.durations) if args.durations else None
    except ValueError as err:
        raise CliError(str(err)) from None
    by = "seconds" if durations is not None else "cases"
    shard = split(units(m, cases, cluster, durations), args.of, by)[args.index - 1]
    order = {c.id: i for i, c in enumerate(cases)}
    ids = sorted(shard.cases, key=order.__getitem__)
    if args.format == "json":
        print(json.dumps({"suite": args.suite, **shard.to_json(), "cases": ids}, indent=2))
    else:
        for case_id in ids:
            print(case_id)
    if not args.quiet:
        launching = sum(1 for u in shard.units if u.launches)
        print(
            f"shard {shard.index} of {shard.of}: {len(ids)} of {len(cases)} cases, {launching} deployments, "
            f"{shard.weight:g} of {shard.total:g} {by}",
            file=sys.stderr,
        )
    return 0

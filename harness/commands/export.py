"""`ppconf export`: a suite's cells written in another CI's own config format, for that CI to run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.common import CliError, add_force, matrix, say_written
from harness.export.vllm_ascend_nightly import ExportError, export_suite
from harness.plan.cluster import load_cluster

TARGETS = ("vllm-ascend-nightly",)
DEFAULT_CLUSTER = "a3-pd"  # every shipped Ascend case fits it (matrices/ascend/suites.yaml)


def cmd_export(args: argparse.Namespace) -> int:
    m = matrix(args)
    if args.suite not in m.suites:
        raise CliError(f"unknown suite {args.suite!r}")
    cluster = load_cluster(args.cluster or DEFAULT_CLUSTER)
    if m.suites[args.suite].platform != cluster.platform:
        platform = m.suites[args.suite].platform
        raise CliError(f"suite {args.suite} is {platform}, cluster {cluster.name} is {cluster.platform}")
    try:
        exported = export_suite(m, args.suite, cluster)
    except ExportError as err:
        raise CliError(str(err)) from None
    out = args.out or Path(f"export-{args.suite}")
    written = exported.write(out, force=args.force)
    for path in written:
        print(f"wrote {path}")
    for case, why in exported.skipped:
        print(f"not exported: {case}: {why}", file=sys.stderr)
    print(f"{len(exported.files)} configs, {len(exported.skipped)} PP cells not exported (see {written[-1]})")
    say_written("the export", out, args.quiet)
    return 0


def add_export(add) -> None:
    p = add("export", cmd_export, "write a suite's PP cells as another CI's own config files, for it to run unchanged")
    p.add_argument("target", choices=TARGETS, help="the format: vllm-ascend's multi-node nightly config YAML")
    p.add_argument("--suite", required=True, help="the suite whose PP cells (pp > 1) are written")
    p.add_argument("--out", type=Path, help="directory for the configs and README.md (default: export-SUITE)")
    p.add_argument(
        "--cluster",
        help=f"inventory the cases are planned on: device counts and model paths (default: {DEFAULT_CLUSTER})",
    )
    add_force(p, "replace files in --out that an earlier export did not write (hand-written or edited)")

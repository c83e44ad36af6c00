"""`ppconf import`: another suite's test configs written as a matrix directory of their own,
to layer over the shipped matrices (``--matrices matrices --matrices DIR``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.common import CliError, add_force, matrix
from harness.importers.vllm_ascend import import_each
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.validate import engine

SOURCES = ("vllm-ascend-nightly",)
EXPLAIN_CLUSTER = "a3-pd"  # two 16-NPU Ascend nodes: the size of vllm-ascend's multi-node nightly


def cmd_import(args: argparse.Namespace) -> int:
    layers = [*(args.matrices or [DEFAULT_MATRICES]), args.out]
    for layer in layers[:-1]:  # a layer of its own: never written into one it is read against
        if layer.resolve() in (args.out.resolve(), *args.out.resolve().parents):
            raise CliError(
                f"--out {args.out} is inside the matrix layer {layer} the import is read against; "
                "give the import a directory of its own (it is layered over the others with --matrices)"
            )
    base = matrix(args)
    eng = engine()
    if isinstance(eng, str):
        print(f"note: {eng}; server_cmd is read by a plain split into flags", file=sys.stderr)
    # each file on its own: a bad one is reported and the others are still written
    imported, failed = import_each(args.files, base, None if isinstance(eng, str) else eng.parser)
    for source, errors in failed.items():
        print(f"not imported: {source}", file=sys.stderr)
        for err in errors:
            print(f"error: {err}", file=sys.stderr)
    if not imported.files:
        print(f"nothing imported: {len(failed)} of {len(args.files)} configs failed", file=sys.stderr)
        return 1
    written = imported.write(args.out, force=args.force)
    m = load_matrix(layers)  # what was written loads over the matrices it was imported against
    for path in written:
        print(f"wrote {path}")
    if args.explain:
        _explain(args, m, [Path(source) for source in imported.sources.values()], eng)
    flags = " ".join(f"--matrices {p}" for p in layers)
    suites = sorted(s for f in imported.files.values() for s in f["suites"])
    print(f"{len(suites)} suites ({', '.join(suites)}); check them with: ppconf lint --plans {flags}")
    if failed:
        done = "the others were written"
        print(f"{len(failed)} of {len(args.files)} configs failed (see above); {done}", file=sys.stderr)
        return 1
    return 0


def _explain(args: argparse.Namespace, m, sources: list[Path], eng) -> None:
    """Each imported config's nodes beside the launches ppconf plans for them."""
    from harness.cases.expand import expand
    from harness.importers.explain import explain
    from harness.importers.vllm_ascend import config_tests
    from harness.launch import PlanError
    from harness.plan.cluster import load_cluster
    from harness.plan.deployment import plan

    cluster = load_cluster(args.cluster or EXPLAIN_CLUSTER)
    parser = None if isinstance(eng, str) else eng.parser
    for source in sources:
        suite, tests = config_tests(source)
        cases = expand(m, suite).cases
        for test in tests:
            case = next(c for c in cases if c.family == test.family)
            try:
                d = plan(m, case, cluster)
            except PlanError as err:
                print(f"== {source}: {test.title}: no plan on {cluster.name}: {err}")
                continue
            print("\n".join(explain(source, test, f"{case.id} (suite {suite})", d, parser)))


def add_import(add) -> None:
    p = add("import", cmd_import, "turn another suite's test configs into a matrix directory to layer over this one")
    p.add_argument("source", choices=SOURCES, help="the configs' format: vllm-ascend's nightly test YAML")
    p.add_argument(
        "files", type=Path, nargs="+", metavar="FILE", help="config files (multi-node, external DP or test_cases)"
    )
    p.add_argument("--out", type=Path, required=True, help="matrix directory to write (one file per config)")
    add_force(p, "replace files in --out that an earlier import did not write (hand-written or edited)")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print, per node, the config's command beside the launch ppconf plans for it, with every flag "
        "and variable kept, dropped (and why), changed or added by ppconf (and where from)",
    )
    p.add_argument("--cluster", help=f"with --explain: the inventory to plan on (default: {EXPLAIN_CLUSTER})")

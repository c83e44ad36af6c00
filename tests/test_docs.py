"""The documentation agrees with the program: every command has a page in the site's navigation
whose options table is its --help's, the matrix reference names every key the schema accepts,
and the README stays a short front page that still holds the two set-up commands."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from harness.matrix import schema

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COMMANDS = DOCS / "commands"
NOT_COMMANDS = {"index", "exit-codes"}  # pages under docs/commands/ that document no one command


def script(name: str) -> ModuleType:
    """A module of scripts/ (not a package: they run as `python scripts/NAME.py`)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PAGES = script("new_command_page")
SUBCOMMANDS = PAGES.subcommands()


def nav_pages(nav: list) -> list[str]:
    out: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out.extend(nav_pages(value) if isinstance(value, list) else [value])
    return out


def documented(page: str) -> dict[str, set[str] | None]:
    """The options table of a command's page: each option or positional it names, with the
    choices it gives (`--format {text,json}`), None where it gives none."""
    section = page.split("\n## Options\n", 1)
    assert len(section) == 2, "no '## Options' section"
    named: dict[str, set[str] | None] = {}
    for row in re.findall(r"^\| (.+?) \| .* \|$", section[1], re.M):
        for cell in re.findall(r"`([^`]+)`", row):
            word, _, value = cell.partition(" ")
            choices = set(value[1:-1].split(",")) if value.startswith("{") else None
            if word.startswith("{"):  # a positional with choices
                named[word] = set(word[1:-1].split(","))
            else:
                named[word] = choices
    named.pop("option", None)
    return named


def expected(parser: argparse.ArgumentParser) -> dict[str, set[str] | None]:
    """What the options table must name, from the command's parser."""
    named: dict[str, set[str] | None] = {}
    for action in PAGES.documented_actions(parser):
        choices = {str(c) for c in action.choices} if action.choices is not None else None
        if action.option_strings:
            named.update(dict.fromkeys(action.option_strings, choices))
        else:
            name = PAGES.option_cell(action).strip("`")
            named[name] = choices
    return named


def disagreements(page: str, parser: argparse.ArgumentParser) -> list[str]:
    have, want = documented(page), expected(parser)
    out = [f"{name}: in --help, not on the page" for name in want.keys() - have.keys()]
    out += [f"{name}: on the page, not in --help" for name in have.keys() - want.keys()]
    out += [
        f"{name}: the page gives choices {sorted(have[name] or [])}, --help {sorted(want[name] or [])}"
        for name in have.keys() & want.keys()
        if have[name] != want[name]
    ]
    return sorted(out)


def test_every_command_has_a_page_in_the_navigation() -> None:
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    index = (COMMANDS / "index.md").read_text()
    for name in SUBCOMMANDS:
        hint = f"start it with: python scripts/new_command_page.py {name}"
        assert (COMMANDS / f"{name}.md").is_file(), f"ppconf {name} has no page docs/commands/{name}.md; {hint}"
        assert f"commands/{name}.md" in nav, f"mkdocs.yml: commands/{name}.md is not in nav:"
        assert f"]({name}.md)" in index, f"docs/commands/index.md does not link {name}.md"
    pages = {p.stem for p in COMMANDS.glob("*.md")} - NOT_COMMANDS
    assert pages <= set(SUBCOMMANDS), f"pages of commands ppconf does not have: {sorted(pages - set(SUBCOMMANDS))}"


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_a_command_page_agrees_with_its_help(name: str) -> None:
    page = (COMMANDS / f"{name}.md").read_text()
    assert disagreements(page, SUBCOMMANDS[name]) == [], f"docs/commands/{name}.md and `ppconf {name} --help`"
    # the one-line help `ppconf --help` prints is the page's own description
    words = " ".join(PAGES.command_help(name).split()).lower()
    assert words in " ".join(page.split()).lower(), f"docs/commands/{name}.md lacks its --help line: {words!r}"


def test_a_page_that_disagrees_with_help_is_named() -> None:
    """The check above fails on each way a page can drift: an option dropped, one invented, a
    choice missing."""
    page = (COMMANDS / "diff.md").read_text()
    assert disagreements(page, SUBCOMMANDS["diff"]) == []
    dropped = re.sub(r"^\| `--format.*\n", "", page, flags=re.M)
    assert disagreements(dropped, SUBCOMMANDS["diff"]) == ["--format: in --help, not on the page"]
    narrowed = page.replace("`--format {text,json}`", "`--format {text}`")
    assert disagreements(narrowed, SUBCOMMANDS["diff"]) == [
        "--format: the page gives choices ['text'], --help ['json', 'text']"
    ]
    extra = page.replace("| `--format {text,json}` |", "| `--since DATE` | a date |\n| `--format {text,json}` |")
    assert disagreements(extra, SUBCOMMANDS["diff"]) == ["--since: on the page, not in --help"]


def test_the_options_every_command_takes_are_on_the_commands_page() -> None:
    index = (COMMANDS / "index.md").read_text()
    assert "## Options every command takes" in index
    main = PAGES.build_parser()._actions
    globals_ = [o for a in main if a.dest.removeprefix("pre_") in PAGES.GLOBAL_DEFAULTS for o in a.option_strings]
    assert globals_, "the main parser has no global options"
    for option in globals_:
        assert f"`{option}`" in index, f"docs/commands/index.md does not name {option}"


def test_the_matrix_reference_names_every_key_of_the_schema() -> None:
    page = script("docs_hooks").matrix_reference()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    models = [c for c in vars(schema).values() if inspect.isclass(c) and issubclass(c, schema.Strict)]
    models.remove(schema.Strict)
    for model in models:
        assert model.__name__ in sections, f"the matrix reference has no section for {model.__name__}"
        for name, field in model.model_fields.items():
            key = field.alias or name
            assert f"| `{key}` |" in sections[model.__name__], f"{model.__name__}.{key} is not in the matrix reference"
    for section in [*schema.SECTIONS, "rules", "diagnosis"]:
        assert f"| `{section}` |" in page, f"the top-level section {section} is not in the matrix reference"


def test_the_readme_is_a_short_front_page_holding_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250, f"README.md has {len(readme.splitlines())} lines: move detail into docs/"
    block = re.search(r"^## Set-up\n\n```bash\n(?P<body>.*?)^```$", readme, re.M | re.S)
    assert block, "README.md: no ```bash block under '## Set-up'"
    commands = [line.split("#")[0].strip() for line in block["body"].splitlines() if line.split("#")[0].strip()]
    assert commands[:2] == ["bash scripts/smoke.sh", ".venv/bin/python -m pytest"], commands
    # both are what CI runs on a clean checkout, so they stay true
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/smoke\.sh\b", ci, re.M), ".ci/run no longer runs `bash scripts/smoke.sh`"
    assert re.search(r"\.venv/bin/python -m pytest$", ci, re.M), ".ci/run no longer runs the whole test suite"
    # every page the README links to exists
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), f"README.md links {link}, which does not exist"


def test_the_docs_are_installed_and_built_by_the_project() -> None:
    """A fresh machine gets the doc tools from the project's own files, and CI builds the site strictly."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^docs = \["mkdocs==[\d.]+", "mkdocs-material==[\d.]+"\]', pyproject, re.M)
    assert re.search(r'-e "\.\[[a-z,]*\bdocs\b[a-z,]*\]"', (ROOT / "scripts" / "install.sh").read_text())
    assert re.search(r"mkdocs build --strict", (ROOT / ".ci" / "run").read_text())

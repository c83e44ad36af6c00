"""Write the page of a new ppconf command, docs/commands/COMMAND.md, from its --help.

    python scripts/new_command_page.py COMMAND

It writes the command's description and its options table; add examples and prose under them,
and the page to `nav:` in mkdocs.yml (the line to add is printed). tests/test_docs.py then keeps
the page and the command's --help in agreement: an option added, removed or renamed on one side
only fails it. An existing page is never written over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import GLOBAL_DEFAULTS, build_parser

ROOT = Path(__file__).resolve().parents[1]
HELP_DESTS = {"help", *GLOBAL_DEFAULTS}  # -h, and the options every command takes (docs/commands/index.md)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Each ppconf command's own parser, by name."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def command_help(name: str) -> str:
    """The one-line help `ppconf --help` prints for the command."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (action,) = [a for a in sub._choices_actions if a.dest == name]
    return action.help or ""


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The command's own options and positionals, without -h and the global options."""
    return [a for a in parser._actions if a.dest not in HELP_DESTS]


def option_cell(action: argparse.Action) -> str:
    """How the options table names an option: `--of N`, `--format {text,json}`, `RUN_DIR`."""
    if action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if not action.option_strings:
        return f"`{value}`"
    takes_value = action.nargs != 0
    names = [f"`{o} {value}`" if takes_value else f"`{o}`" for o in action.option_strings]
    return ", ".join(names)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def page(name: str, parser: argparse.ArgumentParser) -> str:
    rows = [f"| {option_cell(a)} | {cell(a.help or '')} |" for a in documented_actions(parser)]
    return "\n".join(
        [
            f"# ppconf {name}",
            "",
            command_help(name)[:1].upper() + command_help(name)[1:] + ".",
            "",
            "## Options",
            "",
            "| option | what it does |",
            "|---|---|",
            *rows,
            "",
            "With the options every command takes: [`--matrices`, `-v`, `-q`](index.md#options-every-command-takes).",
            "",
        ]
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    (name,) = argv
    commands = subcommands()
    if name not in commands:
        print(f"error: ppconf has no command {name!r}; it has: {', '.join(commands)}", file=sys.stderr)
        return 2
    path = ROOT / "docs" / "commands" / f"{name}.md"
    if path.exists():
        print(f"error: {path} exists; edit it instead", file=sys.stderr)
        return 2
    path.write_text(page(name, commands[name]))
    print(f"wrote {path}; add to mkdocs.yml under Commands:\n      - {name}: commands/{name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

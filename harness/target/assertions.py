"""The assertions of the engine's own source: what an ``assert`` of vLLM (or vLLM Ascend) prints
when it fails. A rejection claimed with one of these texts would pass a crash as a designed
refusal, so lint warns on it (``harness.cases.lint``).

The sources are read as text where the packages are installed (found, never imported: importing
vLLM takes seconds and may need a device); where one is not installed it adds nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

ENGINES = ("vllm", "vllm_ascend")

# `assert <condition>, "<message>"` on one line (an f-string's message keeps its {fields}).
ASSERT = re.compile(r"""^\s*assert\s+(?P<cond>.+?),\s*f?(?P<q>["'])(?P<msg>.+?)(?P=q)\s*(?:#.*)?$""")


@dataclass(frozen=True)
class Assertion:
    text: str  # "AssertionError: <message>" as the traceback prints it
    where: str  # package-relative file:line


def package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@functools.cache
def engine_assertions(packages: tuple[str, ...] = ENGINES) -> tuple[Assertion, ...]:
    """Every one-line ``assert`` with a message in the installed engine packages."""
    out: list[Assertion] = []
    for name in packages:
        root = package_dir(name)
        if root is None:
            continue
        for path in sorted(root.rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "assert" not in text:
                continue
            for i, line in enumerate(text.splitlines(), 1):
                m = ASSERT.match(line) if "assert" in line else None
                if m:
                    rel = path.relative_to(root.parent)
                    out.append(Assertion(f"AssertionError: {m.group('msg')}", f"{rel}:{i}"))
    return tuple(out)

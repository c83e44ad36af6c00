"""The pluggable kinds, one registry each: the name a matrix, an inventory or a command line
spells, for the module that implements it (as wptrunner keys its products). Adding a member is
one module and one line here; the schema takes its names from these registries, so an unknown
name is refused at load, with the closest one suggested.

Only names live here, so every step may ask which names exist; a member's module is imported
when a step first uses it (``registry[name]``), and only then (Ray only by runs that use Ray).
Each module says what its member must provide: ``harness.cases.phases.kind`` (phase kinds),
``harness.check.scores.tool`` (score tools), ``harness.check.features`` (live checks),
``reports.formats`` (report formats), ``runners.protocol`` (runners).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic_core import PydanticCustomError


class Registry(Mapping[str, Any]):
    """``members``: name -> the module whose ``attr`` is that member (or ``module:attr``, where one
    module holds several members). As a mapping, a name gives its member (its module imported then)."""

    def __init__(self, what: str, attr: str, members: dict[str, str]):
        self.what = what
        self.attr = attr
        self.members = members

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.members)

    def __getitem__(self, name: str) -> Any:
        if name not in self.members:
            raise KeyError(f"no {self.what} is named {name!r} (known: {', '.join(self.members)})")
        module, _, attr = self.members[name].partition(":")
        return getattr(importlib.import_module(module), attr or self.attr)

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def check(self, value: Any) -> str:
        """``value`` if it names a member: a matrix field's validator, refusing anything else as
        pydantic refuses a value outside a Literal (so the loader suggests the closest name)."""
        if not isinstance(value, str) or value not in self.members:
            *first, last = (repr(n) for n in self.members)
            expected = f"{', '.join(first)} or {last}" if first else last
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value


PHASE_KINDS = Registry(
    "phase kind",
    "KIND",
    {
        "sequential": "harness.cases.phases.sequential",
        "batch": "harness.cases.phases.batch",
        "concurrent": "harness.cases.phases.concurrent",
        "long-prompt": "harness.cases.phases.long_prompt",
        "shared-prefix": "harness.cases.phases.shared_prefix",
        "pressure": "harness.cases.phases.pressure",
        "abort": "harness.cases.phases.abort",
        "explicit": "harness.cases.phases.explicit",
        "explicit-concurrent": "harness.cases.phases.explicit_concurrent",
        "open-loop": "harness.cases.phases.open_loop",
    },
)

# an explicit request's endpoint (harness.matrix.requests): how it is sent and compared
# (harness.check.requests.endpoint)
ENDPOINTS = Registry(
    "endpoint",
    "ENDPOINT",
    {
        "completions": "harness.check.requests.generate:COMPLETIONS",
        "chat": "harness.check.requests.generate:CHAT",
        "embeddings": "harness.check.requests.pooling:EMBEDDINGS",
        "classify": "harness.check.requests.pooling:CLASSIFY",
        "score": "harness.check.requests.pooling:SCORE",
        "rerank": "harness.check.requests.pooling:RERANK",
        "tokenize": "harness.check.requests.tokenize",
        "detokenize": "harness.check.requests.tokenize:DETOKENIZE",
        "reset-prefix-cache": "harness.check.requests.control:RESET_PREFIX_CACHE",
        "load-lora-adapter": "harness.check.requests.control:LOAD_LORA_ADAPTER",
        "unload-lora-adapter": "harness.check.requests.control:UNLOAD_LORA_ADAPTER",
        "sleep": "harness.check.requests.control:SLEEP",
        "wake-up": "harness.check.requests.control:WAKE_UP",
        "models": "harness.check.requests.control:MODELS",
    },
)

SCORE_TOOLS = Registry(
    "score tool",
    "TOOL",
    {
        "lm-eval": "harness.check.scores.lmeval",
        "aisbench": "harness.check.scores.aisbench",
    },
)

# run on the live deployment; a feature may also name ``embeddings`` (its requests become
# embeddings, compared by cosine), which is no live check (schema.FEATURE_CHECKS)
LIVE_CHECKS = Registry(
    "live check",
    "CHECK",
    {
        "prefix-cache-hit": "harness.check.features.prefix_cache",
        # every P/D case runs it (harness.plan.resolved), named by no feature
        "kv-transferred": "harness.check.features.kv_transfer",
    },
)

REPORT_FORMATS = Registry(
    "report format",
    "FORMAT",
    {
        "md": "reports.formats.md",
        "html": "reports.formats.html",
        "json": "reports.formats.summary",
        "junit": "reports.formats.junit_xml",
    },
)

# the report of a run over several stacks (``reports.stacks``)
STACK_REPORT_FORMATS = Registry(
    "stack report format",
    "FORMAT",
    {
        "md": "reports.formats.stacks_md",
        "html": "reports.formats.stacks_html",
        "json": "reports.formats.stacks_json",
    },
)

# keyed by the inventory's ``reach``
RUNNERS = Registry(
    "runner",
    "RUNNER",
    {
        "local": "runners.local",
        "ssh": "runners.ssh",
        "ray": "runners.ray",
    },
)

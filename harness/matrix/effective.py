"""What a feature needs of the configuration the engine built (``effective:`` in features.yaml).

A feature names dotted fields of the engine's configuration, as vLLM names them
(``scheduler_config.async_scheduling``), each with the value it must have for the feature to be
on. The vocabulary is small on purpose:

    field: VALUE            the field equals VALUE (true, 2, "ngram", null)
    field: {equals: VALUE}  the same, spelled out
    field: {in: [A, B]}     the field is one of the values
    field: {truthy: true}   the field is set (not false, 0, "", null, empty); false: not set
    field: {gt: N}          the field is a number greater than N

A boolean matches a boolean only (``true`` is not ``1``). Names are checked at load against the
sections a configuration has (``SECTIONS``), with the closest one suggested; the whole dotted
name is checked where the engine is importable (``lint --plans``) and, on a run, against the
fields the engine reported.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

# The sections of vLLM's VllmConfig that ppconf reads back from a running engine, and the two
# the stage probe adds from the worker itself: the model runner it runs and the platform.
CONFIG_SECTIONS = (
    "model_config",
    "cache_config",
    "parallel_config",
    "scheduler_config",
    "speculative_config",
    "compilation_config",
    "kv_transfer_config",
    "lora_config",
    "additional_config",
)
WORKER_SECTIONS = ("model_runner", "platform")
SECTIONS = CONFIG_SECTIONS + WORKER_SECTIONS
OPERATORS = ("equals", "in", "truthy", "gt")
FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
Scalar = bool | int | float | str | None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


@dataclass(frozen=True)
class Requirement:
    """One field of the engine's configuration and the value a feature needs it to have."""

    field: str
    op: str  # one of OPERATORS
    value: Any

    def holds(self, got: Any) -> bool:
        if self.op == "equals":
            return _same(got, self.value)
        if self.op == "in":
            return any(_same(got, v) for v in self.value)
        if self.op == "truthy":
            return bool(got) is self.value
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got > self.value

    def describe(self) -> str:
        """What the feature needs, as a reader of a verdict would say it."""
        if self.op == "equals":
            return f"{self.field} = {_show(self.value)}"
        if self.op == "in":
            return f"{self.field} in [{', '.join(_show(v) for v in self.value)}]"
        if self.op == "truthy":
            return f"{self.field} {'set' if self.value else 'not set'}"
        return f"{self.field} > {_show(self.value)}"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _scalar(value: Any, where: str) -> Scalar:
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(f'{where}: expected a single value (true, 2, "name", null), got {value!r}')
    return value


def requirement(name: str, spec: Any) -> Requirement:
    """One ``field: spec`` entry of a feature's ``effective:``; ValueError names what is wrong."""
    if not isinstance(name, str) or not FIELD.match(name):
        raise ValueError(f"effective field {name!r}: expected a dotted name such as scheduler_config.async_scheduling")
    section = name.split(".", 1)[0]
    if section not in SECTIONS:
        close = difflib.get_close_matches(section, SECTIONS, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ValueError(f"effective field {name!r}: unknown section '{section}'{hint}; known: {', '.join(SECTIONS)}")
    if not isinstance(spec, dict):
        return Requirement(name, "equals", _scalar(spec, name))
    if len(spec) != 1 or next(iter(spec)) not in OPERATORS:
        keys = ", ".join(map(str, spec)) or "none"
        close = difflib.get_close_matches(str(next(iter(spec), "")), OPERATORS, n=1, cutoff=0.5)
        hint = f" (did you mean '{close[0]}'?)" if close and len(spec) == 1 else ""
        raise ValueError(f"effective field {name!r}: expected one of {', '.join(OPERATORS)}, got {keys}{hint}")
    op, value = next(iter(spec.items()))
    if op == "in":
        if not isinstance(value, list) or not value:
            raise ValueError(f"effective field {name!r}: 'in' needs a non-empty list, got {value!r}")
        return Requirement(name, op, tuple(_scalar(v, name) for v in value))
    if op == "truthy" and not isinstance(value, bool):
        raise ValueError(f"effective field {name!r}: 'truthy' is true or false, got {value!r}")
    if op == "gt" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"effective field {name!r}: 'gt' needs a number, got {value!r}")
    return Requirement(name, op, _scalar(value, name))


def parse_requirements(spec: dict[str, Any]) -> list[Requirement]:
    return [requirement(name, value) for name, value in spec.items()]

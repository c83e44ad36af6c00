"""Cases and expectations: one point of an expanded matrix and what the matrix claims about it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, fields
from typing import Any

from harness.matrix.schema import Rule


@dataclass(frozen=True)
class Expectation:
    """The claim for one case: the outcome of the first matching rule, with its reasons."""

    kind: str  # supported | rejected | unsupported-on-platform | known-issue | flaky | unspecified
    why: str = ""
    rule: int | None = None  # index of the rule in matrix order
    where: str = ""  # file:line of the rule
    link: str | None = None
    experimental: bool = False
    error: str | None = None
    phase: str | None = None
    within_s: float | None = None
    reason: str | None = None
    owner: str | None = None
    until: datetime.date | None = None
    waives: tuple[str, ...] = ()  # known-issue / flaky: the checks the waiver covers
    undocumented: bool = False  # the published guide is silent about this claim

    @classmethod
    def of_rule(cls, rule: Rule, index: int, where: str, error: str | None) -> Expectation:
        """The claim a rule makes: every field the rule shares with an expectation is taken as it
        is (a field added to both needs no copying here), then what is the case's own."""
        shared = {f.name: getattr(rule, f.name) for f in fields(cls) if f.name in Rule.model_fields}
        return cls(
            **shared
            | {
                "kind": rule.expect,
                "rule": index,
                "where": where,
                "error": error,
                "waives": tuple(rule.waives),
                "undocumented": not rule.documented,
            }
        )

    def to_json(self) -> dict[str, Any]:
        # only the unset defaults go: ``rule: 0`` (the first rule) and ``within_s: 0`` are values
        out = {k: v for k, v in self.__dict__.items() if not (v is None or v is False or v == "" or v == ())}
        if self.until is not None:
            out["until"] = self.until.isoformat()
        if self.waives:
            out["waives"] = list(self.waives)
        return out


UNSPECIFIED = Expectation(kind="unspecified", why="no rule of the matrix covers this case")


@dataclass(frozen=True)
class Case:
    id: str
    suite: str
    platform: str
    family: str
    variant: str
    topology: str
    partition: str
    features: tuple[str, ...]
    attrs: dict[str, Any] = field(hash=False, compare=False)
    expectation: Expectation = UNSPECIFIED
    group: int | None = None  # the suite group it was expanded from (its args and env apply)

    @property
    def model_key(self) -> str:
        """Cases of one model share its PP=1 accuracy baseline."""
        return f"{self.family}/{self.variant}"


def stack_id(features: tuple[str, ...] | list[str]) -> str:
    return "+".join(sorted(features)) if features else "none"


def case_id(family: str, variant: str, topology: str, partition: str, features: tuple[str, ...]) -> str:
    """Readable and stable: built only from the case's own coordinates, never from its position."""
    model = family if variant == "default" else f"{family}/{variant}"
    return f"{model}/{topology}/{partition}/{stack_id(features)}"

"""Cases: one point of an expanded matrix, and the claim (``Expectation``) the matrix makes about it."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.case_key import CaseKey
from harness.matrix.schema import Rule
from harness.outcomes import Kind
from harness.results.result import Expectation


def claim_of(rule: Rule, index: int, where: str, error: str | None) -> Expectation:
    """The claim a rule makes: every field the rule shares with an expectation is taken as it is
    (a field added to both needs no copying here), then what is the case's own."""
    shared = {name: getattr(rule, name) for name in Expectation.model_fields if name in Rule.model_fields}
    return Expectation(
        **shared
        | {
            "kind": Kind(rule.expect),
            "rule": index,
            "where": where,
            "error": error,
            "waives": list(rule.waives),
            "crash": rule.crash.model_dump() if rule.crash else None,
            "undocumented": not rule.documented,
            "reference": rule.reference.model_dump(mode="json") if rule.reference else None,
            "compare": rule.compare.model_dump(mode="json") if rule.compare else None,
            "workload": [p.model_dump(mode="json", exclude_defaults=True) for p in rule.workload]
            if rule.workload
            else None,
            "stage_bounds": rule.stage_bounds.model_dump(mode="json", exclude_none=True) if rule.stage_bounds else None,
        }
    )


UNSPECIFIED = Expectation(kind=Kind.UNSPECIFIED, why="no rule of the matrix covers this case")


class Case(CaseKey):
    """One point of an expanded matrix: its coordinates, the attributes rules are matched
    against, and the claim the first matching rule makes."""

    attrs: dict[str, Any] = Field(repr=False)
    expectation: Expectation = UNSPECIFIED
    group: int | None = None  # the suite group it was expanded from (its args and env apply)


def stack_id(features: tuple[str, ...] | list[str]) -> str:
    return "+".join(sorted(features)) if features else "none"


def case_id(family: str, variant: str, topology: str, partition: str, features: tuple[str, ...]) -> str:
    """Readable and stable: built only from the case's own coordinates, never from its position."""
    model = family if variant == "default" else f"{family}/{variant}"
    return f"{model}/{topology}/{partition}/{stack_id(features)}"

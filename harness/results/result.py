"""The result of one case, as the results store keeps it and every reader reads it.

``SCHEMA`` is written into every record. Records written before it existed (no ``schema``) still
load: their missing fields take the defaults below.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA = 2


@dataclass
class Result:
    case: str
    suite: str
    family: str
    variant: str
    topology: str
    partition: str
    features: list[str]
    platform: str
    expectation: dict[str, Any]
    outcome: str
    reason: str
    fails_run: bool
    observation: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, Any] | None = None
    plan_key: str | None = None
    versions: dict[str, dict[str, str]] = field(default_factory=dict)
    started: str = ""
    duration_s: float = 0.0
    diagnosis: dict[str, str] | None = None
    repro: dict[str, str] | None = None
    # a ppconf fault while checking this case (harness, not infrastructure nor product): its traceback
    harness_error: str | None = None
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        """A record as the store keeps it; one that does not fit is refused with the reason
        (``harness.results.schema`` holds the checks every reader relies on)."""
        from harness.results.schema import Record, problem

        why = problem(Record, d)
        if why:
            raise ValueError(why)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        values.setdefault("schema", 1)
        return cls(**values)

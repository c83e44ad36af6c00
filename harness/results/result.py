"""The result of one case, as the recorder makes it and the results store appends it.

``SCHEMA`` is written into every record; readers check records with ``harness.results.schema``,
where a record written before it existed (no ``schema``) still fits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
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

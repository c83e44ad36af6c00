"""A case's coordinates: where it sits in its suite's matrix. One type for every step that
speaks of a case: the expanded case (``harness.cases.case.Case``), its result
(``harness.results.result.Result``, whose flat results.jsonl fields these are), its row of the
results index and its entry in a report each are a ``CaseKey`` with what that step adds."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class CaseKey(BaseModel):
    model_config = ConfigDict(frozen=True, validate_by_name=True)

    id: str = Field(alias="case")  # ``harness.cases.case.case_id``; a record's "case"
    suite: str
    family: str
    variant: str
    topology: str
    partition: str
    features: tuple[str, ...]
    platform: str

    @field_validator("features", mode="before")
    @classmethod
    def _features(cls, v: Any) -> Any:
        return tuple(v) if isinstance(v, list) else v  # JSON's list: a case's stack is fixed

    @property
    def case(self) -> str:
        return self.id

    def coordinates(self) -> dict[str, Any]:
        """The coordinates alone, by field, for another step's type to be made with."""
        return {name: getattr(self, name) for name in CaseKey.model_fields}

    @property
    def model_key(self) -> str:
        """Cases of one model share its PP=1 accuracy baseline."""
        return f"{self.family}/{self.variant}"

"""The shape of what a run directory holds (results.jsonl records, run.json), checked on read.

Reports, diffs and sign-offs trust these fields; a record that does not fit is an error naming
the file, the line and the offending value, never a traceback deep in a renderer. Models only
validate: readers keep the raw dicts, and unknown keys are allowed so older and newer writers
stay readable.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.outcomes import Outcome


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def _finite(v: float | None) -> float | None:
    if v is not None and (not math.isfinite(v) or v < 0):
        raise ValueError("must be a finite number >= 0")
    return v


def _iso_datetime(v: str | None) -> str | None:
    if v is not None:
        datetime.datetime.fromisoformat(v)  # ValueError names the bad text
    return v


class LogLine(_Model):
    log: str
    line: int
    text: str


class Launch(_Model):
    name: str
    role: str
    node: str
    host: str
    argv: list[str]
    env: dict[str, str]
    port: int | None = None
    set_env: str | None = None


class Deployment(_Model):
    launches: list[Launch] = []


class Stage(_Model):
    stage: int
    layers: int
    step_ms: float | None = None
    peak_mib: float | None = None


class Advice(_Model):
    why: str


class Tuning(_Model):
    partition: str
    stages: list[Stage]
    by_step_time: Advice
    by_memory: Advice


class AccuracyDiff(_Model):
    request: str | None = None  # which request of the comparison ("text:0", "ids:1", "embed:0")
    why: str | None = None
    prompt: str | None = None
    first_token_mismatch: int | None = None
    baseline_ids: list[int] = []
    observed_ids: list[int] = []
    max_logprob_diff: float | None = None


class Accuracy(_Model):
    summary: str
    mode: str | None = None
    equal: bool | None = None
    diffs: list[AccuracyDiff] = []


class Score(_Model):
    ok: bool
    detail: str


class FeatureCheck(_Model):
    ok: bool
    detail: str


class Observation(_Model):
    ready_s: float | None = None
    root_cause: LogLine | None = None
    expected_error_line: LogLine | None = None
    partition: list[list[int]] | None = None
    partition_expected: list[list[int]] | None = None
    partition_source: str | None = None
    accuracy: Accuracy | None = None
    reference: dict[str, Any] | None = None
    reference_error: str | None = None
    score: Score | None = None
    tuning: Tuning | None = None
    feature_checks: dict[str, FeatureCheck] = {}
    notes: list[str] = []
    logs: dict[str, str] = {}

    _ready = field_validator("ready_s")(_finite)


class Expectation(_Model):
    kind: str
    until: str | None = None

    @field_validator("until")
    @classmethod
    def _date(cls, v: str | None) -> str | None:
        if v is not None:
            datetime.date.fromisoformat(v)
        return v


class Diagnosis(_Model):
    symptom: str
    advice: str


class Repro(_Model):
    rerun: str | None = None


class Record(_Model):
    case: str
    suite: str
    family: str
    variant: str
    topology: str
    partition: str
    platform: str
    features: list[str]
    expectation: Expectation
    outcome: Outcome
    reason: str
    observation: Observation = Observation()
    deployment: Deployment | None = None
    versions: dict[str, dict[str, str | None]] = {}
    started: str | None = None
    duration_s: float | None = None
    diagnosis: Diagnosis | None = None
    repro: Repro | None = None
    harness_error: str | None = None
    schema_version: int | None = Field(None, alias="schema")

    _duration = field_validator("duration_s")(_finite)
    _started = field_validator("started")(_iso_datetime)

    @field_validator("outcome", mode="before")
    @classmethod
    def _outcome(cls, v: Any) -> Any:
        # strict mode would refuse the plain string JSON carries; an unknown one is still an error
        if isinstance(v, str) and v in Outcome.__members__:
            return Outcome(v)
        raise ValueError(f"unknown outcome {v!r}; one of {', '.join(Outcome.__members__)}")


class RunMeta(_Model):
    suite: str | None = None
    cluster: str | None = None
    # one directory, or several where --matrices was given more than once
    matrices: str | list[str] | None = None
    started: str | None = None
    pid: int | None = None
    versions: dict[str, dict[str, str | None]] = {}
    cases: list[str] | None = None
    select: str | None = None
    cluster_ref: str | None = None
    network: str | None = None
    reference_cache: str | None = None

    _started = field_validator("started")(_iso_datetime)


def problem(model: type[BaseModel], data: Any) -> str | None:
    """The first reason ``data`` does not fit ``model``, in one line, or None."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    try:
        model.model_validate(data)
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or "(record)"
        got = repr(e.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        return f"{where}: {e['msg']} (got {got})"
    return None

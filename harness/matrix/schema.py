"""The matrix's data model: what each YAML section may contain, validated with pydantic.

Every model forbids unknown keys, so a typo in a key is an error at load time (with the closest
valid key suggested by the loader), never a silently ignored setting.
"""

from __future__ import annotations

import datetime
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# JSON-valued vLLM flags that any layer may contribute fragments to (as `configs`, or as the flag
# in its args); fragments are merged key by key into one value per flag (harness.plan.merge).
JSON_FLAGS = (
    "hf-overrides",
    "additional-config",
    "compilation-config",
    "kv-transfer-config",
    "speculative-config",
    "kv-events-config",
)

NAME = r"^[a-z0-9][a-z0-9._-]*$"


def _compiled(patterns: list[str]) -> list[str]:
    """The patterns, once each is known to compile (re.error becomes a validation error)."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as err:
            raise ValueError(f"{pattern!r} is not a valid regular expression: {err}") from err
    return patterns


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Backend = Literal["mp", "ray"]


class ConfigKey(Strict):
    """A key a platform's engine accepts in a JSON flag, and where that was read."""

    source: str  # URL or file of the platform's source or guide that defines the key
    title: str = ""


class Platform(Strict):
    title: str
    # The variable that selects this platform's devices for a process, and how a device set is
    # written into it: a comma list of NPU/GPU ids, or CPU cores with one "|"-separated range per rank.
    device_env: str
    device_format: Literal["comma-list", "cpu-bind"]
    env: dict[str, str] = {}
    # Set on every node before Ray starts when the executor backend is Ray.
    ray_env: dict[str, str] = {}
    # Per-node communication variables filled from the cluster inventory (value = inventory field).
    node_env: dict[str, Literal["address", "nic"]] = {}
    serve_args: list[str] = []
    # Env for the vLLM processes of one executor backend only (never `ray start`).
    backend_env: dict[Backend, dict[str, str]] = {}
    # The keys of --additional-config this platform's engine reads (top level), each with its
    # source; a plan's additional-config is checked against them.
    additional_config: dict[str, ConfigKey] = {}
    # Keys of vLLM's own JSON flags that this platform's vLLM accepts beyond the driver's
    # installed one, dotted ("compilation-config.pass_config.enable_sp").
    config_keys: dict[str, ConfigKey] = {}


class Variant(Strict):
    architecture: str
    # None: not known in advance; read from the model's config.json when the case is planned.
    hidden_layers: int | None = Field(None, ge=1)
    supports_pp: bool
    # "zoo:NAME" for a tiny model ppconf builds offline, else a path or id the nodes can load.
    model: str
    origin: Literal["upstream", "ascend", "upstream+ascend-adapter"] = "upstream"
    drafters: dict[str, str] = {}
    serve_args: list[str] = []
    env: dict[str, str] = {}
    configs: dict[Literal[JSON_FLAGS], dict] = {}  # type: ignore[valid-type]
    platforms: list[str] = []
    title: str = ""


class Family(Strict):
    title: str
    variants: dict[str, Variant]
    aliases: list[str] = []  # names the published docs use for it

    @field_validator("variants")
    @classmethod
    def _names(cls, v: dict[str, Variant]) -> dict[str, Variant]:
        for name in v:
            if not re.match(NAME, name):
                raise ValueError(f"variant name {name!r} must match {NAME}")
        if not v:
            raise ValueError("a family needs at least one variant")
        return v


class Feature(Strict):
    title: str
    args: list[str] = []
    env: dict[str, str] = {}
    configs: dict[Literal[JSON_FLAGS], dict] = {}  # type: ignore[valid-type]
    requires: list[str] = []
    conflicts: list[str] = []
    # Features in the same exclusive group cannot be stacked (e.g. two speculative methods).
    exclusive: str | None = None
    # WARNING lines with which a server says it turned this feature off: a silent disable.
    silent_disable: list[str] = []
    # Feature-specific checks run on a live deployment (harness.run.Runner.check_live).
    checks: list[Literal["prefix-cache-hit", "embeddings"]] = []
    link: str | None = None
    aliases: list[str] = []  # names the published docs use for it

    _regexes = field_validator("silent_disable")(classmethod(lambda cls, v: _compiled(v)))


class Instance(Strict):
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)


class Topology(Strict):
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    # None: let vLLM choose (and print no flag), as the single-node examples of the guide do.
    backend: Backend | None = None
    # DP across nodes, the two ways vLLM offers (each DP rank holds its own TP x PP):
    # internal — one `vllm serve` per node (--data-parallel-size-local ranks on it, --headless off
    # the head, --data-parallel-address/--data-parallel-rpc-port/--data-parallel-start-rank);
    # external — one engine per DP rank (--data-parallel-rank), each on its own device slice and
    # API port. None: vLLM's multi-node launch of the whole world (--nnodes, --node-rank).
    dp_mode: Literal["internal", "external"] | None = None
    # Present for P/D disaggregation: this topology's tp/pp/dp describe the prefill instance.
    decode: Instance | None = None
    connector: str | None = None
    title: str = ""
    aliases: list[str] = []  # names the published docs use for it (e.g. "P/D disaggregation")

    @property
    def world(self) -> int:
        """Devices of the (prefill) instance without context parallelism; harness.plan.merge
        multiplies in the PCP size the case's flags give (vLLM: TP x PP x PCP per DP rank)."""
        return self.tp * self.pp * self.dp

    @property
    def devices(self) -> int:
        return self.world + (self.decode.tp * self.decode.pp * self.decode.dp if self.decode else 0)

    @model_validator(mode="after")
    def _dp_layout(self) -> Topology:
        if self.dp_mode is not None:
            if self.dp < 2 or self.dp % self.nnodes:
                raise ValueError(f"dp_mode {self.dp_mode} needs dp > 1 and a multiple of nnodes "
                                 f"(dp={self.dp}, nnodes={self.nnodes}): each node holds whole DP ranks")
            if self.decode is not None or self.backend == "ray":
                raise ValueError("dp_mode applies to an mp (or default) topology without P/D")
        return self


class Accuracy(Strict):
    prompts: list[str] = ["Hello, my name is", "The quick brown fox", "pipeline parallel"]
    max_tokens: int = Field(12, ge=1)
    # Prompts also requested with stream=true, to check streamed output equals the baseline too.
    streamed: int = Field(1, ge=0)
    logprob_tolerance: float = Field(0.0, ge=0.0)
    # Pooling cases: largest |difference| allowed per embedding component against PP=1.
    embedding_tolerance: float = Field(1e-4, ge=0.0)


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
    env: dict[str, str] = {}
    backend_env: dict[Backend, dict[str, str]] = {}


class Suite(Strict):
    title: str
    platform: str
    mode: Literal["full", "pairwise"] = "full"
    seed: int = 0
    # Upper bound on the devices one case may use; larger cases are impossible in this suite.
    max_devices: int | None = Field(None, ge=1)
    partition_rules: Literal["upstream", "ascend-doc"] = "upstream"
    startup_timeout_s: float = Field(300.0, gt=0)
    request_timeout_s: float = Field(60.0, gt=0)
    accuracy: Accuracy = Accuracy()
    # Measure each stage's forward time and peak memory on every served PP case and record the
    # guide's tuning advice: the next VLLM_PP_LAYER_PARTITION to try (harness.cases.partition).
    partition_tuning: bool = False
    # Serve flags, env and per-backend env for every launch of the suite (under its groups').
    args: list[str] = []
    env: dict[str, str] = {}
    backend_env: dict[Backend, dict[str, str]] = {}
    groups: list[Group] = Field(min_length=1)


Expect = Literal["supported", "rejected", "unsupported-on-platform", "known-issue", "flaky"]


class Rule(Strict):
    when: str
    expect: Expect
    why: str
    link: str | None = None
    experimental: bool = False
    error: str | None = None
    phase: Literal["config", "startup", "first-request"] | None = None
    within_s: float | None = Field(None, gt=0)
    reason: str | None = None
    owner: str | None = None
    until: datetime.date | None = None
    # Serve flags and env for the cases this rule decides: the most specific layer of a plan.
    args: list[str] = []
    env: dict[str, str] = {}

    @model_validator(mode="after")
    def _fields_for_outcome(self) -> Rule:
        needs = {
            "rejected": ("error", "phase"),
            "unsupported-on-platform": ("reason",),
            "known-issue": ("link", "owner", "until"),
            "flaky": ("link",),
        }.get(self.expect, ())
        missing = [f for f in needs if getattr(self, f) is None]
        if missing:
            raise ValueError(f"expect: {self.expect} needs {', '.join(missing)}")
        only_rejected = ("error", "phase", "within_s")
        if self.expect != "rejected":
            stray = [f for f in only_rejected if getattr(self, f) is not None]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to expect: rejected")
        if self.error is not None:
            try:
                re.compile(self.error)
            except re.error as err:
                raise ValueError(f"error is not a valid regular expression: {err}") from err
        return self


class Diagnosis(Strict):
    """One known symptom: log patterns that identify it, and what to do about it."""

    symptom: str
    patterns: list[str] = Field(min_length=1)
    advice: str
    link: str | None = None

    _regexes = field_validator("patterns")(classmethod(lambda cls, v: _compiled(v)))


SECTIONS: dict[str, type[Strict]] = {
    "platforms": Platform,
    "families": Family,
    "features": Feature,
    "topologies": Topology,
    "suites": Suite,
}

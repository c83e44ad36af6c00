"""The types of vllm-ascend's nightly test configs, checked before anything is read from them: a
value of the wrong type (``num_nodes: two``, ``deployment: {...}``, ``max_out_len: [1]``) is
an error at its line, never a crash further in. Which keys exist is the importer's question
(``_check_keys`` names an unknown one with the closest known), so any other key passes here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.matrix.schema import MAX_RANKS, MAX_RATE, MAX_REQUESTS, MAX_TOKENS

Scalar = str | int | float | bool | None


class _Config(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


# Keys a config needs are left optional here: the importer names the missing ones itself.


class Benchmark(_Config):
    case_type: str | None = None
    dataset_path: str | None = None
    dataset_conf: str | None = None
    request_conf: str | None = None
    max_out_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    batch_size: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    num_prompts: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    request_rate: float | None = Field(None, ge=0, le=MAX_RATE)
    baseline: float | None = Field(None, ge=0)
    threshold: float | None = Field(None, ge=0)

    @field_validator("max_out_len", "batch_size", "num_prompts", "request_rate", "baseline", "threshold", mode="before")
    @classmethod
    def _given_as_a_number(cls, value: Any) -> Any:
        # a key left out is the importer's to name; one written without a value is an error here
        if value is None:
            raise ValueError("a number is expected, not null")
        return value


class DisaggregatedPrefill(_Config):
    enabled: bool = False
    prefiller_host_index: list[int] = Field(default_factory=list, max_length=MAX_RANKS)
    decoder_host_index: list[int] = Field(default_factory=list, max_length=MAX_RANKS)


class DeploymentEntry(_Config):
    server_cmd: str | None = None
    envs: dict[str, Scalar] | None = None


class MultiNodeConfig(_Config):
    test_name: Scalar = None
    model: str | None = None
    num_nodes: int | None = Field(None, ge=1, le=MAX_RANKS)
    npu_per_node: int | None = Field(None, ge=1, le=MAX_RANKS)
    env_common: dict[str, Scalar] | None = None
    deployment: list[DeploymentEntry] | None = Field(None, min_length=1, max_length=MAX_RANKS)
    benchmarks: dict[str, Benchmark | None] | None = None
    disaggregated_prefill: DisaggregatedPrefill | None = None


class TestCase(_Config):
    name: Scalar = None
    model: str | None = None
    envs: dict[str, Scalar] | None = None
    server_cmd: list[str | int | float] | None = None
    server_cmd_extra: list[str | int | float] | None = None
    benchmarks: dict[str, Benchmark | None] | None = None
    service_mode: str | None = None
    prompts: list[str] | None = None
    api_keyword_args: dict[str, Any] | None = None
    test_content: list[str] | None = None


class SingleNodeConfig(_Config):
    test_cases: list[TestCase]


def config_model(data: dict[str, Any]) -> type[BaseModel]:
    """The config's shape: single-node tests (``test_cases``) or one multi-node test."""
    return SingleNodeConfig if "test_cases" in data else MultiNodeConfig

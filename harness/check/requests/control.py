"""Control endpoints: resetting the prefix cache, loading and unloading a LoRA adapter, sleeping
and waking; their rule is the base one: both sides accepted the request. And the models list,
whose served ids and roots must be the reference's."""

from __future__ import annotations

from typing import Any

from harness.check.requests.endpoint import Endpoint, RuleVerdict, answer_json
from harness.check.serving.client import Client
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare


class _Control(Endpoint):
    def __init__(self, path: str, sends_body: bool = False):
        self.path = path
        self.sends_body = sends_body

    def body(self, req: ExplicitRequest, model: str) -> dict[str, Any] | None:
        return req.body() if self.sends_body else None


class _Sleep(_Control):
    def params(self, req: ExplicitRequest) -> dict[str, Any] | None:
        return req.body()  # level, as vLLM's /sleep reads it from the query


RESET_PREFIX_CACHE = _Control("/reset_prefix_cache")
LOAD_LORA_ADAPTER = _Control("/v1/load_lora_adapter", sends_body=True)
UNLOAD_LORA_ADAPTER = _Control("/v1/unload_lora_adapter", sends_body=True)
SLEEP = _Sleep("/sleep")
WAKE_UP = _Control("/wake_up")


class _Models(Endpoint):
    path = "/v1/models"

    def send(self, client: Client, model: str, req: ExplicitRequest) -> dict[str, Any]:
        return answer_json(req.name or "", req.endpoint, client.models_answer())

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        def served(a: dict[str, Any]) -> list[tuple[Any, Any]]:
            return [(m.get("id"), m.get("root")) for m in (a["body"].get("data") or [])]

        if served(ref) != served(got):
            return RuleVerdict([f"models {served(got)}, the reference {served(ref)}"])
        return RuleVerdict()


MODELS = _Models()

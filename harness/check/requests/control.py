"""Control endpoints: resetting the prefix cache, loading and unloading a LoRA adapter, sleeping
and waking. Their rule is the base one: both sides accepted the request."""

from __future__ import annotations

from typing import Any

from harness.check.requests.endpoint import Endpoint
from harness.matrix.requests import ExplicitRequest


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

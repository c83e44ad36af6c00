"""``shared-prefix``: one request fills the prefix cache, then a burst sharing its prefix must hit it."""

from __future__ import annotations

import random

from harness.cases.phases.kind import PhaseKind, PhasePlan, Request, ids
from harness.matrix.schema import Phase

SHARED_SUFFIX = 12  # tokens after the shared prefix, distinct per request


class SharedPrefixPhase(PhaseKind):
    defaults = (None, 192, 8)

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        prefix = ids(rng, s.prompt_tokens)
        warm = Request(f"{phase.label}:warm", prefix + ids(rng, SHARED_SUFFIX), s.max_tokens)
        reqs = tuple(
            Request(f"{phase.label}:{i}", prefix + ids(rng, SHARED_SUFFIX), s.max_tokens) for i in range(s.requests)
        )
        return PhasePlan(phase, reqs, warmup=(warm,), in_flight=s.requests)

    def longest(self, phase: Phase, pp: int) -> int:
        s = self.sizes(phase, pp)
        return s.prompt_tokens + SHARED_SUFFIX + s.max_tokens

    def token_ids(self, phase: Phase, pp: int) -> int:
        s = self.sizes(phase, pp)
        return (s.requests + 1) * (s.prompt_tokens + SHARED_SUFFIX)  # each request its own copy of the prefix

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        if "prefix_cache_hits" not in metrics:
            return "the server exports no prefix_cache_hits: cache hits cannot be shown"
        if metrics["prefix_cache_hits"] <= 0:
            return "no prefix-cache hit while the burst was in flight (is prefix caching on?)"
        return None


KIND = SharedPrefixPhase()

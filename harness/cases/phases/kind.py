"""What a phase kind provides: its default sizes, the exact requests of a phase of it (pure), how
they are sent (through a ``Sender`` the check step gives it), which answers are compared with
the reference's, and what the engine's metrics must show for the phase to have done what it
names. A new kind is one module whose ``KIND`` is a ``PhaseKind``, and one line in
``harness.registry.PHASE_KINDS``.

A phase's requests are token-id prompts generated from its seed and name, so the case and its
reference are sent the very same ids (nothing is tokenised for them) and a run can be reproduced
request by request. The ids are drawn from [ID_LOW, ID_HIGH): valid for every vocabulary of 512
tokens or more, clear of the few ids tokenizers keep for special tokens at the bottom.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Phase
from harness.registry import PHASE_KINDS

ID_LOW, ID_HIGH = 3, 500
# Token ids one phase's prompts may hold in all: every one is generated in memory when the phase is
# planned (some 40 bytes each), so a phase is measured by its sizes before anything is built.
MAX_PHASE_TOKENS = 4 * 1024 * 1024
ABORT_AFTER_CHUNKS = 2  # an aborted stream is closed after this many chunks


@dataclass(frozen=True)
class Request:
    label: str  # "concurrent:3": the phase and the request's index
    prompt: tuple[int, ...]
    max_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "prompt": list(self.prompt), "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class PhasePlan:
    """The concrete traffic of one phase. ``requests`` are sent at once (batch: in one request;
    abort: as streams closed after ``ABORT_AFTER_CHUNKS`` chunks); ``warmup`` goes alone before
    them (shared-prefix: the request that fills the cache), ``after`` once they are done (abort:
    the fresh request that must still be answered)."""

    phase: Phase
    requests: tuple[Request, ...]
    warmup: tuple[Request, ...] = ()
    after: tuple[Request, ...] = ()
    in_flight: int = 1  # requests the phase means to have running at once
    extra: dict[str, Any] = field(default_factory=dict)
    # the phase's explicit requests (harness.matrix.requests), each named (its label)
    explicit: tuple[ExplicitRequest, ...] = ()

    @property
    def name(self) -> str:
        return self.phase.label

    @property
    def kind(self) -> str:
        return self.phase.kind

    def compared(self) -> tuple[Request, ...]:
        """The requests whose answers are compared with the reference's."""
        return PHASE_KINDS[self.kind].compared(self)

    def longest(self) -> int:
        """Prompt plus output tokens of its longest request: what the model's length must hold."""
        generated = (len(r.prompt) + r.max_tokens for r in (*self.warmup, *self.requests, *self.after))
        # an explicit request's text prompt has no length before it is tokenised: its ids, if any
        named = (len(_ids(getattr(r, "prompt", None))) + r.tokens() for r in self.explicit)
        return max((*generated, *named), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase.model_dump(exclude_defaults=True),
            "requests": [r.to_json() for r in self.requests],
            "warmup": [r.to_json() for r in self.warmup],
            "after": [r.to_json() for r in self.after],
            "in_flight": self.in_flight,
        } | (
            {"explicit": [r.model_dump(exclude_none=True, by_alias=True) for r in self.explicit]}
            if self.explicit
            else {}
        )


class Sender(Protocol):
    """How the check step sends requests to a live deployment (``harness.check.traffic.phases``),
    each call sending all of ``requests`` at once and keeping what was answered."""

    def complete(self, requests: tuple[Request, ...]) -> None: ...

    def stream(self, requests: tuple[Request, ...]) -> None:
        """Streamed and timed: throughput, time to first token and inter-token latency measured."""

    def abort(self, requests: tuple[Request, ...]) -> None:
        """Streams closed after ``ABORT_AFTER_CHUNKS`` chunks; their answers are not kept."""

    def batch(self, requests: tuple[Request, ...]) -> None:
        """All prompts in one request, greedy and then seeded; its usage and /v1/models kept."""

    def explicit(self, requests: tuple[ExplicitRequest, ...]) -> None:
        """Each request to its endpoint, in order, one after another; every answer kept."""

    def explicit_at_once(self, requests: tuple[ExplicitRequest, ...]) -> None:
        """Each request to its endpoint, all at once; every answer kept, in order."""

    def open_loop(self, plan: PhasePlan) -> None:
        """The plan's requests (or explicit ones), each sent at its arrival time
        (``plan.extra["arrivals"]``) whatever is still in flight; the engine's gauges and each
        stage's memory sampled meanwhile, and afterwards how long it took to be idle again."""


class Answers(Protocol):
    """What one side answered in one phase (``harness.check.traffic.phases.PhaseOutputs``)."""

    completions: list[Any]
    answers: list[Any]
    metrics: dict[str, float]
    series: dict[str, Any]
    usage: dict[str, int]
    models: list[dict[str, Any]]


def _ids(prompt: object) -> list[int]:
    return prompt if isinstance(prompt, list) else []


_WIDTH = ID_HIGH - ID_LOW
_BITS = _WIDTH.bit_length()


def ids(rng: random.Random, n: int) -> tuple[int, ...]:
    """``n`` ids, the very ones (and the very draws of ``rng``) that ``rng.randrange(ID_LOW,
    ID_HIGH)`` gives ``n`` times: CPython's randrange takes ``getrandbits`` of the width's bit length
    and draws again while it is out of range. Drawn here without randrange's per-call checks, which
    were most of the time of planning a suite's phases (tests/test_workload.py holds them equal)."""
    draw = rng.getrandbits
    out = []
    for _ in range(n):
        r = draw(_BITS)
        while r >= _WIDTH:
            r = draw(_BITS)
        out.append(ID_LOW + r)
    return tuple(out)


@dataclass(frozen=True)
class Sizes:
    """A phase's sizes, its own or its kind's defaults: requests, tokens of each prompt, tokens
    of each output."""

    requests: int
    prompt_tokens: int
    max_tokens: int


class PhaseKind:
    """One kind of phase. ``defaults``: (requests, prompt_tokens, max_tokens) where the phase
    leaves them unset; None requests: at least 2 x PP (and 4). ``streamed``: it measures
    throughput and time to first token, so a phase of it may bound them."""

    defaults: tuple[int | None, int, int] = (None, 0, 0)
    streamed: bool = False
    planned = True  # it sends requests of its own (sequential sends the suite's accuracy requests)
    # whether it takes the phase's `explicit` requests (in place of generated ones)
    explicit = False
    pooling = False  # a pooling runner can answer it (generated completions it cannot)
    arrivals = False  # its requests arrive on a clock (rate_per_s, duration_s) and the engine must idle after

    def sizes(self, phase: Phase, pp: int) -> Sizes:
        n, length, out = self.defaults
        return Sizes(phase.requests or n or max(4, 2 * pp), phase.prompt_tokens or length, phase.max_tokens or out)

    def longest(self, phase: Phase, pp: int) -> int:
        """Prompt plus output tokens of the longest request ``plan`` would build, from the
        phase's sizes alone (nothing is built): what the model's length must hold."""
        s = self.sizes(phase, pp)
        return s.prompt_tokens + s.max_tokens

    def token_ids(self, phase: Phase, pp: int) -> int:
        """At least as many token ids as ``plan`` would build for the phase's prompts, from its
        sizes alone (one request more than ``requests``: a warm-up or a fresh request)."""
        s = self.sizes(phase, pp)
        return (s.requests + 1) * s.prompt_tokens

    def plan(self, phase: Phase, pp: int) -> PhasePlan:
        """The phase's requests; by default ``requests`` prompts of ``prompt_tokens``, all at once."""
        s = self.sizes(phase, pp)
        rng = random.Random(f"{phase.seed}:{phase.label}")
        reqs = tuple(Request(f"{phase.label}:{i}", ids(rng, s.prompt_tokens), s.max_tokens) for i in range(s.requests))
        return PhasePlan(phase, reqs, in_flight=s.requests)

    def compared(self, plan: PhasePlan) -> tuple[Request, ...]:
        return plan.warmup + plan.requests + plan.after

    def labels(self, plan: PhasePlan) -> list[str]:
        """The labels of the answers compared with the reference's."""
        return [r.label for r in plan.compared()]

    def send(self, plan: PhasePlan, sender: Sender) -> None:
        sender.complete(plan.warmup)
        sender.complete(plan.requests)

    def not_exercised(self, plan: PhasePlan, metrics: dict[str, float]) -> str | None:
        """Why the case's metrics show the phase did not do what it names (None when they show it did)."""
        return None

    def problems(self, plan: PhasePlan, got: Answers, ref: Answers) -> list[str]:
        """What the case answered wrong beyond the request-by-request comparison."""
        return []

    def lint(self, phase: Phase, batched_tokens: int | None) -> list[str]:
        """Why the phase cannot be sent as written on a case whose --max-num-batched-tokens is
        ``batched_tokens`` (lint's question, before any launch)."""
        return []

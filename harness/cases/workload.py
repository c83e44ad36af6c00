"""A case's workload: which phases of traffic it is judged on, and the exact requests of each.

Pure: nothing here talks to a server. A phase's requests are token-id prompts generated from its
seed and name, so the case and its reference are sent the very same ids (nothing is tokenised
for them) and a run can be reproduced request by request. The ids are drawn from
[ID_LOW, ID_HIGH): valid for every vocabulary of 512 tokens or more, clear of the few ids
tokenizers keep for special tokens at the bottom.

Sizes a phase leaves unset take its kind's default here; where a default depends on the case,
it is the PP size (``concurrent`` keeps at least 2 × PP requests in flight, so every stage has
a batch of its own while the others work).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.matrix.load import Matrix
from harness.matrix.schema import Phase, StageBounds, missing_aisbench_files

ID_LOW, ID_HIGH = 3, 500
SHARED_SUFFIX = 12  # tokens after the shared prefix, distinct per request
ABORT_AFTER_CHUNKS = 2  # an aborted stream is closed after this many chunks

# kind -> (requests, prompt_tokens, max_tokens); None requests: at least 2 x PP (and 4)
DEFAULTS: dict[str, tuple[int | None, int, int]] = {
    "batch": (3, 12, 12),
    "concurrent": (None, 96, 32),
    "long-prompt": (2, 200, 8),
    "shared-prefix": (None, 192, 8),
    "pressure": (8, 192, 48),
    "abort": (None, 32, 64),
}
SEQUENTIAL = Phase(kind="sequential")


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

    @property
    def name(self) -> str:
        return self.phase.label

    @property
    def kind(self) -> str:
        return self.phase.kind

    def compared(self) -> tuple[Request, ...]:
        """The requests whose answers are compared with the reference's (not the aborted streams)."""
        return self.warmup + self.after if self.kind == "abort" else self.warmup + self.requests + self.after

    def longest(self) -> int:
        """Prompt plus output tokens of its longest request: what the model's length must hold."""
        return max((len(r.prompt) + r.max_tokens for r in (*self.warmup, *self.requests, *self.after)), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase.model_dump(exclude_defaults=True),
            "requests": [r.to_json() for r in self.requests],
            "warmup": [r.to_json() for r in self.warmup],
            "after": [r.to_json() for r in self.after],
            "in_flight": self.in_flight,
        }


def workload_of(m: Matrix, case: Case) -> list[Phase]:
    """The case's phases: its rule's workload, else its suite group's, else its suite's, else
    the one sequential phase (the requests of the suite's `accuracy`)."""
    suite = m.suite(case.suite)
    rule = next((e.rule for e in m.rules if e.index == case.expectation.rule), None)
    group = suite.groups[case.group] if case.group is not None and case.group < len(suite.groups) else None
    for layer in (rule, group, suite):
        if layer is not None and layer.workload is not None:
            return list(layer.workload)
    return [SEQUENTIAL]


def workload_dir(m: Matrix, case: Case) -> Path:
    """The directory of the matrix file declaring the case's workload (its rule's, else its
    suite's): files its phases name are relative to it."""
    rule = next((e for e in m.rules if e.index == case.expectation.rule), None)
    if rule is not None and rule.rule.workload is not None:
        return m.dir_of(rule.where)
    return m.dir_of(m.where.get(("suites", case.suite)))


def stage_bounds_of(m: Matrix, case: Case) -> StageBounds | None:
    """The case's bounds on how uneven its stages may be: its rule's, else its suite's."""
    suite = m.suite(case.suite)
    rule = next((e.rule for e in m.rules if e.index == case.expectation.rule), None)
    return rule.stage_bounds if rule is not None and rule.stage_bounds is not None else suite.stage_bounds


def _ids(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(ID_LOW, ID_HIGH) for _ in range(n))


def plan_phase(phase: Phase, pp: int) -> PhasePlan:
    """The requests of a phase other than ``sequential`` (whose requests are the suite's)."""
    if phase.kind == "sequential":
        raise ValueError("the sequential phase sends the suite's accuracy requests")
    default_n, default_len, default_out = DEFAULTS[phase.kind]
    n = phase.requests or default_n or max(4, 2 * pp)
    length = phase.prompt_tokens or default_len
    out = phase.max_tokens or default_out
    rng = random.Random(f"{phase.seed}:{phase.label}")
    name = phase.label
    if phase.kind == "batch":
        reqs = tuple(Request(f"{name}:{i}", _ids(rng, max(1, length * (i + 1) // n)), out) for i in range(n))
        return PhasePlan(phase, reqs, in_flight=n)
    if phase.kind == "concurrent":
        # mixed lengths: prompts from a quarter to all of `prompt_tokens`, outputs likewise
        reqs = tuple(
            Request(f"{name}:{i}", _ids(rng, max(1, length * (i % 4 + 1) // 4)), max(1, out * ((i + 2) % 4 + 1) // 4))
            for i in range(n)
        )
        return PhasePlan(phase, reqs, in_flight=n)
    if phase.kind == "shared-prefix":
        prefix = _ids(rng, length)
        warm = Request(f"{name}:warm", prefix + _ids(rng, SHARED_SUFFIX), out)
        reqs = tuple(Request(f"{name}:{i}", prefix + _ids(rng, SHARED_SUFFIX), out) for i in range(n))
        return PhasePlan(phase, reqs, warmup=(warm,), in_flight=n)
    if phase.kind == "abort":
        reqs = tuple(Request(f"{name}:{i}", _ids(rng, length), out) for i in range(n))
        fresh = Request(f"{name}:fresh", _ids(rng, length), min(out, 16))
        return PhasePlan(phase, reqs, after=(fresh,), in_flight=n)
    # long-prompt, pressure: n prompts of `length`, all at once
    reqs = tuple(Request(f"{name}:{i}", _ids(rng, length), out) for i in range(n))
    return PhasePlan(phase, reqs, in_flight=n)


def plan_workload(m: Matrix, case: Case) -> list[PhasePlan]:
    """The concrete phases of a case, the sequential one aside."""
    pp = m.topologies[case.topology].pp
    return [plan_phase(p, pp) for p in workload_of(m, case) if p.kind != "sequential"]


def _given(m: Matrix, case: Case, flag: str) -> int | None:
    """The number a flag of the case's launch gives (its rule's over its layers'), if any."""
    from harness.cases.merge import matrix_layers, merge

    merged = merge(matrix_layers(m, case.platform, case.family, case.variant, case.features, case.suite, case.group))
    given = merged.value(flag)
    rule = next((e.rule for e in m.rules if e.index == case.expectation.rule), None)
    if rule is not None and flag in rule.args[:-1]:
        given = rule.args[rule.args.index(flag) + 1]
    return int(given) if given is not None and given.isdigit() else None


def max_model_len(m: Matrix, case: Case) -> int | None:
    """The longest sequence the case's server takes, where the matrix shows it: its
    `--max-model-len` flag, else a tiny zoo model's `max_position_embeddings`; None if unknown."""
    from harness.target.zoo import ZooError, spec_of

    given = _given(m, case, "--max-model-len")
    if given is not None:
        return given
    model = m.variant(case.family, case.variant).model
    if model.startswith("zoo:"):
        try:
            length = spec_of(model[4:]).config.get("max_position_embeddings")
        except (ZooError, OSError, ValueError):
            return None
        return int(length) if isinstance(length, int) else None
    return None


SPECULATIVE_FLAG = "--speculative-config"


def drafts(m: Matrix, feature: str) -> bool:
    """Whether the feature drafts tokens (it gives vLLM a speculative config)."""
    f = m.features[feature]
    return "speculative-config" in f.configs or SPECULATIVE_FLAG in f.args


def workload_problems(m: Matrix, case: Case) -> list[str]:
    """Why the case's workload cannot be sent as written (lint's question, before any launch):
    a request longer than the model holds, a long prompt the engine would prefill in one step
    (no longer than the case's --max-num-batched-tokens: nothing is chunked), a bound on a figure
    the phase or the case does not produce."""
    out = []
    limit = max_model_len(m, case)
    budget = _given(m, case, "--max-num-batched-tokens")
    speculative = any(drafts(m, f) for f in case.features)
    for phase in workload_of(m, case):
        name = f"phase {phase.label} ({phase.kind})"
        if phase.kind != "sequential" and limit is not None:
            longest = plan_phase(phase, m.topologies[case.topology].pp).longest()
            if longest > limit:
                out.append(
                    f"{name}: a request of {longest} tokens (prompt and output) is longer than the "
                    f"{limit} the model of {case.family}/{case.variant} holds"
                )
        if phase.kind == "long-prompt" and budget is not None:
            tokens = phase.prompt_tokens or DEFAULTS["long-prompt"][1]
            if tokens <= budget:
                out.append(
                    f"{name}: its prompts of {tokens} tokens fit in one engine step of the case's "
                    f"--max-num-batched-tokens {budget}: their prefill is not chunked (send longer prompts)"
                )
        if phase.min_acceptance_ratio is not None and not speculative:
            out.append(
                f"{name}: min_acceptance_ratio bounds speculative acceptance, but no feature of "
                f"{case.attrs.get('feature', 'none')} drafts tokens (no --speculative-config)"
            )
        gate = phase.perf_baseline
        missing = missing_aisbench_files(gate.aisbench, workload_dir(m, case)) if gate and gate.aisbench else None
        if missing:
            out.append(f"{name}: {missing}")
        for bound in ("min_throughput_ratio", "max_ttft_s", "perf_baseline"):
            if getattr(phase, bound) is not None and phase.kind != "concurrent":
                out.append(f"{name}: {bound} is measured on streamed requests in flight: a concurrent phase")
    return out

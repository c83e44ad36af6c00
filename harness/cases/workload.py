"""A case's workload: which phases of traffic it is judged on, and the exact requests of each.

Pure: nothing here talks to a server. Each kind of phase is a module of ``harness.cases.phases``
(its requests, how they are sent, what its metrics must show), registered in
``harness.registry.PHASE_KINDS``. Sizes a phase leaves unset take its kind's default; where a
default depends on the case, it is the PP size (``concurrent`` keeps at least 2 × PP requests in
flight, so every stage has a batch of its own while the others work).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.cases.phases.kind import MAX_PHASE_TOKENS, PhaseKind, PhasePlan
from harness.launch import PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import Phase, StageBounds, missing_aisbench_files
from harness.matrix.source import SourceError, Where
from harness.registry import PHASE_KINDS

SEQUENTIAL = Phase(kind="sequential")


def kind_of(phase: Phase | PhasePlan) -> PhaseKind:
    """The phase's kind (``harness.cases.phases``)."""
    return PHASE_KINDS[phase.kind]


def workload_of(m: Matrix, case: Case) -> list[Phase]:
    """The case's phases: its rule's workload, else its suite group's, else its suite's, else
    the one sequential phase (the requests of the suite's `accuracy`)."""
    return list(declared(m, case)[0])


def declared(m: Matrix, case: Case) -> tuple[list[Phase], tuple[Any, ...] | None]:
    """The case's phases and where their list is declared (``Matrix.at``'s section, name and
    path), None for the default sequential phase."""
    suite = m.suite(case.suite)
    entry = next((e for e in m.rules if e.index == case.expectation.rule), None)
    if entry is not None and entry.rule.workload is not None:
        return entry.rule.workload, ("rules", str(entry.index), "workload")
    group = suite.groups[case.group] if case.group is not None and case.group < len(suite.groups) else None
    if group is not None and group.workload is not None:
        return group.workload, ("suites", case.suite, "groups", case.group, "workload")
    if suite.workload is not None:
        return suite.workload, ("suites", case.suite, "workload")
    return [SEQUENTIAL], None


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


def plan_phase(phase: Phase, pp: int) -> PhasePlan:
    """The requests of a phase other than ``sequential`` (whose requests are the suite's);
    PlanError, before building any, for a phase larger than ``MAX_PHASE_TOKENS`` (lint and a
    run's plan check say so first, with the phase's place)."""
    built = kind_of(phase).token_ids(phase, pp)
    if built > MAX_PHASE_TOKENS:
        raise PlanError(f"phase {phase.label} ({phase.kind}): {_too_many(phase, built)}")
    return kind_of(phase).plan(phase, pp)


def _too_many(phase: Phase, built: int) -> str:
    return (
        f"its prompts would hold {built} token ids (requests x prompt_tokens), more than the "
        f"{MAX_PHASE_TOKENS} one phase may (they are generated in memory before any is sent)"
    )


def plan_workload(m: Matrix, case: Case) -> list[PhasePlan]:
    """The concrete phases of a case, the sequential one aside."""
    pp = m.topologies[case.topology].pp
    return [plan_phase(p, pp) for p in workload_of(m, case) if kind_of(p).planned]


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


def _at(m: Matrix, at: tuple[Any, ...] | None, i: int, phase: Phase, *sizes: str) -> Where | None:
    """Where the ``i``-th phase of the list declared at ``at`` sets the first of ``sizes`` it
    sets (the phase itself if none)."""
    if at is None:
        return None
    key = next((k for k in sizes if getattr(phase, k) is not None), None)
    section, name, *path = at
    return m.at(section, name, *path, i, *([key] if key else []))


def size_problems(m: Matrix, case: Case) -> list[SourceError]:
    """Each phase of the case too large to build or to send, at the size that makes it so and
    found from the sizes alone, before any token id is built (lint's and a run's plan check's
    question): more token ids than ``MAX_PHASE_TOKENS``, or a request (prompt and output) longer
    than the model of the case holds (``max_model_len``)."""
    phases, at = declared(m, case)
    pp = m.topologies[case.topology].pp
    limit = max_model_len(m, case)
    out = []
    for i, phase in enumerate(phases):
        kind = kind_of(phase)
        if not kind.planned:
            continue
        name = f"phase {phase.label} ({phase.kind})"
        built = kind.token_ids(phase, pp)
        if built > MAX_PHASE_TOKENS:
            out.append(
                SourceError(_at(m, at, i, phase, "prompt_tokens", "requests"), f"{name}: {_too_many(phase, built)}")
            )
            continue
        longest = kind.longest(phase, pp)
        if limit is not None and longest > limit:
            s = kind.sizes(phase, pp)
            out.append(
                SourceError(
                    _at(m, at, i, phase, "prompt_tokens", "max_tokens"),
                    f"{name}: a request of {longest} tokens (prompt_tokens {s.prompt_tokens}, max_tokens "
                    f"{s.max_tokens}) is longer than the {limit} the model of {case.family}/{case.variant} holds",
                )
            )
    return out


def _served_adapters(m: Matrix, case: Case) -> set[str]:
    """The LoRA adapter names the case's launch serves (``--lora-modules NAME=PATH ...``)."""
    from harness.cases.merge import matrix_layers, merge

    merged = merge(matrix_layers(m, case.platform, case.family, case.variant, case.features, case.suite, case.group))
    return {v.partition("=")[0] for u in merged.tail if u.flag == "--lora-modules" for v in u.values}


def unserved_models(phases: list[Phase], served: set[str]) -> list[tuple[int, str]]:
    """(phase index, why) for each request naming a model nothing serves when it is sent: neither
    an adapter of the launch (``served``) nor one loaded by an earlier load-lora-adapter request."""
    loaded = set(served)
    out = []
    for i, phase in enumerate(phases):
        for r in phase.explicit or ():
            if r.endpoint == "load-lora-adapter":
                loaded.add(r.lora_name)
            model = getattr(r, "model", None)
            if model is not None and model not in loaded:
                named = ", ".join(sorted(loaded)) or "none"
                out.append((i, f"request {r.name or r.endpoint} names model {model!r}, not served then ({named})"))
    return out


SLEEP_FLAG = "--enable-sleep-mode"
SLEEP_ENDPOINTS = ("sleep", "wake-up")


def _sleeps(m: Matrix, case: Case) -> bool:
    """Whether the case's launch runs with sleep mode (``--enable-sleep-mode``, the ``sleep-mode``
    feature's flag, from any layer or the case's rule)."""
    from harness.cases.merge import matrix_layers, merge

    layers = matrix_layers(
        m, case.platform, case.family, case.variant, case.features, case.suite, case.group, case.expectation.rule
    )
    given = [u for u in merge(layers).tail if u.key == SLEEP_FLAG]
    return bool(given) and given[-1].flag == SLEEP_FLAG and given[-1].values[-1:] not in (("false",), ("False",))


def request_where(m: Matrix, at: tuple[Any, ...] | None, i: int, j: int, key: str) -> Where | None:
    """Where the ``j``-th explicit request of the ``i``-th phase declared at ``at`` sets ``key``'s
    value: in the matrix file, or in the file of requests the phase names (None: not known)."""
    if at is None:
        return None
    section, name, *path = at
    found = m.positions.get((section, str(name)))
    if found is None:
        return None
    doc, base = found
    node: Any = doc.root
    for k in (*base, *path, i):
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None
    given = node.get("explicit") if isinstance(node, dict) else None
    if not isinstance(given, str):
        return doc.value_where((*base, *path, i, "explicit", j, key))
    from harness.matrix.source import MatrixError, load_document

    file = m.dir_of(doc.where(base)) / given
    try:
        requests = load_document(file, str(Path(doc.display).parent / given))
    except MatrixError:
        return None
    return requests.value_where(("requests", j, key))


def sleepless_requests(m: Matrix, case: Case) -> list[SourceError]:
    """Each sleep or wake-up request of a case whose deployment runs without sleep mode: vLLM
    answers /sleep only with ``--enable-sleep-mode`` (and refuses that flag on a platform without
    it), so such a request could only fail. Where the request names its endpoint."""
    if _sleeps(m, case):
        return []
    phases, at = declared(m, case)
    out = []
    for i, phase in enumerate(phases):
        for j, r in enumerate(phase.explicit or ()):
            if r.endpoint in SLEEP_ENDPOINTS:
                where = request_where(m, at, i, j, "endpoint") or _at(m, at, i, phase)
                out.append(
                    SourceError(
                        where,
                        f"phase {phase.label} ({phase.kind}): request {r.name or j} is endpoint {r.endpoint!r}, but "
                        f"the deployment runs without sleep mode ({SLEEP_FLAG}: the sleep-mode feature)",
                    )
                )
    return out


def workload_problems(m: Matrix, case: Case) -> list[SourceError]:
    """Why the case's workload cannot be sent as written (lint's question, before any launch):
    a phase too large (``size_problems``), a long prompt the engine would prefill in one step
    (no longer than the case's --max-num-batched-tokens: nothing is chunked), a bound on a figure
    the phase or the case does not produce, a sleep or wake-up request without sleep mode
    (``sleepless_requests``). Each where its phase is declared, if known."""
    phases, at = declared(m, case)
    out = size_problems(m, case) + sleepless_requests(m, case)
    budget = _given(m, case, "--max-num-batched-tokens")
    speculative = any(drafts(m, f) for f in case.features)
    unserved = unserved_models(phases, _served_adapters(m, case))
    for i, phase in enumerate(phases):
        name = f"phase {phase.label} ({phase.kind})"
        kind = kind_of(phase)
        here = _at(m, at, i, phase)
        problems: list[str] = [f"{name}: {problem}" for problem in kind.lint(phase, budget)]
        problems += [f"{name}: {why}" for k, why in unserved if k == i]
        if phase.min_acceptance_ratio is not None and not speculative:
            problems.append(
                f"{name}: min_acceptance_ratio bounds speculative acceptance, but no feature of "
                f"{case.attrs.get('feature', 'none')} drafts tokens (no --speculative-config)"
            )
        gate = phase.perf_baseline
        missing = missing_aisbench_files(gate.aisbench, workload_dir(m, case)) if gate and gate.aisbench else None
        if missing:
            problems.append(f"{name}: {missing}")
        for bound in ("min_throughput_ratio", "max_ttft_s", "perf_baseline"):
            if getattr(phase, bound) is not None and not kind.streamed:
                problems.append(f"{name}: {bound} is measured on streamed requests in flight: a concurrent phase")
        for timed in ("rate_per_s", "duration_s", "max_memory_growth"):
            if getattr(phase, timed) is not None and not kind.arrivals:
                problems.append(f"{name}: {timed} is for requests arriving on a clock: an open-loop phase")
        out += [SourceError(here, p) for p in problems]
    return out

"""Observing one deployment: launch it, wait for it, ask it what the cases' claims need, read
what the workers built, and take it down — then one Observation per case it serves.

Each step returns its own part (``Startup``, ``Asked``, ``StageReading``, the phases, checks and
scores, gathered in ``Served``); ``assemble`` builds a case's observation from those parts, what
the logs say of its claim (``CaseLogs``) and its reference's answers, and fills nothing in place."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.cases.workload import PhasePlan, kind_of
from harness.check import logs
from harness.check.context import RunContext
from harness.check.effective import read as effective
from harness.check.references.runs import ReferenceResult, ReferenceRuns
from harness.check.scores.aisbench_perf import measure_phase_perf
from harness.check.serving.live import LiveDeployment
from harness.check.serving.watch import watch_request
from harness.check.stages import probe
from harness.check.stages.probe import StageReading, read_stages, start_timing
from harness.check.traffic.compare import Outputs, collect, compare_outputs
from harness.check.traffic.evidence import phase_record
from harness.check.traffic.phases import PhaseOutputs, run_phase
from harness.launch import Deployment
from harness.matrix.schema import Compare
from harness.outcomes import NEEDS_REFERENCE, Kind
from harness.plan.config_check import config_only
from harness.plan.resolved import RequestsKey, ResolvedCase
from harness.plan.weights import without_weights
from harness.registry import LIVE_CHECKS
from harness.results import store
from harness.results.result import Comparison, EffectiveConfig, FeatureCheck, LogLine, Observation, ScoreVerdict

# A log line from one of these processes means the configuration was accepted and the engine began.
ENGINE_PROCESS = r"^\((EngineCore|Worker|VllmWorker)\w*"


def measure_phase(
    live: LiveDeployment,
    ph: PhasePlan,
    compare: Compare,
    pp: int,
    key: str,
    base_dir: Path,
    say: Callable[[str], None],
) -> tuple[PhaseOutputs, dict[str, Any]]:
    """One phase on ``live``: its outputs and, for a PP deployment with the stage probe, each
    stage's busy time over the phase alone (read before the AISBench perf run its gate may ask
    for, whose forward passes are not the phase's); the perf run in its own folder for ``key``."""
    timed = pp > 1 and probe.start_stage_timing(live)
    out = run_phase(live, ph, compare)
    stages = probe.stage_busy(live, out.wall_s, pp, out.metrics.get("peak_running")) if timed else {}
    gate = ph.phase.perf_baseline
    if gate is not None and gate.aisbench is not None and not out.error:
        say(f"phase {ph.name}: AISBench perf run")
        out.aisbench = measure_phase_perf(live, ph.phase, base_dir, key)
    return out, stages


@dataclass(frozen=True)
class PhaseKey:
    """One distinct phase run on a deployment: cases whose planned phase and sampling are equal
    share it (``text``, canonical JSON of both, also names the phase's AISBench perf folder)."""

    text: str


def _phase_key(ph: PhasePlan, compare: Compare) -> PhaseKey:
    sampling = [compare.top_logprobs, compare.temperature, compare.seed]
    return PhaseKey(json.dumps([ph.to_json(), sampling], sort_keys=True))


@dataclass
class Startup:
    """How the deployment came up (or did not) and how its processes ended."""

    ready: bool = False
    ready_s: float | None = None
    failed_after_s: float | None = None
    hung: bool = False
    exit_codes: dict[str, int | None] = field(default_factory=dict)


@dataclass
class Asked:
    """The cases' sequential requests: the answers by what was asked, or the first one that failed."""

    outputs: dict[RequestsKey, Outputs] = field(default_factory=dict)
    error: str | None = None
    failed_after_s: float | None = None
    expected_line: LogLine | None = None  # the claimed error, seen while a request waited


@dataclass
class Served:
    """Everything one deployment did, step by step, before any case is judged on it."""

    startup: Startup
    asked: Asked = field(default_factory=Asked)
    timing_note: str | None = None
    stages: StageReading = field(default_factory=StageReading)
    phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]] = field(default_factory=dict)
    checks: dict[str, FeatureCheck] = field(default_factory=dict)
    scores: dict[ScoreKey, dict[str, Any]] = field(default_factory=dict)
    effective: EffectiveConfig | None = None  # the configuration the engine built, as it reported it
    logs: dict[str, str] = field(default_factory=dict)  # launch name -> log file, relative to the run
    engine_started: bool = False
    root_cause: LogLine | None = None

    @property
    def answered(self) -> bool:
        return self.startup.ready and not self.asked.error


@dataclass(frozen=True)
class CaseLogs:
    """What the deployment's logs say about one case's claim: its expected error, its features turned off."""

    expected_line: LogLine | None
    silent_disable: list[LogLine]


class Observer:
    def __init__(self, ctx: RunContext, references: ReferenceRuns):
        self.ctx = ctx
        self.run_dir = ctx.run_dir
        self.references = references

    def progress(self, kind: str, rc: ResolvedCase | None, text: str) -> None:
        self.ctx.say(kind, rc.case if rc is not None else None, text)

    def observe(
        self, d: Deployment, cases: list[ResolvedCase], dummy_weights: bool = False, check_config: bool = False
    ) -> tuple[Deployment, dict[str, Observation]]:
        """Launch ``d`` once for all of ``cases``; the deployment as really launched, and each case's
        observation. ``dummy_weights``: every launch that loads weights loads vLLM's dummy ones
        (``harness.plan.weights``); ``check_config``: each serving launch only builds the engine's
        configuration and exits (``harness.plan.config_check``). Either keeps its logs apart from
        a launch of the deployment itself."""
        first = cases[0]
        cluster = self.ctx.planner.cluster

        def replan(placement: Any, ports: Any) -> Deployment:
            planned = replace(self.ctx.planner.deployment(first.case, placement, ports), case_ids=d.case_ids)
            if check_config:
                return config_only(planned, lambda node: cluster.node(node).python)
            return without_weights(planned) if dummy_weights else planned

        how = ", dummy weights" if dummy_weights else ", configuration check" if check_config else ""
        self.progress("launch", first, f"{len(cases)} case(s) on one deployment{how}")
        tail = "-dummy-weights" if dummy_weights else "-config-check" if check_config else ""
        logs_dir = self.run_dir / "logs" / f"{d.key}{tail}"
        with self.ctx.launcher.serve(replan, d.placement, first.id, logs_dir) as live:
            if check_config:
                state, elapsed = live.wait_exited(first.startup_timeout_s)
            else:
                state, elapsed = live.wait_ready(first.startup_timeout_s)
            if state == "ready":
                served = self._serve(live, cases, Startup(ready=True, ready_s=round(elapsed, 1)))
            else:
                served = Served(Startup(failed_after_s=round(elapsed, 1), hung=state == "timeout"))
            served.startup.exit_codes = live.exit_codes()
        real = live.deployment
        paths = live.log_paths
        served.logs = {name: store.log_ref(self.run_dir, path) for name, path in paths.items()}
        served.engine_started = logs.search(paths, ENGINE_PROCESS) is not None
        served.root_cause = logs.root_cause(paths)
        # references only now, once this deployment's devices are free, and only for cases that
        # served their requests: a case that never answered has nothing to compare
        judged = [c for c in cases if c.expectation.kind in NEEDS_REFERENCE and served.answered]
        asked = served.asked.outputs
        with self.references.near([name for name, _ in real.placement.nodes] if real.placement else []):
            self.references.prefetch([(c, _asked_ids(c, asked)) for c in judged])
            refs = {c.id: self.references.for_case(c, _asked_ids(c, asked)) for c in judged}
        return real, {c.id: assemble(c, served, case_logs(c, served, paths), refs.get(c.id)) for c in cases}

    def _serve(self, live: LiveDeployment, cases: list[ResolvedCase], startup: Startup) -> Served:
        """Ask a ready deployment what its cases' claims need: the sequential requests (watching for
        a claimed error), then what the workers built, each phase, the feature checks and scores."""
        first = cases[0]
        first_request = any(c.expectation.phase == "first-request" for c in cases)
        served = Served(startup, effective=effective.read(live))
        # every PP stage's forward time over the sequential requests (and, where the suite asks,
        # the partition-tuning advice from it)
        if first.pp > 1 and not first_request:
            served.timing_note = start_timing(live)
        timed = first.pp > 1 and not first_request and served.timing_note is None
        served.asked = ask_cases(live, cases, _claimed_errors(cases))
        if served.asked.error or first_request:
            return served
        served.stages = read_stages(live, timed, first.partition_tuning and timed)
        served.phases = self._run_phases(live, cases)
        served.checks = {
            name: FeatureCheck.of(LIVE_CHECKS[name](live)) for name in sorted(first.checks & LIVE_CHECKS.keys())
        }
        served.scores = measure_scores(live, cases)
        return served

    def _run_phases(
        self, live: LiveDeployment, cases: list[ResolvedCase]
    ) -> dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]]:
        """Each distinct phase of the cases' workloads, once, in workload order; for a PP
        deployment with the stage probe, each stage's busy time over the phase too."""
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]] = {}
        for c in cases:
            for ph in c.phases:
                if c.pooling and not kind_of(ph).pooling:  # a pooling runner answers no completions
                    continue
                key = _phase_key(ph, c.compare)
                if key in phases:
                    continue
                self.progress(
                    "phase", c, f"phase {ph.name} ({ph.kind}, {len(ph.requests) + len(ph.explicit)} requests)"
                )
                say = functools.partial(self.progress, "phase", c)
                phases[key] = measure_phase(live, ph, c.compare, c.pp, key.text, c.workload_dir, say)
        return phases


def _claimed_errors(cases: list[ResolvedCase]) -> str | None:
    rejects = [c.expectation.error for c in cases if c.expectation.kind is Kind.REJECTED and c.expectation.error]
    return "|".join(f"(?:{r})" for r in rejects) or None


def _asked_ids(rc: ResolvedCase, outputs: dict[RequestsKey, Outputs]) -> list[list[int]] | None:
    got = outputs.get(rc.requests)
    return got.id_prompts if got is not None else None


def ask_cases(live: LiveDeployment, cases: list[ResolvedCase], pattern: str | None) -> Asked:
    """Each distinct set of sequential requests the cases make, once, watching the deployment
    (and its logs for ``pattern``) while each waits."""
    asked = Asked()
    t_req = time.monotonic()
    for c in cases:
        if c.requests in asked.outputs:
            continue
        result, problem, line = watch_request(
            live,
            functools.partial(collect, live, c.accuracy, c.compare, c.pooling),
            c.request_timeout_s,
            pattern,
        )
        if problem:
            asked.error, asked.failed_after_s = problem, round(time.monotonic() - t_req, 1)
            asked.expected_line = line
            return asked
        asked.outputs[c.requests] = result
    return asked


def measure_scores(live: LiveDeployment, cases: list[ResolvedCase]) -> dict[ScoreKey, dict[str, Any]]:
    """The task score of the deployment, once per distinct score a case's reference asks for."""
    scores: dict[ScoreKey, dict[str, Any]] = {}
    refs = [c for c in cases if c.expectation.kind in NEEDS_REFERENCE and c.reference.spec.score is not None]
    if not refs:
        return scores
    from harness.check.scores.evaluate import ScoreError, evaluate_live

    for c in refs:
        spec, key = c.reference.spec.score, _score_key(c)
        if key in scores or spec is None:
            continue
        try:
            scores[key] = evaluate_live(live, spec, c.reference.base_dir, live.log_dir / "score", c.request_timeout_s)
        except ScoreError as err:
            scores[key] = {"error": str(err)}
    return scores


def case_logs(rc: ResolvedCase, served: Served, paths: dict[str, Path]) -> CaseLogs:
    exp = rc.expectation
    line = served.asked.expected_line
    if line is None and exp.kind == "rejected" and exp.error:
        line = logs.search_errors(paths, exp.error)
    return CaseLogs(line, silent_disables(rc, paths))


def silent_disables(rc: ResolvedCase, paths: dict[str, Path]) -> list[LogLine]:
    """The WARNING lines that say a claimed feature was turned off, each searched in the log of
    the instance that runs the feature (every log for a deployment of one instance)."""
    found: list[LogLine] = []
    for role in dict.fromkeys(r for _, r in rc.silent_disable):
        patterns = [p for p, r in rc.silent_disable if r == role]
        found += logs.warnings_matching(paths if role is None else {n: paths[n] for n in paths if n == role}, patterns)
    return found


def assemble(rc: ResolvedCase, served: Served, seen: CaseLogs, ref: ReferenceResult | None) -> Observation:
    """One case's observation from what its deployment did, what the logs say of its claim and
    its reference's answers: pure, so a case is judged on exactly these parts."""
    startup, asked = served.startup, served.asked
    failed_after = asked.failed_after_s if asked.error else startup.failed_after_s
    obs = Observation(
        ready=startup.ready,
        ready_s=startup.ready_s,
        failed_phase=None if startup.ready and not asked.error else ("first-request" if startup.ready else "startup"),
        failed_after_s=failed_after,
        hung=startup.hung,
        exit_codes=dict(startup.exit_codes),
        root_cause=served.root_cause,
        engine_started=served.engine_started,
        request_error=asked.error,
        logs=dict(served.logs),
        silent_disable=list(seen.silent_disable),
        feature_checks={k: v.model_copy(deep=True) for k, v in served.checks.items()},
        notes=[served.timing_note] if served.timing_note else [],
    )
    effective.judge_case(obs, served.effective, rc.effective)
    if seen.expected_line is not None:
        obs.expected_error_line = seen.expected_line
        obs.expected_error_after_s = asked.failed_after_s if asked.expected_line is not None else failed_after
    reading = served.stages
    obs.partition, obs.partition_source, obs.tuning = reading.partition, reading.source, reading.tuning
    obs.notes += reading.notes
    if reading.stages is not None:
        obs.stages = reading.stages.model_copy(deep=True)
        if rc.stage_bounds is not None:
            obs.stages.max_last_stage_memory_ratio = rc.stage_bounds.max_last_stage_memory_ratio
            obs.stages.max_step_time_ratio = rc.stage_bounds.max_step_time_ratio
            obs.stages.tapped_stage = rc.stage_bounds.tapped_stage
            modules = rc.stage_bounds.output_modules or {}
            obs.stages.output_modules = {str(k): str(v) for k, v in modules.items()} or None
    if rc.partition_expected is not None:
        obs.partition_expected = [list(r) for r in rc.partition_expected]
    doc = rc.case.attrs.get("partition_doc_error")
    if doc and not rc.case.attrs.get("partition_error"):
        obs.notes.append(
            f"documentation disagrees: the Ascend guide's rule rejects this partition "
            f"({doc}); vLLM's own partition check accepts it (the outcome says what the "
            f"server then did)"
        )
    if ref is not None and served.answered:
        _accuracy(rc, ref, obs, served)
    if served.answered:
        _phase_records(rc, ref, obs, served.phases)
    return obs


def _phase_records(
    rc: ResolvedCase,
    ref: ReferenceResult | None,
    obs: Observation,
    phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]],
) -> None:
    """Each phase of the case against the reference's answers to the same requests."""
    judged = _as_judged(rc.compare, ref)
    theirs = ref.outputs.phases if ref is not None and ref.outputs is not None else {}
    for ph in rc.phases:
        if rc.pooling and not kind_of(ph).pooling:
            continue
        ran = phases.get(_phase_key(ph, rc.compare))
        if ran is None:
            continue
        got, stages = ran
        other = theirs.get(ph.name)
        if other is None and ref is not None and ref.outputs is not None and not obs.reference_error:
            # answers to compare with were expected: a phase the reference lacks is not a pass
            obs.reference_error = f"reference, phase {ph.name}: the reference holds no answers for it"
        if other is not None and other.error and ref is not None and not obs.reference_error:
            obs.reference_error = f"reference, phase {ph.name}: {other.error}"
        record = phase_record(ph, judged, got, other if other and not other.error else None, stages)
        obs.workload.append(record)
        obs.notes += [f"phase {record.name}: {stale}" for stale in record.stale_baselines]


def _accuracy(rc: ResolvedCase, ref: ReferenceResult, obs: Observation, served: Served) -> None:
    obs.reference = dict(ref.evidence)
    if ref.error:
        obs.reference_error = ref.error
        return
    got = served.asked.outputs.get(rc.requests)
    if ref.outputs is not None and got is not None:
        compare = _as_judged(ref.ref.compare, ref)
        accuracy = Comparison.of(compare_outputs(compare, ref.outputs, got, rc.pooling))
        accuracy.reference = ref.ref.describe()
        if got.notes:
            obs.notes += got.notes
        moved = ref.evidence.get("golden_stack_differs")
        if moved:
            accuracy.summary += f" — against a golden recorded on another stack ({'; '.join(moved)})"
        obs.accuracy = accuracy
    spec = ref.ref.spec.score
    if spec is not None:
        obs.score = score_verdict(served.scores.get(_score_key(rc)) or {}, ref.score, spec)


def score_verdict(measured: dict[str, Any], reference_value: float | None, spec: Any) -> ScoreVerdict:
    """The task score a tool ``measured`` judged against the reference's (or ``spec``'s
    baseline), naming the settings its requests were generated with where the tool says: a score
    is only comparable with one measured at the same settings."""
    from harness.check.scores.evaluate import judge_score

    if "error" in measured or "value" not in measured:
        return ScoreVerdict(ok=False, detail=f"task score failed: {measured.get('error', 'not measured')}")
    verdict = judge_score(measured["value"], reference_value, spec)
    verdict |= {"task": measured.get("task"), "metric": measured.get("metric")}
    generation = measured.get("generation")
    if generation:
        verdict["detail"] += " (generated with " + ", ".join(f"{k} {v}" for k, v in generation.items()) + ")"
        verdict["generation"] = generation
    return ScoreVerdict.of(verdict)


@dataclass(frozen=True)
class ScoreKey:
    """One distinct task score measured on a deployment (its spec as canonical JSON)."""

    spec: str


def _score_key(rc: ResolvedCase) -> ScoreKey:
    spec = rc.reference.spec.score
    return ScoreKey(json.dumps(spec.model_dump() if spec is not None else None, sort_keys=True))


def _as_judged(compare: Compare, ref: ReferenceResult | None) -> Compare:
    """``compare`` as a case is judged with it: against a reference that ran without some of the
    case's output-preserving features, or with one the case does not run (a variant's
    ``reference_drafter``), logprobs within ``left_out_tolerance`` (tokens still equal)."""
    if ref is None or not (ref.evidence.get("features_left_out") or ref.evidence.get("features_added")):
        return compare
    if compare.logprob_tolerance >= compare.left_out_tolerance:
        return compare
    return compare.model_copy(update={"logprob_tolerance": compare.left_out_tolerance})

"""Observing one deployment: launch it, wait for it, ask it what the cases' claims need, read
what the workers built, and take it down — then one Observation per case it serves."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.cases.workload import PhasePlan
from harness.check import logs
from harness.check.context import RunContext
from harness.check.features import LIVE_CHECKS
from harness.check.references.runs import ReferenceResult, ReferenceRuns
from harness.check.scores.aisbench_perf import measure_phase_perf
from harness.check.serving.live import LiveDeployment
from harness.check.serving.watch import watch_request
from harness.check.stages import probe
from harness.check.stages.probe import read_partition, stage_costs, start_timing
from harness.check.traffic.compare import Outputs, collect, compare_outputs
from harness.check.traffic.evidence import phase_record
from harness.check.traffic.phases import PhaseOutputs, run_phase
from harness.matrix.schema import Compare
from harness.outcomes import NEEDS_REFERENCE, Kind
from harness.plan.launch import Deployment
from harness.plan.resolved import RequestsKey, ResolvedCase
from harness.results import store
from harness.results.result import Comparison, FeatureCheck, Observation, ScoreVerdict

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


class Observer:
    def __init__(self, ctx: RunContext, references: ReferenceRuns):
        self.ctx = ctx
        self.run_dir = ctx.run_dir
        self.references = references

    def progress(self, kind: str, rc: ResolvedCase | None, text: str) -> None:
        self.ctx.say(kind, rc.case if rc is not None else None, text)

    def observe(self, d: Deployment, cases: list[ResolvedCase]) -> tuple[Deployment, dict[str, Observation]]:
        """Launch ``d`` once for all of ``cases``; the deployment as really launched, and each case's observation."""
        first = cases[0]
        obs = Observation()
        rejects = [c.expectation.error for c in cases if c.expectation.kind is Kind.REJECTED and c.expectation.error]
        pattern = "|".join(f"(?:{r})" for r in rejects) or None
        outputs: dict[RequestsKey, Outputs] = {}
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]] = {}
        scores: dict[ScoreKey, dict[str, Any]] = {}

        def replan(placement: Any, ports: Any) -> Deployment:
            return replace(self.ctx.planner.deployment(first.case, placement, ports), case_ids=d.case_ids)

        self.progress("launch", first, f"{len(cases)} case(s) on one deployment")
        with self.ctx.launcher.serve(replan, d.placement, first.id, self.run_dir / "logs" / d.key) as live:
            state, elapsed = live.wait_ready(first.startup_timeout_s)
            obs.exit_codes = live.exit_codes()
            if state == "ready":
                obs.ready, obs.ready_s = True, round(elapsed, 1)
                self._check_live(live, cases, obs, pattern, outputs, phases, scores)
            else:
                obs.failed_phase = "startup"
                obs.failed_after_s = round(elapsed, 1)
                obs.hung = state == "timeout"
            obs.exit_codes = live.exit_codes()
        real = live.deployment
        paths = live.log_paths
        obs.logs = {name: store.log_ref(self.run_dir, path) for name, path in paths.items()}
        obs.engine_started = logs.search(paths, ENGINE_PROCESS) is not None
        obs.root_cause = logs.root_cause(paths)
        # references only now, once this deployment's devices are free, and only for cases that
        # served their requests: a case that never answered has nothing to compare
        judged = [c for c in cases if c.expectation.kind in NEEDS_REFERENCE and obs.ready and not obs.request_error]
        with self.references.near([name for name, _ in real.placement.nodes] if real.placement else []):
            self.references.prefetch([(c, self._asked_ids(c, outputs)) for c in judged])
            refs = {c.id: self.references.for_case(c, self._asked_ids(c, outputs)) for c in judged}
        return real, {c.id: self._per_case(c, obs, paths, refs.get(c.id), outputs, phases, scores) for c in cases}

    def _asked_ids(self, rc: ResolvedCase, outputs: dict[RequestsKey, Outputs]) -> list[list[int]] | None:
        got = outputs.get(rc.requests)
        return got.id_prompts if got is not None else None

    def _run_phases(
        self,
        live: LiveDeployment,
        cases: list[ResolvedCase],
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]],
    ) -> None:
        """Each distinct phase of the cases' workloads, once, in workload order; for a PP
        deployment with the stage probe, each stage's busy time over the phase too."""
        for c in cases:
            if c.pooling:
                continue
            for ph in c.phases:
                key = _phase_key(ph, c.compare)
                if key in phases:
                    continue
                self.progress("phase", c, f"phase {ph.name} ({ph.kind}, {len(ph.requests)} requests)")
                say = functools.partial(self.progress, "phase", c)
                phases[key] = measure_phase(live, ph, c.compare, c.pp, key.text, c.workload_dir, say)

    def _check_live(
        self,
        live: LiveDeployment,
        cases: list[ResolvedCase],
        obs: Observation,
        pattern: str | None,
        outputs: dict[RequestsKey, Outputs],
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]],
        scores: dict[ScoreKey, dict[str, Any]],
    ) -> None:
        first = cases[0]
        first_request = any(c.expectation.phase == "first-request" for c in cases)
        # every PP stage's forward time over the sequential requests (and, where the suite asks,
        # the partition-tuning advice from it)
        timed = first.pp > 1 and not first_request and start_timing(live, obs)
        tuning = first.partition_tuning and timed
        t_req = time.monotonic()
        for c in cases:
            if c.requests in outputs:
                continue
            result, problem, line = watch_request(
                live,
                functools.partial(collect, live, c.accuracy, c.compare, c.pooling),
                c.request_timeout_s,
                pattern,
            )
            if problem:
                obs.request_error = problem
                obs.failed_phase = "first-request"
                obs.failed_after_s = round(time.monotonic() - t_req, 1)
                if line is not None:
                    obs.expected_error_line = line
                    obs.expected_error_after_s = obs.failed_after_s
                return
            outputs[c.requests] = result
        if first_request:
            return
        read_partition(live, obs)
        if timed:
            probe.record_step_times(live, obs)
        if tuning and obs.partition:
            obs.tuning = stage_costs(live, obs)
        self._run_phases(live, cases, phases)
        for name in sorted(first.checks & LIVE_CHECKS.keys()):
            obs.feature_checks[name] = FeatureCheck.of(LIVE_CHECKS[name](live))
        self._scores(live, cases, scores)

    def _scores(self, live: LiveDeployment, cases: list[ResolvedCase], scores: dict[ScoreKey, dict[str, Any]]) -> None:
        """The task score of the deployment, once per distinct score a case's reference asks for."""
        refs = [c for c in cases if c.expectation.kind in NEEDS_REFERENCE and c.reference.spec.score is not None]
        if not refs:
            return
        from harness.check.scores.evaluate import ScoreError, evaluate_live

        for c in refs:
            spec, key = c.reference.spec.score, _score_key(c)
            if key in scores or spec is None:
                continue
            try:
                scores[key] = evaluate_live(
                    live, spec, c.reference.base_dir, live.log_dir / "score", c.request_timeout_s
                )
            except ScoreError as err:
                scores[key] = {"error": str(err)}

    def _per_case(
        self,
        rc: ResolvedCase,
        shared: Observation,
        paths: dict[str, Path],
        ref: ReferenceResult | None,
        outputs: dict[RequestsKey, Outputs],
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]],
        scores: dict[ScoreKey, dict[str, Any]],
    ) -> Observation:
        obs = shared.model_copy(update={"silent_disable": []}, deep=True)
        exp, case = rc.expectation, rc.case
        bounds = rc.stage_bounds
        if obs.stages is not None and bounds is not None:
            obs.stages.max_last_stage_memory_ratio = bounds.max_last_stage_memory_ratio
            obs.stages.max_step_time_ratio = bounds.max_step_time_ratio
            obs.stages.tapped_stage = bounds.tapped_stage
        if rc.partition_expected is not None:
            obs.partition_expected = [list(r) for r in rc.partition_expected]
        if exp.kind == "rejected" and exp.error and obs.expected_error_line is None:
            line = logs.search_errors(paths, exp.error)
            if line:
                obs.expected_error_line = line
                obs.expected_error_after_s = shared.failed_after_s
        obs.silent_disable += logs.warnings_matching(paths, list(rc.silent_disable))
        doc = case.attrs.get("partition_doc_error")
        if doc and not case.attrs.get("partition_error"):
            obs.notes.append(
                f"documentation disagrees: the Ascend guide's rule rejects this partition "
                f"({doc}); vLLM's own partition check accepts it (the outcome says what the "
                f"server then did)"
            )
        if ref is not None and shared.ready and not shared.request_error:
            self._accuracy(rc, ref, obs, outputs, scores)
        if shared.ready and not shared.request_error and not rc.pooling:
            self._phase_records(rc, ref, obs, phases)
        return obs

    def _phase_records(
        self,
        rc: ResolvedCase,
        ref: ReferenceResult | None,
        obs: Observation,
        phases: dict[PhaseKey, tuple[PhaseOutputs, dict[str, Any]]],
    ) -> None:
        """Each phase of the case against the reference's answers to the same requests."""
        judged = _as_judged(rc.compare, ref)
        theirs = ref.outputs.phases if ref is not None and ref.outputs is not None else {}
        for ph in rc.phases:
            ran = phases.get(_phase_key(ph, rc.compare))
            if ran is None:
                continue
            got, stages = ran
            other = theirs.get(ph.name)
            if other is not None and other.error and ref is not None and not obs.reference_error:
                obs.reference_error = f"reference, phase {ph.name}: {other.error}"
            obs.workload.append(phase_record(ph, judged, got, other if other and not other.error else None, stages))

    def _accuracy(
        self,
        rc: ResolvedCase,
        ref: ReferenceResult,
        obs: Observation,
        outputs: dict[RequestsKey, Outputs],
        scores: dict[ScoreKey, dict[str, Any]],
    ) -> None:
        obs.reference = dict(ref.evidence)
        if ref.error:
            obs.reference_error = ref.error
            return
        got = outputs.get(rc.requests)
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
            from harness.check.scores.evaluate import judge_score

            measured = scores.get(_score_key(rc)) or {}
            if "error" in measured or "value" not in measured:
                obs.score = ScoreVerdict(ok=False, detail=f"task score failed: {measured.get('error', 'not measured')}")
            else:
                verdict = judge_score(measured["value"], ref.score, spec)
                obs.score = ScoreVerdict.of(verdict | {"task": measured.get("task"), "metric": measured.get("metric")})


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

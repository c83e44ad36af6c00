"""Observing one deployment: launch it, wait for it, ask it what the cases' claims need, read
what the workers built, and take it down — then one Observation per case it serves."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.cases.partition import stage_ranges
from harness.cases.workload import PhasePlan, plan_workload, stage_bounds_of, workload_dir
from harness.check import logs
from harness.check.effective import read as effective
from harness.check.features import LIVE_CHECKS
from harness.check.references.runs import ReferenceResult, ReferenceRuns
from harness.check.scores.aisbench_perf import measure_phase_perf
from harness.check.serving.launcher import Launcher
from harness.check.serving.live import LiveDeployment
from harness.check.serving.watch import watch_request
from harness.check.stages import probe
from harness.check.stages.probe import read_partition, stage_costs, start_timing
from harness.check.traffic.compare import Outputs, collect, compare_outputs
from harness.check.traffic.evidence import phase_record
from harness.check.traffic.phases import PhaseOutputs, run_phase
from harness.matrix.load import Matrix
from harness.matrix.schema import Compare
from harness.outcomes import NEEDS_REFERENCE, Kind
from harness.plan.cluster import Cluster
from harness.plan.deployment import plan
from harness.plan.launch import Deployment
from harness.plan.reference import resolve
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


class Observer:
    def __init__(
        self,
        m: Matrix,
        cluster: Cluster,
        run_dir: Path,
        launcher: Launcher,
        references: ReferenceRuns,
        progress: Callable[[str, Case | None, str], None],
    ):
        self.m = m
        self.cluster = cluster
        self.run_dir = run_dir
        self.launcher = launcher
        self.references = references
        self.progress = progress

    def observe(self, d: Deployment, cases: list[Case]) -> tuple[Deployment, dict[str, Observation]]:
        """Launch ``d`` once for all of ``cases``; the deployment as really launched, and each case's observation."""
        suite = self.m.suite(cases[0].suite)
        obs = Observation()
        rejects = [c.expectation.error for c in cases if c.expectation.kind is Kind.REJECTED and c.expectation.error]
        pattern = "|".join(f"(?:{r})" for r in rejects) or None
        outputs: dict[str, Outputs] = {}
        phases: dict[str, tuple[PhaseOutputs, dict[str, Any]]] = {}

        def replan(placement: Any, ports: Any) -> Deployment:
            return replace(plan(self.m, cases[0], self.cluster, placement=placement, ports=ports), case_ids=d.case_ids)

        self.progress("launch", cases[0], f"{len(cases)} case(s) on one deployment")
        with self.launcher.serve(replan, d.placement, cases[0].id, self.run_dir / "logs" / d.key) as live:
            state, elapsed = live.wait_ready(suite.startup_timeout_s)
            obs.exit_codes = live.exit_codes()
            if state == "ready":
                obs.ready, obs.ready_s = True, round(elapsed, 1)
                effective.observe(live, self.m, [f for c in cases for f in c.features], obs)
                self._check_live(live, cases, obs, pattern, outputs, phases)
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
        return real, {c.id: self._per_case(c, obs, paths, refs.get(c.id), outputs, phases) for c in cases}

    def _asked_ids(self, case: Case, outputs: dict[str, Outputs]) -> list[list[int]] | None:
        got = outputs.get(self._requests(case)[0])
        return got.id_prompts if got is not None else None

    def _phase_key(self, plan: PhasePlan, compare: Compare) -> str:
        sampling = [compare.top_logprobs, compare.temperature, compare.seed]
        return json.dumps([plan.to_json(), sampling], sort_keys=True)

    def _run_phases(
        self, live: LiveDeployment, cases: list[Case], phases: dict[str, tuple[PhaseOutputs, dict[str, Any]]]
    ) -> None:
        """Each distinct phase of the cases' workloads, once, in workload order; for a PP
        deployment with the stage probe, each stage's busy time over the phase too."""
        pp = self.m.topologies[cases[0].topology].pp
        for c in cases:
            if self.m.pools(c.features):
                continue
            compare = self._requests(c)[1]
            for ph in plan_workload(self.m, c):
                key = self._phase_key(ph, compare)
                if key in phases:
                    continue
                self.progress("phase", c, f"phase {ph.name} ({ph.kind}, {len(ph.requests)} requests)")
                say = functools.partial(self.progress, "phase", c)
                phases[key] = measure_phase(live, ph, compare, pp, key, workload_dir(self.m, c), say)

    def _requests(self, case: Case) -> tuple[str, Compare]:
        """What to ask for a case: its comparison's requests (cases sharing one shape share them)."""
        compare = resolve(self.m, case).compare
        return json.dumps([compare.model_dump(), self.m.pools(case.features)], sort_keys=True), compare

    def _check_live(
        self,
        live: LiveDeployment,
        cases: list[Case],
        obs: Observation,
        pattern: str | None,
        outputs: dict[str, Outputs],
        phases: dict[str, tuple[PhaseOutputs, dict[str, Any]]],
    ) -> None:
        suite = self.m.suite(cases[0].suite)
        case = cases[0]
        first_request = any(c.expectation.phase == "first-request" for c in cases)
        # every PP stage's forward time over the sequential requests (and, where the suite asks,
        # the partition-tuning advice from it)
        timed = self.m.topologies[case.topology].pp > 1 and not first_request and start_timing(live, obs)
        tuning = suite.partition_tuning and timed
        t_req = time.monotonic()
        pooling = self.m.pools(case.features)
        for c in cases:
            key, compare = self._requests(c)
            if key in outputs:
                continue
            result, problem, line = watch_request(
                live,
                functools.partial(collect, live, suite.accuracy, compare, pooling),
                suite.request_timeout_s,
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
            outputs[key] = result
        if first_request:
            return
        read_partition(live, obs)
        if timed:
            probe.record_step_times(live, obs)
        if tuning and obs.partition:
            obs.tuning = stage_costs(live, obs)
        self._run_phases(live, cases, phases)
        for name in sorted(self.m.checks_of(case.features) & LIVE_CHECKS.keys()):
            obs.feature_checks[name] = FeatureCheck.of(LIVE_CHECKS[name](live))
        self._scores(live, cases, obs)

    def _scores(self, live: LiveDeployment, cases: list[Case], obs: Observation) -> None:
        """The task score of the deployment, once per distinct score a case's reference asks for."""
        refs = [resolve(self.m, c) for c in cases if c.expectation.kind in NEEDS_REFERENCE]
        specs = {json.dumps(r.spec.score.model_dump(), sort_keys=True): r for r in refs if r.spec.score is not None}
        if not specs:
            return
        from harness.check.scores.evaluate import ScoreError, evaluate_live

        suite = self.m.suite(cases[0].suite)
        for key, r in specs.items():
            assert r.spec.score is not None
            try:
                obs.scores[key] = evaluate_live(
                    live, r.spec.score, r.base_dir, live.log_dir / "score", suite.request_timeout_s
                )
            except ScoreError as err:
                obs.scores[key] = {"error": str(err)}

    def _per_case(
        self,
        case: Case,
        shared: Observation,
        paths: dict[str, Path],
        ref: ReferenceResult | None,
        outputs: dict[str, Outputs],
        phases: dict[str, tuple[PhaseOutputs, dict[str, Any]]],
    ) -> Observation:
        obs = shared.model_copy(update={"silent_disable": [], "scores": {}}, deep=True)
        exp = case.expectation
        topo = self.m.topologies[case.topology]
        bounds = stage_bounds_of(self.m, case)
        if obs.stages is not None and bounds is not None:
            obs.stages.max_last_stage_memory_ratio = bounds.max_last_stage_memory_ratio
            obs.stages.max_step_time_ratio = bounds.max_step_time_ratio
            obs.stages.tapped_stage = bounds.tapped_stage
        if case.attrs["layers"] and topo.pp > 1 and not case.attrs["partition_error"]:
            rng = stage_ranges(case.attrs["layers"], topo.pp, None if case.partition == "auto" else case.partition)
            obs.partition_expected = [list(r) for r in rng]
        if exp.kind == "rejected" and exp.error and obs.expected_error_line is None:
            line = logs.search_errors(paths, exp.error)
            if line:
                obs.expected_error_line = line
                obs.expected_error_after_s = shared.failed_after_s
        for f in case.features:
            obs.silent_disable += logs.warnings_matching(paths, self.m.features[f].silent_disable)
        doc = case.attrs.get("partition_doc_error")
        if doc and not case.attrs.get("partition_error"):
            obs.notes.append(
                f"documentation disagrees: the Ascend guide's rule rejects this partition "
                f"({doc}); vLLM's own partition check accepts it (the outcome says what the "
                f"server then did)"
            )
        if ref is not None and shared.ready and not shared.request_error:
            self._accuracy(case, ref, obs, shared, outputs)
        if shared.ready and not shared.request_error and not self.m.pools(case.features):
            self._phase_records(case, ref, obs, phases)
        return obs

    def _phase_records(
        self,
        case: Case,
        ref: ReferenceResult | None,
        obs: Observation,
        phases: dict[str, tuple[PhaseOutputs, dict[str, Any]]],
    ) -> None:
        """Each phase of the case against the reference's answers to the same requests."""
        compare = self._requests(case)[1]
        judged = _as_judged(compare, ref)
        theirs = ref.outputs.phases if ref is not None and ref.outputs is not None else {}
        for ph in plan_workload(self.m, case):
            ran = phases.get(self._phase_key(ph, compare))
            if ran is None:
                continue
            got, stages = ran
            other = theirs.get(ph.name)
            if other is not None and other.error and ref is not None and not obs.reference_error:
                obs.reference_error = f"reference, phase {ph.name}: {other.error}"
            obs.workload.append(phase_record(ph, judged, got, other if other and not other.error else None, stages))

    def _accuracy(
        self, case: Case, ref: ReferenceResult, obs: Observation, shared: Observation, outputs: dict[str, Outputs]
    ) -> None:
        obs.reference = dict(ref.evidence)
        if ref.error:
            obs.reference_error = ref.error
            return
        got = outputs.get(self._requests(case)[0])
        if ref.outputs is not None and got is not None:
            compare = _as_judged(ref.ref.compare, ref)
            accuracy = Comparison.of(compare_outputs(compare, ref.outputs, got, self.m.pools(case.features)))
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

            measured = shared.scores.get(json.dumps(spec.model_dump(), sort_keys=True)) or {}
            if "error" in measured or "value" not in measured:
                obs.score = ScoreVerdict(ok=False, detail=f"task score failed: {measured.get('error', 'not measured')}")
            else:
                verdict = judge_score(measured["value"], ref.score, spec)
                obs.score = ScoreVerdict.of(verdict | {"task": measured.get("task"), "metric": measured.get("metric")})


def _as_judged(compare: Compare, ref: ReferenceResult | None) -> Compare:
    """``compare`` as a case is judged with it: against a reference that ran without some of the
    case's output-preserving features, or with one the case does not run (a variant's
    ``reference_drafter``), logprobs within ``left_out_tolerance`` (tokens still equal)."""
    if ref is None or not (ref.evidence.get("features_left_out") or ref.evidence.get("features_added")):
        return compare
    if compare.logprob_tolerance >= compare.left_out_tolerance:
        return compare
    return compare.model_copy(update={"logprob_tolerance": compare.left_out_tolerance})

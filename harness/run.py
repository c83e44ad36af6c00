"""Running a suite: check its plans, record the run, plan, launch each deployment once, check it,
judge every case, append results. Every entry point (``ppconf run``, the pytest plugin) runs a
suite through ``SuiteRun``, so each gets the plan check, run.json, resume and reaping alike.

Cases whose launches are identical share one deployment and every check runs on it; each
supported case is compared with its own reference (``harness.check.references.goldens``),
launched once per run and cached. By default one deployment is live at a time; with
``max_parallel`` > 1 the deployments run side by side on the places the schedule gives them
(``harness.dispatch``), and the outcomes are the same.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from harness import safe_write
from harness.cases.case import Case
from harness.cases.expand import expand, select
from harness.check.context import RunContext
from harness.check.observe import Observer
from harness.check.references.runs import ReferenceRuns
from harness.check.serving.launcher import LIVE, Launcher, forget_left_behind, left_behind
from harness.check.serving.stack import layer_counts, probe_versions
from harness.check.verdict.judge import judge
from harness.check.verdict.record import make_result
from harness.launch import Deployment
from harness.matrix.load import Matrix
from harness.outcomes import NO_LAUNCH, Outcome
from harness.plan import config_check, weights
from harness.plan.cluster import Cluster
from harness.plan.launch import group_deployments
from harness.plan.reference import reference_expected
from harness.plan.resolved import Planner, ResolvedCase
from harness.plan.stacks import verify
from harness.preflight import plan_errors
from harness.progress import Event, EventKind, Sink, ignore
from harness.results import store
from harness.results.meta import now, record_versions, write_meta
from harness.results.result import Observation, Result
from harness.stacks.stack import Stack
from harness.target.versions import MACHINE, differences, without_models
from harness.target.zoo import default_cache_root
from harness.target.zoo_lora import ensure_zoo
from runners.errors import InfrastructureError
from runners.leftovers import reap_left_behind

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    matrix: Matrix
    suite: str
    cluster: Cluster
    run_dir: Path
    case_ids: list[str] | None = None
    select: str | None = None
    resume: bool = False
    reference_cache: Path | None = None
    cluster_ref: str | None = None  # the inventory as given (a file or a shipped name), for run.json
    max_parallel: int = 1  # deployments live at once, on the schedule's places (1: one after another)
    stack: Stack | None = None  # the stack the run is declared on (``ppconf run --stack``): probing verifies it
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


class PlansRefused(Exception):
    """The selected cases' launch plans have problems: nothing was launched."""

    def __init__(self, suite: str, errors: list[str]):
        self.errors = errors
        super().__init__(
            f"{len(errors)} problem(s) in the launch plans; nothing was launched "
            f"(`ppconf lint --plans --suite {suite}` shows them too)"
        )


class StackRefused(PlansRefused):
    """The nodes are not on the stack the run is declared on: nothing was launched."""

    def __init__(self, stack: Stack, errors: list[str]):
        self.errors = errors
        Exception.__init__(self, f"the nodes' probe does not show stack {stack}; nothing was launched")


@dataclass
class RunSummary:
    cases: int = 0
    launches: int = 0
    reference_launches: int = 0
    references_reused: int = 0
    skipped_finished: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(Outcome(o).fails_run for o, n in self.outcomes.items() if n)

    def counts(self) -> dict[str, int]:
        return {o: n for o, n in self.outcomes.items() if n}


class SuiteRun:
    def __init__(self, cfg: RunConfig, progress: Sink = ignore):
        self.cfg = cfg
        self.m = cfg.matrix
        self.suite = self.m.suite(cfg.suite)
        self.run_dir = cfg.run_dir
        self.progress = progress
        self.summary = RunSummary()
        self.versions: dict[str, dict[str, str]] = {}
        self.by_id: dict[str, Case] = {}
        self.plans_checked = False
        self._recording = threading.Lock()  # one writer of results, whichever thread judged them
        self.launcher = Launcher(
            cfg.cluster, cfg.run_dir, self.suite.request_timeout_s, stack=lambda node: self.versions.get(node, {})
        )
        self.planner = Planner(self.m, cfg.cluster)
        self.ctx = RunContext(
            self.planner,
            cfg.run_dir,
            self.launcher,
            lambda: self.versions,
            cfg.reference_cache,
            lambda kind, case, text: self.progress(Event(EventKind(kind), text, case)),
            str(cfg.stack) if cfg.stack else None,
        )
        self.references = ReferenceRuns(self.ctx)
        self.observer = Observer(self.ctx, self.references)

    def cases(self) -> list[Case]:
        return select(
            expand(self.m, self.cfg.suite, layer_counts(self.cfg.cluster)).cases,
            ids=self.cfg.case_ids,
            expr=self.cfg.select,
        )

    def check_plans(self) -> None:
        """Check the launch plans of the selected cases still to run against the engine (a
        resumed run whose cases are all finished checks none); ``PlansRefused`` names the
        problems."""
        todo = self._still_to_run(self.cases())
        errors = plan_errors(self.m, todo, self.cfg.cluster) if todo else []
        if errors:
            raise PlansRefused(self.cfg.suite, errors)
        self.plans_checked = True

    def check_stack(self, probed: dict[str, dict[str, str]] | None = None) -> None:
        """For a run declared on a stack: every node's probe shows it (``StackRefused`` if not)."""
        if self.cfg.stack is None:
            return
        errors = verify(self.cfg.stack, probed if probed is not None else probe_versions(self.cfg.cluster))
        if errors:
            raise StackRefused(self.cfg.stack, errors)

    def begin(self) -> list[Deployment]:
        """Start (or resume) the run: refuse plans with problems (``PlansRefused``), write run.json
        for a fresh run, then ``prepare``."""
        if not self.plans_checked:
            self.check_plans()
        if not self.cfg.resume:  # the run adds the nodes' versions when it starts
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._write_meta()
        return self.prepare()

    def _write_meta(self) -> None:
        cfg = self.cfg
        ref = cfg.cluster_ref
        if ref and Path(ref).exists():
            ref = str(Path(ref).resolve())
        write_meta(
            self.run_dir,
            cfg.suite,
            cfg.cluster.name,
            [str(r.resolve()) for r in self.m.roots],
            {
                "argv": cfg.argv,
                "cases": cfg.case_ids,
                "select": cfg.select,
                "cluster_ref": ref,
                "network": cfg.cluster.network,
                "reference_cache": str(cfg.reference_cache) if cfg.reference_cache else None,
                **({"stack": str(cfg.stack)} if cfg.stack else {}),
            },
        )

    def prepare(self) -> list[Deployment]:
        """Plan the cases still to run and group them into deployments; records the cases that
        need no launch (unsupported here, or no claim) straight away."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        store.repair(self.run_dir)
        self.reap_left_behind()
        cases = self.cases()
        todo = self._still_to_run(cases)
        self.summary.cases = len(cases)
        self.summary.skipped_finished = len(cases) - len(todo)
        self.progress(Event(EventKind.START, f"{len(todo)} of {len(cases)} cases to run", total=len(todo)))
        self.by_id = {c.id: c for c in todo}
        runnable = [c for c in todo if c.expectation.kind not in NO_LAUNCH]
        # the cases expected to serve and be compared: a reference launch answers them ahead
        self.references.expect(self._resolvable([c for c in runnable if reference_expected(c)]))
        self._ensure_models(runnable)
        deployments = group_deployments([self.planner.deployment(c) for c in runnable])
        probed = probe_versions(self.cfg.cluster, models=tuple(sorted({d.model for d in deployments})))
        self.check_stack(probed)
        self.versions = without_models(probed)  # the stack; a run's checkpoints are not part of it
        if record_versions(self.run_dir, self.versions):
            self._notice("the nodes' stack changed since this run started; results record the stack each case ran on")
        machines = differences(self.versions, list(self.versions), keys=MACHINE)
        if machines:  # not refused: a cell may then differ by node, and the sign-off says so too
            self._notice("warning: the nodes are different machines and may run other kernels: " + "; ".join(machines))
        for c in todo:
            if c.expectation.kind in NO_LAUNCH:
                self.record(c, None, Observation(), now(), 0.0)
        return [d for d in deployments if self._one_stack(d, probed)]

    def _still_to_run(self, cases: list[Case]) -> list[Case]:
        """``cases`` less those a resumed run finished: a finished case is kept only if its claim
        and its launch plan are still the same."""
        if not self.cfg.resume:
            return cases
        planned = {c.id: self.planner.deployment(c).key for c in cases if c.expectation.kind not in NO_LAUNCH}
        current = {c.id: c.expectation.claim() for c in cases}
        done = {
            r.case
            for r in store.read(self.run_dir)
            if r.case in current and r.expectation.claim() == current[r.case] and r.plan_key == planned.get(r.case)
        }
        return [c for c in cases if c.id not in done]

    def _resolvable(self, cases: list[Case]) -> list[ResolvedCase]:
        """``cases`` resolved, leaving out any that cannot be (its own launch says why)."""
        out = []
        for c in cases:
            try:
                out.append(self.planner.resolved(c))
            except Exception:  # noqa: BLE001 — reported when the case itself is observed
                log.debug("case %s not resolved ahead", c.id, exc_info=True)
        return out

    def _one_stack(self, d: Deployment, probed: dict[str, dict[str, str]]) -> bool:
        """Whether every node ``d`` uses runs the same stack and holds the same weights; if not,
        its cases are ERROR before anything launches, naming the nodes and their values."""
        differ = differences(probed, [l.node for l in d.launches], d.model)
        if not differ:
            return True
        why = "the nodes of this deployment run different stacks (the guide requires one on every node): "
        for c in (self.by_id[i] for i in d.case_ids):
            # with the plan, so the record keeps each node's stack; no plan key: a resume runs it again
            self.record(c, d, Observation(infra_error=why + "; ".join(differ)), now(), 0.0)
        return False

    def record(
        self,
        case: Case,
        d: Deployment | None,
        obs: Observation,
        started: str,
        duration: float,
        plan_key: str | None = None,
        harness_error: str | None = None,
    ) -> Result:
        with self._recording:  # one writer, whichever thread judged the case
            if self.launcher.stopping.is_set():  # interrupted mid-check: not a verdict, a resume runs it
                raise KeyboardInterrupt
            if d is not None:
                self.launcher.redactor.learn(d)
            result = make_result(self.ctx, case, d, obs, started, duration, plan_key, harness_error)
            store.append(self.run_dir, result.to_json(), self.launcher.redactor)
            outcome = result.outcome.value
            self.summary.outcomes[outcome] = self.summary.outcomes.get(outcome, 0) + 1
            self.progress(Event(EventKind.RESULT, result.reason, case, outcome=outcome))
            return result

    def execute(self, d: Deployment) -> list[Result]:
        """Launch one deployment, check it, judge and record each of its cases. An infrastructure
        error is retried once; product failures and harness faults are never retried."""
        results = self._execute_once(d)
        infra = [r for r in results if r.outcome is Outcome.ERROR and r.observation.infra_error]
        if infra:
            with self._recording:  # the retry's verdict replaces these in the summary (both stay in the results)
                for r in results:
                    self.summary.outcomes[r.outcome.value] -= 1
            self.progress(
                Event(
                    EventKind.RETRY,
                    "infrastructure error; running the deployment once more",
                    self.by_id[d.case_ids[0]],
                    count=len(results),
                )
            )
            results = self._execute_once(d, retry_of=[r.reason for r in infra])
        return results

    def _execute_once(self, d: Deployment, retry_of: list[str] | None = None) -> list[Result]:
        """Launch ``d``, check it, judge and record its cases. A launch whose every case is claimed
        refused is first tried without a real launch (``_trial``: a configuration check, or dummy
        weights): the claimed refusal is its verdict; anything else is judged on a real launch."""
        group = [self.by_id[i] for i in d.case_ids]
        started, t0 = now(), time.monotonic()
        notes = [f"retried after an infrastructure error: {why}" for why in retry_of or []]
        trial = self._trial(d, group)
        if trial is not None:
            how, note, gave = trial
            real, observed, fault = self._observe(d, group, **how)
            verdicts = {c.id: judge(c.expectation, observed[c.id]).outcome for c in group}
            if fault is None and all(v is Outcome.XFAIL for v in verdicts.values()):
                for obs in observed.values():
                    obs.notes += [*notes, note]
                return [self.record(c, real, observed[c.id], started, time.monotonic() - t0, d.key) for c in group]
            notes.append(gave.format(", ".join(sorted({v.value for v in verdicts.values()}))))
        real, observed, fault = self._observe(d, group)
        for obs in observed.values():
            obs.notes += notes
        return [self.record(c, real, observed[c.id], started, time.monotonic() - t0, d.key, fault) for c in group]

    @staticmethod
    def _trial(d: Deployment, group: list[Case]) -> tuple[dict[str, bool], str, str] | None:
        """How a launch is tried before the real one, if it is: (``_observe``'s option, the note of
        a claimed refusal it shows, the note of anything else it gives, to format with the outcomes)."""
        claims = [c.expectation for c in group]
        if config_check.config_first(claims):
            gave = "as a configuration check (no server) the launch gave {}; judged on a real launch"
            return {"check_config": True}, config_check.NOTE, gave
        if weights.dummy_first(claims) and not weights.loads_dummy(d):
            gave = "with dummy weights (--load-format dummy) the launch gave {}; judged on the real weights"
            return {"dummy_weights": True}, weights.NOTE, gave
        return None

    def _observe(
        self, d: Deployment, group: list[Case], dummy_weights: bool = False, check_config: bool = False
    ) -> tuple[Deployment, dict[str, Observation], str | None]:
        """Launch ``d`` (with dummy weights, or as a configuration check, if asked) and observe its
        cases: (the deployment as launched, an observation per case, the traceback of a fault of
        ppconf itself or None)."""
        real, fault = d, None
        try:
            real, observed = self.observer.observe(
                d, [self.planner.resolved(c) for c in group], dummy_weights=dummy_weights, check_config=check_config
            )
        except KeyboardInterrupt:
            raise
        except (OSError, InfrastructureError) as err:  # a port, a file, a host: retried once
            observed = {c.id: Observation(infra_error=f"{type(err).__name__}: {err}") for c in group}
        except Exception as err:  # noqa: BLE001 — a fault of ppconf itself: ERROR with its traceback kept
            fault = traceback.format_exc()
            log.error("harness fault while checking %s", d.case_ids, exc_info=True)
            observed = {c.id: Observation(harness_error=f"{type(err).__name__}: {err}") for c in group}
        with self._recording:
            self.summary.launches = self.launcher.launches
            self.summary.reference_launches = self.references.launched
            self.summary.references_reused = self.references.reused
        return real, observed, fault

    def run(self) -> RunSummary:
        from harness.check.serving.watch import sigterm_as_interrupt

        with sigterm_as_interrupt():
            deployments = self.begin()
            if self.cfg.max_parallel <= 1 or len(deployments) <= 1:
                for d in deployments:
                    self.execute(d)
            else:
                self._run_parallel(deployments)
        return self.summary

    def _run_parallel(self, deployments: list[Deployment]) -> None:
        from harness.dispatch import run_parallel, scheduled
        from harness.plan.schedule import durations_from_results

        slots = scheduled(deployments, self.cfg.cluster, durations_from_results(self.run_dir))
        self._notice(f"{len(slots)} deployments, up to {self.cfg.max_parallel} at once, in the schedule's order")

        def running(labels: list[str]) -> None:
            self.progress(Event(EventKind.RUNNING, "; ".join(labels), count=len(labels)))

        run_parallel(slots, self.cfg.cluster, self.execute, self.launcher.stop_all, self.cfg.max_parallel, running)

    def reap_left_behind(self) -> None:
        """Stop the process groups a killed ppconf of this run left running; their record is
        forgotten only once every one is stopped (a node that could not be reached keeps it for
        the next resume)."""
        groups = left_behind(self.run_dir)
        if not groups:
            return
        reaped, problems = reap_left_behind(self.run_dir.resolve(), self.cfg.cluster, groups)
        if reaped:
            self._notice(f"stopped {len(reaped)} process group(s) an earlier ppconf left behind")
        for problem in problems:
            self._notice(problem)
        if problems:
            # a node that could not be reached: its groups stay recorded for the next resume
            self.launcher.unreaped = [g for g in groups if not _stopped_or_local(g, reaped)]
            safe_write.write_json(self.run_dir / LIVE, self.launcher.unreaped)
        else:
            forget_left_behind(self.run_dir)

    def _notice(self, text: str) -> None:
        log.info("%s", text)
        self.progress(Event(EventKind.NOTICE, text))

    def _ensure_models(self, cases: list[Case]) -> None:
        for name in self.planner.zoo_models(cases):
            self.progress(Event(EventKind.MODEL, f"tiny model {name}"))
            ensure_zoo(name, default_cache_root())


def _stopped_or_local(group: object, reaped: list[int]) -> bool:
    """Whether a recorded group needs no more reaping: this host's are stopped (or gone, or not
    the run's) by the time the reaper returns; another node's once the reaper there stopped it."""
    if not isinstance(group, dict) or group.get("reach", "local") == "local":
        return True
    return int(group.get("pgid", -1)) in reaped

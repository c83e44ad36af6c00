"""Getting a reference's outputs during a run: from this run, from the cache, from a golden, or
by launching it. Shared by every case that needs the same reference; a reference that cannot be
planned, started or read is remembered as such and named in the evidence of each case it leaves
unjudged."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.cases.workload import plan_workload
from harness.check.references.goldens import cache_key, load_golden, shape_for, stack_difference
from harness.check.serving.launcher import Launcher
from harness.check.traffic.ask import ask
from harness.check.traffic.compare import Outputs
from harness.launch import Deployment, PlanError
from harness.matrix.load import Matrix
from harness.plan.cluster import Cluster
from harness.plan.reference import (
    ReferenceUnavailable,
    ResolvedReference,
    plan_reference,
    reference_features,
    resolve,
)
from harness.results.store import write_json_atomic

log = logging.getLogger(__name__)


@dataclass
class ReferenceResult:
    ref: ResolvedReference
    outputs: Outputs | None = None  # None for a score-only reference
    error: str | None = None  # why there is nothing to compare with
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float | None:
        if self.outputs is not None and self.outputs.score is not None:
            return self.outputs.score.get("value")
        spec = self.ref.spec.score
        return spec.baseline if spec is not None else None


class ReferenceRuns:
    def __init__(
        self,
        m: Matrix,
        cluster: Cluster,
        run_dir: Path,
        launcher: Launcher,
        versions: Callable[[], dict[str, dict[str, str]]],
        cache_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
    ):
        self.m = m
        self.cluster = cluster
        self.run_dir = run_dir
        self.launcher = launcher
        self.versions = versions
        self.cache_dir = cache_dir
        self.progress = progress or (lambda text: None)
        self._memo: dict[str, Outputs | str] = {}
        self._source: dict[str, str] = {}  # how a launched key's outputs came, for its first case
        self.launched = 0
        self.reused = 0
        # deployments checked side by side (`ppconf run --max-parallel`) may want one reference at
        # once: its key's lock makes the second wait for the first's answers instead of launching
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}
        self._near = threading.local()

    @contextlib.contextmanager
    def near(self, nodes: Sequence[str]) -> Iterator[None]:
        """References launched by this thread inside the block try ``nodes`` first (their case's:
        the devices it just gave back) when they fit on one node."""
        self._near.nodes = tuple(nodes)
        try:
            yield
        finally:
            self._near.nodes = ()

    @contextlib.contextmanager
    def _holding(self, keys: Sequence[str]) -> Iterator[None]:
        with self._guard:
            locks = [self._locks.setdefault(k, threading.RLock()) for k in sorted(set(keys))]
        with contextlib.ExitStack() as stack:
            for lock in locks:  # in one global order: two threads never wait on each other
                stack.enter_context(lock)
            yield

    def for_case(self, case: Case, id_prompts: list[list[int]] | None = None) -> ReferenceResult:
        """The reference's answers to what the case was asked (``id_prompts``: the case's
        tokenisation of the sequential prompts, sent to a launched reference as they are)."""
        ref = resolve(self.m, case)
        result = ReferenceResult(
            ref, evidence={"reference": ref.describe(), "kind": ref.spec.kind, "compare": ref.compare.mode}
        )
        try:
            if ref.launches:
                result.outputs = self._launched(case, ref, result.evidence, id_prompts or None)
            elif ref.spec.kind == "golden":
                result.outputs = self._golden(case, ref, result.evidence)
        except ReferenceUnavailable as err:
            result.error = str(err)
        return result

    # ---- goldens ---------------------------------------------------------------------------------
    def _golden(self, case: Case, ref: ResolvedReference, evidence: dict[str, Any]) -> Outputs:
        path = ref.path(ref.spec.golden or "")
        data = load_golden(path)
        evidence["golden"] = str(path)
        shape = shape_for(self.m, case, ref)
        if data.get("request") != shape:
            raise ReferenceUnavailable(
                f"golden {path} answers other requests than this suite asks "
                f"(recorded {data.get('request')}, asked {shape}); record it again"
            )
        moved = stack_difference(data.get("versions") or {}, self.versions())
        evidence["golden_recorded"] = data.get("recorded")
        if moved:
            # a golden from another stack is evidence of another stack: say so wherever it is shown
            evidence["golden_stack_differs"] = moved
        return Outputs.from_json(data["outputs"])

    # ---- launched references ---------------------------------------------------------------------
    def _plan(self, case: Case, ref: ResolvedReference, id_prompts: list[list[int]] | None) -> tuple[Deployment, str]:
        try:
            planned = plan_reference(self.m, case, self.cluster, ref)
        except PlanError as err:
            raise ReferenceUnavailable(f"reference cannot be planned on cluster '{self.cluster.name}': {err}") from None
        score = ref.spec.score.model_dump() if ref.spec.score else None
        device_env = self.m.platforms[case.platform].device_env
        return planned, cache_key(
            planned, self.cluster, device_env, self.versions(), shape_for(self.m, case, ref), score, id_prompts
        )

    def _stored(self, key: str, case: Case) -> tuple[Outputs, str] | None:
        """Outputs kept under ``key`` by this run or the reference cache, and which of them."""
        path = self.run_dir / "references" / f"{key}.json"
        cached = self.cache_dir / f"{key}.json" if self.cache_dir else None
        for where, label in ((path, "this run"), (cached, "the reference cache")):
            if where is not None and where.is_file():
                try:
                    outputs = Outputs.from_json(json.loads(where.read_text())["outputs"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if where != path:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(where, path)
                log.info("reference %s of %s reused from %s", key, case.id, label)
                return outputs, label
        return None

    def prefetch(self, asks: list[tuple[Case, list[list[int]] | None]]) -> None:
        """Launch each reference deployment that several of ``asks`` need once, and ask it every
        distinct set of requests they make (cases of one deployment whose workloads or
        comparisons differ share their counterpart's launch). What is kept or cached is not
        launched; a single ask is left to ``for_case``."""
        groups: dict[str, list[_Ask]] = {}
        for case, ids in asks:
            ref = resolve(self.m, case)
            if not ref.launches:
                continue
            try:
                planned, key = self._plan(case, ref, ids or None)
            except ReferenceUnavailable:
                continue  # for_case says why
            if key in self._memo or self._stored(key, case) is not None:
                continue
            launch = json.dumps([(s.role, s.node, list(s.argv), sorted(s.env)) for s in planned.launches])
            members = groups.setdefault(launch, [])
            if key not in {a.key for a in members}:
                members.append(_Ask(case, ref, key, planned, ids or None))
        for members in groups.values():
            if len(members) > 1:
                with self._holding([a.key for a in members]):
                    if not any(a.key in self._memo for a in members):  # another thread launched it meanwhile
                        self._launch(members)

    def _launched(
        self, case: Case, ref: ResolvedReference, evidence: dict[str, Any], id_prompts: list[list[int]] | None
    ) -> Outputs:
        planned, key = self._plan(case, ref, id_prompts)
        evidence["key"] = key
        evidence["launch"] = [" ".join(s.argv) for s in planned.launches]
        kept = reference_features(self.m, case)
        left_out = [f for f in case.features if f not in kept]
        if left_out:
            # meant not to change outputs: the comparison also shows that they did not
            evidence["features_left_out"] = left_out
        added = [f for f in kept if f not in case.features]
        if added:  # the variant's reference_drafter, which the case does not run
            evidence["features_added"] = added
        with self._holding([key]):
            return self._known_or_launched(case, ref, evidence, id_prompts, planned, key)

    def _known_or_launched(
        self,
        case: Case,
        ref: ResolvedReference,
        evidence: dict[str, Any],
        id_prompts: list[list[int]] | None,
        planned: Deployment,
        key: str,
    ) -> Outputs:
        known = self._memo.get(key)
        if isinstance(known, str):
            raise ReferenceUnavailable(known)
        if known is not None:
            evidence["source"] = self._source.pop(key, "shared within this run")
            return known
        stored = self._stored(key, case)
        if stored is not None:
            with self._guard:
                self.reused += 1
            evidence["source"] = f"reused from {stored[1]}"
            self._memo[key] = stored[0]
            return stored[0]
        self._launch([_Ask(case, ref, key, planned, id_prompts)])
        return self._launched(case, ref, evidence, id_prompts)

    def _launch(self, asks: list[_Ask]) -> None:
        """One launch of the asks' reference deployment, asked each ask's requests in turn; every
        answer is kept under its own key (its error too, so no case launches it again)."""
        first = asks[0]
        suite = self.m.suite(first.case.suite)
        log_dir = self.run_dir / "logs" / "references" / first.key
        self.progress(f"reference of {first.case.id}: {first.ref.describe()}")
        with self._guard:
            self.launched += 1
        shared = f" (one launch answering {len(asks)} sets of requests)" if len(asks) > 1 else ""
        try:
            with self.launcher.serve(
                lambda pl, ports: plan_reference(self.m, first.case, self.cluster, first.ref, pl, ports),
                first.planned.placement,
                f"reference {first.key}",
                log_dir,
                prefer=getattr(self._near, "nodes", ()),
            ) as live:
                why = live.why_not_ready(suite.startup_timeout_s)
                if why:
                    raise ReferenceUnavailable(f"reference {why}")
                for a in asks:
                    self._memo[a.key] = self._ask(live, a, log_dir)
                    self._store(a)
                    self._source[a.key] = f"launched in this run{shared}"
        except ReferenceUnavailable as err:
            for a in asks:
                self._memo.setdefault(a.key, str(err))

    def _ask(self, live: Any, a: _Ask, log_dir: Path) -> Outputs | str:
        suite = self.m.suite(a.case.suite)
        try:
            pooling = self.m.pools(a.case.features)
            outputs = ask(live, suite.accuracy, a.ref.compare, pooling, plan_workload(self.m, a.case), a.ids)
        except Exception as err:  # noqa: BLE001 — the reference's own failure, named as such
            return f"reference requests failed: {type(err).__name__}: {err}"
        if a.ref.spec.score is not None:
            from harness.check.scores.evaluate import ScoreError, evaluate_live

            t0 = time.monotonic()
            try:
                outputs.score = evaluate_live(
                    live, a.ref.spec.score, a.ref.base_dir, log_dir / "score", suite.request_timeout_s
                )
            except ScoreError as err:
                return f"reference score failed: {err}"
            log.info("reference score of %s took %.1f s", a.case.id, time.monotonic() - t0)
        return outputs

    def _store(self, a: _Ask) -> None:
        outputs = self._memo.get(a.key)
        if not isinstance(outputs, Outputs):
            return
        record = {
            "key": a.key,
            "reference": a.ref.describe(),
            "case": a.case.id,
            "deployment": a.planned.to_json(),
            "versions": self.versions(),
            "request": shape_for(self.m, a.case, a.ref),
            "outputs": outputs.to_json(),
        }
        path = self.run_dir / "references" / f"{a.key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.cache_dir / f"{a.key}.json", record)


@dataclass(frozen=True)
class _Ask:
    """One set of requests asked of a reference launch, for the case that needs it."""

    case: Case
    ref: ResolvedReference
    key: str
    planned: Deployment
    ids: list[list[int]] | None

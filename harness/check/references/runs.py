"""Getting a reference's outputs during a run: from this run, from the cache, from a golden, or
by launching it. Shared by every case that needs the same reference; a reference that cannot be
planned, started or read is remembered as such and named in the evidence of each case it leaves
unjudged."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.check.context import RunContext
from harness.check.references.goldens import (
    cache_content,
    cache_key,
    entry_problem,
    load_golden,
    reference_entry,
    shape_for,
    stack_difference,
)
from harness.check.traffic.ask import ask
from harness.check.traffic.compare import Outputs
from harness.launch import Deployment, PlanError
from harness.plan.reference import ReferenceUnavailable, ResolvedReference
from harness.plan.resolved import ResolvedCase
from harness.safe_write import WriteRefused, write_json

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
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.run_dir = ctx.run_dir
        self.versions = ctx.versions
        self.cache_dir = ctx.reference_cache
        self._memo: dict[str, Outputs | str] = {}
        self.refused: list[str] = []  # kept references that did not prove what they answer
        self._source: dict[str, str] = {}  # how a launched key's outputs came, for its first case
        self.launched = 0
        self.reused = 0
        # deployments checked side by side (`ppconf run --max-parallel`) may want one reference at
        # once: its key's lock makes the second wait for the first's answers instead of launching
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}
        self._near = threading.local()
        self._pending: list[ResolvedCase] = []  # the run's cases still to be judged (``expect``)
        self._pending_launch: dict[str, str | None] = {}  # case id -> its reference launch's signature
        self.answered_ahead = 0  # sets of requests a launch answered for a case judged later

    def expect(self, cases: Sequence[ResolvedCase]) -> None:
        """The run's cases still to be judged. A reference launched for one case also answers the
        others that would launch the same reference deployment with the same sequential requests
        (their own phases and comparison under their own keys), so that deployment starts once
        in the run even when its cases are judged far apart and ask different things."""
        self._pending = [c for c in cases if c.reference.launches]

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

    def for_case(self, rc: ResolvedCase, id_prompts: list[list[int]] | None = None) -> ReferenceResult:
        """The reference's answers to what the case was asked (``id_prompts``: the case's
        tokenisation of the sequential prompts, sent to a launched reference as they are)."""
        ref = rc.reference
        result = ReferenceResult(
            ref, evidence={"reference": ref.describe(), "kind": ref.spec.kind, "compare": ref.compare.mode}
        )
        try:
            if ref.launches:
                result.outputs = self._launched(rc, result.evidence, id_prompts or None)
            elif ref.spec.kind == "golden":
                result.outputs = self._golden(rc, result.evidence)
        except ReferenceUnavailable as err:
            result.error = str(err)
        return result

    # ---- goldens ---------------------------------------------------------------------------------
    def _golden(self, rc: ResolvedCase, evidence: dict[str, Any]) -> Outputs:
        ref = rc.reference
        path = ref.path(ref.spec.golden or "")
        data = load_golden(path)
        evidence["golden"] = str(path)
        shape = shape_for(rc)
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
    def _plan(self, rc: ResolvedCase, id_prompts: list[list[int]] | None) -> tuple[Deployment, str]:
        planned, key, _ = self._planned(rc, id_prompts)
        return planned, key

    def _planned(self, rc: ResolvedCase, id_prompts: list[list[int]] | None) -> tuple[Deployment, str, dict[str, Any]]:
        """The reference launch of ``rc``, its cache key and what it computes (the key's content)."""
        ref, cluster = rc.reference, self.ctx.cluster
        try:
            planned = self.ctx.planner.reference(rc.case, ref)
        except PlanError as err:
            raise ReferenceUnavailable(f"reference cannot be planned on cluster '{cluster.name}': {err}") from None
        score = ref.spec.score.model_dump() if ref.spec.score else None
        content = cache_content(planned, cluster, rc.device_env, self.versions(), shape_for(rc), score, id_prompts)
        return planned, cache_key(content), content

    def _stored(self, key: str, rc: ResolvedCase, content: dict[str, Any]) -> tuple[Outputs, str] | None:
        """Outputs kept under ``key`` by this run or the reference cache, and which of them: only
        an entry that proves it answers what is asked (its key, launch, stack, requests and
        outputs' digest, every phase asked); any other is refused, said, and launched afresh."""
        path = self.run_dir / "references" / f"{key}.json"
        cached = self.cache_dir / f"{key}.json" if self.cache_dir else None
        phases = [p.name for p in rc.asked_phases]
        for where, label in ((path, "this run"), (cached, "the reference cache")):
            if where is None or where.is_symlink() or not where.is_file():
                continue
            try:
                data = json.loads(where.read_text())
                problem = entry_problem(data, key, content, phases)
                outputs = None if problem else Outputs.from_json(data["outputs"])
            except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
                problem = f"unreadable ({type(err).__name__})"
            if problem or outputs is None:
                why = f"kept reference {where} refused: {problem}; launching it afresh"
                log.warning("%s", why)
                self.ctx.say("reference", rc.case, why)
                self.refused.append(why)
                continue
            if where != path:  # a copy of its own in the run, written whole and never through a link
                try:
                    write_json(path, data, root=self.run_dir)
                except WriteRefused as err:  # evidence only: the verified entry still answers
                    log.warning("%s", err)
                    self.ctx.say("reference", rc.case, f"the run's copy not written: {err}")
            log.info("reference %s of %s reused from %s", key, rc.id, label)
            return outputs, label
        return None

    def prefetch(self, asks: list[tuple[ResolvedCase, list[list[int]] | None]]) -> None:
        """Launch each reference deployment that several of ``asks`` need once, and ask it every
        distinct set of requests they make (cases of one deployment whose workloads or
        comparisons differ share their counterpart's launch). What is kept or cached is not
        launched; a single ask is left to ``for_case``."""
        groups: dict[str, list[_Ask]] = {}
        for rc, ids in asks:
            if not rc.reference.launches:
                continue
            try:
                planned, key, content = self._planned(rc, ids or None)
            except ReferenceUnavailable:
                continue  # for_case says why
            if key in self._memo or self._stored(key, rc, content) is not None:
                continue
            members = groups.setdefault(_signature(planned), [])
            if key not in {a.key for a in members}:
                members.append(_Ask(rc, key, planned, ids or None, content))
        for members in groups.values():
            if len(members) > 1:
                with self._holding([a.key for a in members]):
                    if not any(a.key in self._memo for a in members):  # another thread launched it meanwhile
                        self._launch(members)

    def _launched(self, rc: ResolvedCase, evidence: dict[str, Any], id_prompts: list[list[int]] | None) -> Outputs:
        planned, key, content = self._planned(rc, id_prompts)
        evidence["key"] = key
        evidence["launch"] = [" ".join(s.argv) for s in planned.launches]
        features = rc.case.features
        left_out = [f for f in features if f not in rc.reference_features]
        if left_out:
            # meant not to change outputs: the comparison also shows that they did not
            evidence["features_left_out"] = left_out
        added = [f for f in rc.reference_features if f not in features]
        if added:  # the variant's reference_drafter, which the case does not run
            evidence["features_added"] = added
        with self._holding([key]):
            return self._known_or_launched(rc, evidence, id_prompts, planned, key, content)

    def _known_or_launched(
        self,
        rc: ResolvedCase,
        evidence: dict[str, Any],
        id_prompts: list[list[int]] | None,
        planned: Deployment,
        key: str,
        content: dict[str, Any],
    ) -> Outputs:
        known = self._memo.get(key)
        if isinstance(known, str):
            raise ReferenceUnavailable(known)
        if known is not None:
            evidence["source"] = self._source.pop(key, "shared within this run")
            return known
        stored = self._stored(key, rc, content)
        if stored is not None:
            with self._guard:
                self.reused += 1
            evidence["source"] = f"reused from {stored[1]}"
            self._memo[key] = stored[0]
            return stored[0]
        self._launch([_Ask(rc, key, planned, id_prompts, content)])
        return self._launched(rc, evidence, id_prompts)

    def _launch(self, asks: list[_Ask]) -> None:
        """One launch of the asks' reference deployment, asked each ask's requests in turn; every
        answer is kept under its own key (its error too, so no case launches it again)."""
        first = asks[0]
        log_dir = self.run_dir / "logs" / "references" / first.key
        ahead = self._companions(asks)
        asks = [*asks, *ahead]
        ahead_keys = {a.key for a in ahead}
        self.ctx.say("reference", None, f"reference of {first.rc.id}: {first.rc.reference.describe()}")
        with self._guard:
            self.launched += 1
        shared = f" (one launch answering {len(asks)} sets of requests)" if len(asks) > 1 else ""
        try:
            with self.ctx.launcher.serve(
                lambda pl, ports: self.ctx.planner.reference(first.rc.case, first.rc.reference, pl, ports),
                first.planned.placement,
                f"reference {first.key}",
                log_dir,
                prefer=getattr(self._near, "nodes", ()),
            ) as live:
                why = live.why_not_ready(first.rc.startup_timeout_s)
                if why:
                    raise ReferenceUnavailable(f"reference {why}")
                for a in asks:
                    try:
                        self._memo[a.key] = ask_reference(live, a.rc, a.rc.reference, log_dir, a.ids)
                    except ReferenceUnavailable as err:
                        self._memo[a.key] = str(err)
                    self._store(a)
                    self._source[a.key] = f"launched in this run{shared}"
                    if a.key in ahead_keys:
                        self._source[a.key] += f", asked ahead of the case with {first.rc.id}'s requests"
                        with self._guard:
                            self.answered_ahead += 1
        except ReferenceUnavailable as err:
            for a in asks:
                self._memo.setdefault(a.key, str(err))
        finally:
            for a in ahead:
                self._locks[a.key].release()

    def _companions(self, asks: list[_Ask]) -> list[_Ask]:
        """The asks of cases still to be judged that this launch can answer now: their reference
        launches alike, they send the same sequential requests as one of ``asks`` (whose
        tokenisation they then share), and nothing holds their key yet. Each comes with its key's
        lock held (released by ``_launch``); a key another thread holds is left to it."""
        launch = _signature(asks[0].planned)
        taken = {a.key for a in asks}
        ids_of = {a.rc.requests: a.ids for a in asks}
        found: list[_Ask] = []
        asking = {a.rc.id for a in asks}
        for rc in self._pending:
            if rc.requests not in ids_of or rc.id in asking or self._launch_of(rc) != launch:
                continue
            planned, key, content = self._planned(rc, ids_of[rc.requests])
            if key in taken or key in self._memo:
                continue
            with self._guard:
                lock = self._locks.setdefault(key, threading.RLock())
            if not lock.acquire(blocking=False):
                continue
            if key in self._memo or self._stored(key, rc, content) is not None:
                lock.release()
                continue
            taken.add(key)
            found.append(_Ask(rc, key, planned, ids_of[rc.requests], content))
        return found

    def _launch_of(self, rc: ResolvedCase) -> str | None:
        """The signature of ``rc``'s reference launch, planned once per run (None when it cannot
        be planned): each reference launch looks through every case still to be judged."""
        if rc.id not in self._pending_launch:
            try:
                self._pending_launch[rc.id] = _signature(self.ctx.planner.reference(rc.case, rc.reference))
            except PlanError:
                self._pending_launch[rc.id] = None
        return self._pending_launch[rc.id]

    def _store(self, a: _Ask) -> None:
        outputs = self._memo.get(a.key)
        if not isinstance(outputs, Outputs):
            return
        record = reference_entry(
            a.key,
            a.content,
            outputs,
            {
                "reference": a.rc.reference.describe(),
                "case": a.rc.id,
                "deployment": a.planned.to_json(),
                "versions": self.versions(),
            },
        )
        path = self.run_dir / "references" / f"{a.key}.json"
        write_json(path, record, root=self.run_dir)
        if self.cache_dir:
            try:
                write_json(self.cache_dir / f"{a.key}.json", record)
            except WriteRefused as err:  # the run goes on; the cache keeps what it holds
                log.warning("reference %s not kept in the cache: %s", a.key, err)
                self.ctx.say("reference", a.rc.case, f"not kept in the cache: {err}")


def ask_reference(
    live: Any, rc: ResolvedCase, ref: ResolvedReference, log_dir: Path, ids: list[list[int]] | None = None
) -> Outputs:
    """Ask a live launch what ``rc`` is compared on (its requests, its phases, and the task score
    ``ref`` declares): the one path a launched reference and a recorded golden take."""
    try:
        outputs = ask(live, rc.accuracy, ref.compare, rc.pooling, list(rc.phases), ids)
    except Exception as err:  # noqa: BLE001 — the reference's own failure, named as such
        raise ReferenceUnavailable(f"reference requests failed: {type(err).__name__}: {err}") from None
    if ref.spec.score is not None:
        from harness.check.scores.evaluate import ScoreError, evaluate_live

        t0 = time.monotonic()
        try:
            outputs.score = evaluate_live(live, ref.spec.score, ref.base_dir, log_dir / "score", rc.request_timeout_s)
        except ScoreError as err:
            raise ReferenceUnavailable(f"reference score failed: {err}") from None
        log.info("reference score of %s took %.1f s", rc.id, time.monotonic() - t0)
    return outputs


def _signature(planned: Deployment) -> str:
    """What makes two reference launches the same launch: each process's role, node, argv and env names."""
    return json.dumps([(s.role, s.node, list(s.argv), sorted(s.env)) for s in planned.launches])


@dataclass(frozen=True)
class _Ask:
    """One set of requests asked of a reference launch, for the case that needs it."""

    rc: ResolvedCase
    key: str
    planned: Deployment
    ids: list[list[int]] | None
    content: dict[str, Any]  # what the launch computes: its cache key's content

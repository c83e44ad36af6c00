"""Getting a reference's outputs during a run: from this run, from the cache, from a golden, or
by launching it. Shared by every case that needs the same reference; a reference that cannot be
planned, started or read is remembered as such and named in the evidence of each case it leaves
unjudged."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cases.case import Case
from harness.cases.workload import plan_workload
from harness.check.references.goldens import cache_key, load_golden, shape_for, stack_difference
from harness.check.serving.launcher import Launcher
from harness.check.traffic.ask import ask
from harness.check.traffic.compare import Outputs
from harness.matrix.load import Matrix
from harness.plan.cluster import Cluster
from harness.plan.launch import Deployment, PlanError
from harness.plan.reference import ReferenceUnavailable, ResolvedReference, plan_reference, resolve
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
        self.launched = 0
        self.reused = 0

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
    def _launched(
        self, case: Case, ref: ResolvedReference, evidence: dict[str, Any], id_prompts: list[list[int]] | None
    ) -> Outputs:
        try:
            planned = plan_reference(self.m, case, self.cluster, ref)
        except PlanError as err:
            raise ReferenceUnavailable(f"reference cannot be planned on cluster '{self.cluster.name}': {err}") from None
        score = ref.spec.score.model_dump() if ref.spec.score else None
        key = cache_key(planned, self.versions(), shape_for(self.m, case, ref), score, id_prompts)
        evidence["key"] = key
        evidence["launch"] = [" ".join(s.argv) for s in planned.launches]
        known = self._memo.get(key)
        if isinstance(known, str):
            raise ReferenceUnavailable(known)
        if known is not None:
            evidence["source"] = "shared within this run"
            return known
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
                self.reused += 1
                log.info("reference %s of %s reused from %s", key, case.id, label)
                evidence["source"] = f"reused from {label}"
                self._memo[key] = outputs
                return outputs
        try:
            outputs = self._launch(case, ref, key, planned, id_prompts)
        except ReferenceUnavailable as err:
            self._memo[key] = str(err)
            raise
        record = {
            "key": key,
            "reference": ref.describe(),
            "case": case.id,
            "deployment": planned.to_json(),
            "versions": self.versions(),
            "request": shape_for(self.m, case, ref),
            "outputs": outputs.to_json(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)
        if self.cache_dir:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.cache_dir / f"{key}.json", record)
        evidence["source"] = "launched in this run"
        self._memo[key] = outputs
        return outputs

    def _launch(
        self, case: Case, ref: ResolvedReference, key: str, planned: Deployment, id_prompts: list[list[int]] | None
    ) -> Outputs:
        suite = self.m.suite(case.suite)
        log_dir = self.run_dir / "logs" / "references" / key
        self.progress(f"reference of {case.id}: {ref.describe()}")
        self.launched += 1
        with self.launcher.serve(
            lambda pl, ports: plan_reference(self.m, case, self.cluster, ref, pl, ports),
            planned.placement,
            f"reference {key}",
            log_dir,
        ) as live:
            why = live.why_not_ready(suite.startup_timeout_s)
            if why:
                raise ReferenceUnavailable(f"reference {why}")
            try:
                pooling = self.m.pools(case.features)
                outputs = ask(live, suite.accuracy, ref.compare, pooling, plan_workload(self.m, case), id_prompts)
            except Exception as err:  # noqa: BLE001 — the reference's own failure, named as such
                raise ReferenceUnavailable(f"reference requests failed: {type(err).__name__}: {err}") from None
            if ref.spec.score is not None:
                from harness.check.scores.evaluate import ScoreError, evaluate_live

                t0 = time.monotonic()
                try:
                    outputs.score = evaluate_live(
                        live, ref.spec.score, ref.base_dir, log_dir / "score", suite.request_timeout_s
                    )
                except ScoreError as err:
                    raise ReferenceUnavailable(f"reference score failed: {err}") from None
                log.info("reference score of %s took %.1f s", case.id, time.monotonic() - t0)
        return outputs

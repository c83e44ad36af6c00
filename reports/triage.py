"""Failure triage across runs: every failure's text normalised (times, addresses, ports, pids,
paths, hashes and durations out), failures with the same normalised text put in one cluster
across cases, stacks and runs, each with a stable id (a digest of that text: the same failure
gets the same id in every run and every report), its first and last run, and whether it is the
environment's: a diagnosis rule marked ``environment`` (``matrices/diagnosis.yaml``: a port
taken, the host out of memory, devices or model files missing) matched first, by the record's
own diagnosis or by the text, so no one bisects the machine.

    clusters(runs, rules) -> [FailureCluster(id="F3a1c9e0b", signature="ValueError: sum(partitions)=3 …", …)]
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.matrix.schema import DiagnosisRule
from harness.outcomes import WAIVED
from harness.results import store as results
from harness.results.normalise import normalise
from harness.results.result import Result


def failure_text(r: Result) -> str:
    """What a failing record says failed: the root-cause line of the logs, else the harness's,
    the infrastructure's or the request's error, else the verdict's reason."""
    obs = r.observation
    if obs.root_cause is not None:
        return obs.root_cause.text
    for text in (obs.harness_error, obs.infra_error, obs.request_error):
        if text:
            return text.strip().splitlines()[-1]
    return r.reason


def cluster_id(signature: str) -> str:
    return "F" + hashlib.sha256(signature.encode()).hexdigest()[:9]


def environment(r: Result, text: str, rules: list[DiagnosisRule]) -> str | None:
    """The environment symptom the failure is, or None: the record's own diagnosis (made from its
    logs) when that rule is the environment's, else the first environment rule whose pattern
    matches the failure's text."""
    env = [rule for rule in rules if rule.environment]
    if r.diagnosis is not None and r.diagnosis.symptom in {rule.symptom for rule in env}:
        return r.diagnosis.symptom
    for rule in env:
        if any(re.search(p, text) for p in rule.patterns):
            return rule.symptom
    return None


@dataclass(frozen=True)
class Failure:
    run: str  # the run's directory
    run_id: str
    started: str  # when the run started (run.json), for first and last
    stack: str | None
    case: str
    outcome: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FailureCluster:
    id: str
    signature: str
    environment: str | None
    failures: list[Failure] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        return list(dict.fromkeys(f.run for f in sorted(self.failures, key=lambda f: (f.started, f.run))))

    @property
    def first(self) -> Failure:
        return min(self.failures, key=lambda f: (f.started, f.run))

    @property
    def last(self) -> Failure:
        return max(self.failures, key=lambda f: (f.started, f.run))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "signature": self.signature,
            "environment": self.environment,
            "count": len(self.failures),
            "cases": sorted({f.case for f in self.failures}),
            "stacks": sorted({f.stack for f in self.failures if f.stack}),
            "runs": self.runs,
            "first": self.first.to_json(),
            "last": self.last.to_json(),
            "failures": [f.to_json() for f in self.failures],
        }


def run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories: each path, or each stack's run of a run over several stacks."""
    out = []
    for p in paths:
        if (p / results.STACKS).is_file():
            from reports.stacks import columns

            out += [c.run_dir for c in columns(p) if (c.run_dir / results.RESULTS).is_file()]
        else:
            out.append(results.check_run_dir(p))
    return out


def failed(r: Result) -> bool:
    return r.outcome.fails_run or r.outcome in WAIVED


def clusters(paths: list[Path], rules: list[DiagnosisRule]) -> list[FailureCluster]:
    """The failures of every run under ``paths``, clustered; environment clusters first, then the
    largest."""
    found: dict[str, FailureCluster] = {}
    for run_dir in run_dirs(paths):
        meta = results.read_meta(run_dir)
        for r in results.read(run_dir):
            if not failed(r):
                continue
            text = failure_text(r)
            sig = normalise(text)
            c = found.setdefault(cluster_id(sig), FailureCluster(cluster_id(sig), sig, environment(r, text, rules)))
            c.failures.append(
                Failure(
                    str(run_dir),
                    str(meta.get("run_id") or run_dir),
                    str(meta.get("started") or r.started or ""),
                    r.stack or meta.get("stack"),
                    r.case,
                    r.outcome.value,
                    text,
                )
            )
    return sorted(found.values(), key=lambda c: (c.environment is None, -len(c.failures), c.id))


def text_report(found: list[FailureCluster]) -> str:
    lines = []
    for c in found:
        kind = f"environment ({c.environment})" if c.environment else "product"
        stacks = len({f.stack for f in c.failures if f.stack})
        lines.append(
            f"{c.id}  {kind}: {len(c.failures)} failure(s), {len({f.case for f in c.failures})} case(s), "
            f"{stacks} declared stack(s), {len(c.runs)} run(s); first {c.first.run} "
            f"({c.first.started}), last {c.last.run} ({c.last.started})"
        )
        lines.append(f"    {c.signature}")
        for case in sorted({f.case for f in c.failures}):
            outcomes = sorted(
                {f"{f.outcome}{' on ' + f.stack if f.stack else ''}" for f in c.failures if f.case == case}
            )
            lines.append(f"    - {case}: {', '.join(outcomes)}")
    return "\n".join(lines) if lines else "no failures"

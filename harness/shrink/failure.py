"""What "fails the same way" means for ``ppconf shrink``: the same outcome, and the same checks
failing with the same class of evidence.

A failure's **signature** is one entry per failing check (the judge's own list, so a check is
named as a waiver names it): ``check: class``. The class is what kind of evidence failed, with
every number taken out, since a smaller case has other counts and timings by design:

- a workload phase's answers that differ from the reference's: ``accuracy: a <kind> phase's
  answers differ`` (its kind, not how many differ);
- a phase's requests that failed: ``request: a <kind> phase's requests failed``;
- a startup failure or a crash: the root cause's exception with its message (an
  ``AssertionError`` is any failed assertion until its message says which), what differs
  between two occurrences taken out as triage does (``harness.results.normalise``), numbers too;
- any other check (a performance gate, a partition, a disabled feature): its text, numbers out.

A candidate fails the same way when its outcome is the original's and its signature is the
original's, entry for entry: a candidate that fails more checks, or fewer, or another check
(an ERROR of the harness) is not the same failure. A phase's "not exercised" is no failing check:
the judge reads it only where every check passed (then the case is ERROR, which says nothing of
the product), and its evidence is the engine's counters, which can miss a step that sampled
several sequences (steps that only prefilled a chunk count as steps too): a real run of the
planted case flagged a concurrent phase "never had two requests running at once" whose answers
differed by the fault that fires only in such steps.
"""

from __future__ import annotations

import re

from harness.check.verdict.judge import failed_checks
from harness.results.normalise import normalise
from harness.results.result import Result

_NUMBER = re.compile(r"\d+(\.\d+)?(e-?\d+)?")


def _class(text: str) -> str:
    return _NUMBER.sub("N", " ".join(text.split()))


def _crash(exception: str, text: str) -> str:
    """A root cause's class of evidence: its exception and message, without what varies."""
    text = _class(normalise(text))
    return text if text.startswith(exception) else f"{exception}: {text}"


def signature(r: Result) -> list[str]:
    """The failing checks of ``r`` and their class of evidence, sorted (see the module's text)."""
    obs = r.observation
    out = set()
    phases = {p.name: p.kind for p in obs.workload}
    for check, why in failed_checks(obs):
        m = re.match(r"phase (\S+): ", why)
        kind = phases.get(m[1]) if m else None
        if kind and check == "accuracy":
            out.add(f"accuracy: a {kind} phase's answers differ")
        elif kind and check == "request":
            out.add(f"request: a {kind} phase's requests failed")
        elif check in ("startup", "request") and obs.root_cause and obs.root_cause.exception:
            out.add(f"{check}: {_crash(obs.root_cause.exception, obs.root_cause.text)}")
        elif kind and m:
            out.add(f"{check}: a {kind} phase: {_class(why[m.end() :])}")
        else:
            out.add(f"{check}: {_class(why)}")
    if r.harness_error or obs.harness_error or obs.infra_error:
        out.add("harness: the harness or the infrastructure failed")
    return sorted(out)


def before_traffic(r: Result) -> bool:
    """Whether ``r`` failed before any request was sent: the engine exited or never became ready
    (a crash or a refusal at startup), so no traffic made it fail."""
    return r.observation.failed_phase == "startup"


def same_failure(original: tuple[str, list[str]], r: Result | None) -> tuple[bool | None, str]:
    """Whether ``r`` fails as the original (its outcome and signature) did, and why; None when
    ``r`` says nothing of the product (no record, an ERROR or a SKIP)."""
    outcome, sig = original
    if r is None:
        return None, "the run recorded no verdict"
    if r.outcome.value in ("ERROR", "SKIP"):
        return None, f"{r.outcome.value}: {r.reason}"
    got = signature(r)
    if r.outcome.value != outcome:
        return False, f"{r.outcome.value}, not {outcome}: {r.reason}"
    if got != sig:
        missing, extra = sorted(set(sig) - set(got)), sorted(set(got) - set(sig))
        parts = [f"no longer fails {'; '.join(missing)}"] if missing else []
        parts += [f"also fails {'; '.join(extra)}"] if extra else []
        return False, f"{outcome}, another failure: " + ", ".join(parts)
    return True, f"{outcome}, the same failure: {'; '.join(sig)}"

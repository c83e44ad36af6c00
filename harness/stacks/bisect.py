"""Bisecting one cell between a good and a bad stack: which engine version first broke it.

The versions are the stacks between the good one and the bad one, in release order, ends
included. Each version tried runs the case (``Trial``) once, and again to confirm it
(``confirm`` more times). The ends say what good and bad are: the good stack's outcome and the
bad stack's (PASS and FAIL for a regression; KNOWN_ISSUE and PASS, XFAIL and UNEXPECTED_ACCEPT for
a fix or a changed refusal). A version between them is

- GOOD: the good stack's outcome, every time;
- BAD: the bad stack's outcome, every time;
- SKIP: the harness or the infrastructure failed (ERROR, a launch refused, no record, a failure
  a diagnosis rule calls the environment's: ``reports.triage``), the case
  was not run (SKIP), the outcome changed on a retry, or it is a third outcome; a skipped version
  is neither good nor bad, and the search goes round it.

The ends are tried first: an end that cannot be judged, or a "bad" stack with the good one's
outcome, is the answer itself. The state (every trial, with its run's directory) is saved after each one in
``bisect.json``, so a bisect that stopped resumes where it was. The answer names the last good
version and the first bad one with both runs' evidence side by side, and the skipped versions
between them, if any (then the first bad is one of those or the one named).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.outcomes import Outcome
from harness.stacks.stack import Stack, StackError

GOOD, BAD, SKIP = "GOOD", "BAD", "SKIP"
STATE = "bisect.json"


@dataclass(frozen=True)
class Trial:
    """One run of the case on one stack: its outcome (None: no verdict was recorded), why, and
    where its evidence is."""

    outcome: str | None
    reason: str
    run_dir: str
    engine: str = ""  # the engine version the nodes' probe read
    duration_s: float | None = None
    repro: str | None = None
    environment: str | None = None  # the environment's failure it hit (a diagnosis rule's symptom)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        return cls(**data)


Run = Callable[[Stack, int], Trial]  # the stack, the try's number (1, 2, ...) -> its trial


def outcome_of(trials: list[Trial]) -> tuple[str | None, str]:
    """A version's outcome over its trials, and why; None when it says nothing of the product:
    the harness or the infrastructure failed, the case was not run, or a retry disagreed."""
    first = trials[0]
    if first.environment:
        return None, f"the environment failed ({first.environment}): {first.reason}"
    if first.outcome is None or first.outcome in (Outcome.ERROR, Outcome.SKIP):
        return None, f"{first.outcome or 'no verdict'}: {first.reason}"
    outcomes = [t.outcome for t in trials]
    if len(set(outcomes)) > 1:
        return None, f"changed on retry: {' then '.join(str(o) for o in outcomes)}"
    return first.outcome, f"{first.outcome} ({len(trials)} of {len(trials)}): {first.reason}"


def _key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+-]", version))


@dataclass
class Bisect:
    suite: str
    case: str
    good: Stack
    bad: Stack
    versions: list[str]  # release order, good first, bad last
    confirm: int = 1  # extra runs per version: a verdict must hold on each
    trials: dict[str, list[Trial]] = field(default_factory=dict)

    @classmethod
    def start(cls, suite: str, case: str, good: Stack, bad: Stack, versions: list[str], confirm: int = 1) -> Bisect:
        if good.engine != bad.engine:
            raise StackError(f"bisect between two engines ({good.engine}, {bad.engine}): give two versions of one")
        ordered = sorted(set(versions) | {good.version, bad.version}, key=_key)
        lo, hi = ordered.index(good.version), ordered.index(bad.version)
        if lo >= hi:
            raise StackError(f"the good stack {good} is not older than the bad one {bad}")
        return cls(suite, case, good, bad, ordered[lo : hi + 1], confirm)

    def stack(self, version: str) -> Stack:
        return Stack(self.good.engine, version)

    def verdicts(self) -> dict[str, tuple[str, str]]:
        """GOOD, BAD or SKIP, and why, for each version whose trials are done."""
        done = {v: outcome_of(t) for v, t in self.trials.items() if len(t) == 1 + self.confirm or _settled(t)}
        good = done.get(self.versions[0], (None, ""))[0]
        bad = done.get(self.versions[-1], (None, ""))[0]
        out = {}
        for v, (got, why) in done.items():
            if got is None:
                out[v] = (SKIP, why)
            elif v == self.versions[0] or got == good:
                out[v] = (GOOD, why)
            elif v == self.versions[-1] or got == bad:
                out[v] = (BAD, why)
            else:
                out[v] = (SKIP, f"{why}: neither the good stack's {good} nor the bad stack's {bad}")
        return out

    def bounds(self) -> tuple[int, int]:
        """The index of the last version known good and of the first known bad after it."""
        v = self.verdicts()
        bads = [i for i, x in enumerate(self.versions) if v.get(x, ("",))[0] == BAD]
        hi = bads[0] if bads else len(self.versions) - 1
        goods = [i for i, x in enumerate(self.versions[:hi]) if v.get(x, ("",))[0] == GOOD]
        return (goods[-1] if goods else 0), hi

    def next_version(self) -> str | None:
        """The version to try next; None when the answer is known."""
        v = self.verdicts()
        for end, want in ((self.versions[0], GOOD), (self.versions[-1], BAD)):
            if end not in v:
                return end
            if v[end][0] != want:
                return None  # the ends themselves are the answer
        lo, hi = self.bounds()
        open_ = [i for i in range(lo + 1, hi) if self.versions[i] not in v]
        if not open_:
            return None
        mid = (lo + hi) / 2
        return self.versions[min(open_, key=lambda i: (abs(i - mid), i))]

    def tries_of(self, version: str) -> int:
        return len(self.trials.get(version, []))

    def add(self, version: str, trial: Trial) -> None:
        self.trials.setdefault(version, []).append(trial)

    def answer(self) -> dict[str, Any]:
        v = self.verdicts()
        good, bad = self.versions[0], self.versions[-1]
        out: dict[str, Any] = {"suite": self.suite, "case": self.case, "good": str(self.good), "bad": str(self.bad)}
        out["tried"] = {x: {"verdict": v[x][0], "why": v[x][1]} for x in self.versions if x in v}
        if v.get(good, ("",))[0] != GOOD:
            out["answer"] = f"the good stack {self.good} cannot be judged here: {v[good][1]}"
            return out
        if v[bad][0] == SKIP:
            out["answer"] = f"the bad stack {self.bad} cannot be judged here: {v[bad][1]}"
            return out
        if v[bad][0] != BAD:
            out["answer"] = f"the bad stack {self.bad} does as the good one here: {v[bad][1]}; nothing to bisect"
            return out
        lo, hi = self.bounds()
        skipped = [x for x in self.versions[lo + 1 : hi] if v.get(x, ("",))[0] == SKIP]
        out["last_good"] = {
            "stack": str(self.stack(self.versions[lo])),
            "trials": _json(self.trials[self.versions[lo]]),
        }
        out["first_bad"] = {
            "stack": str(self.stack(self.versions[hi])),
            "trials": _json(self.trials[self.versions[hi]]),
        }
        out["skipped_between"] = [str(self.stack(x)) for x in skipped]
        first = self.stack(self.versions[hi])
        out["answer"] = (
            f"first bad: {first}; last good: {self.stack(self.versions[lo])}"
            if not skipped
            else f"first bad: one of {', '.join(out['skipped_between'])} (skipped) or {first}; "
            f"last good: {self.stack(self.versions[lo])}"
        )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "case": self.case,
            "good": str(self.good),
            "bad": str(self.bad),
            "versions": self.versions,
            "confirm": self.confirm,
            "trials": {v: _json(t) for v, t in self.trials.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Bisect:
        b = cls(
            data["suite"],
            data["case"],
            Stack.parse(data["good"]),
            Stack.parse(data["bad"]),
            list(data["versions"]),
            int(data["confirm"]),
        )
        b.trials = {v: [Trial.from_json(t) for t in ts] for v, ts in data["trials"].items()}
        return b


def _settled(trials: list[Trial]) -> bool:
    """A version needs no more runs: its first already says SKIP, or a retry already disagreed."""
    return outcome_of(trials[:1])[0] is None or len({t.outcome for t in trials}) > 1


def _json(trials: list[Trial]) -> list[dict[str, Any]]:
    return [t.to_json() for t in trials]


def load_or_start(directory: Path, fresh: Bisect) -> Bisect:
    """The bisect saved in ``directory`` if it is the same question, else ``fresh``; a saved one
    that asks another question is refused (give another directory)."""
    path = directory / STATE
    if not path.is_file():
        return fresh
    saved = Bisect.from_json(json.loads(path.read_text()))
    same = (saved.suite, saved.case, saved.good, saved.bad) == (fresh.suite, fresh.case, fresh.good, fresh.bad)
    if not same:
        raise StackError(
            f"{path} bisects {saved.case} of {saved.suite} between {saved.good} and {saved.bad}: "
            "give another --out for another question"
        )
    return saved


def save(directory: Path, b: Bisect, force: bool = False) -> None:
    """The state, replaced whole (``harness.safe_write``): a kill leaves the old state or the new;
    a state file ppconf did not write (an older ppconf's) is replaced only with ``force``."""
    safe_write.write_text(directory / STATE, json.dumps(b.to_json(), indent=2) + "\n", force=force)


def bisect(
    b: Bisect, run: Run, directory: Path, say: Callable[[str], None] = print, force: bool = False
) -> dict[str, Any]:
    """Run trials until the answer is known, saving the state after each one."""
    while (version := b.next_version()) is not None:
        while True:
            trials = b.trials.get(version, [])
            if trials and (_settled(trials) or len(trials) == 1 + b.confirm):
                break
            n = len(trials) + 1
            say(f"{b.stack(version)}: try {n} of {1 + b.confirm} ...")
            trial = run(b.stack(version), n)
            b.add(version, trial)
            save(directory, b, force)
            say(f"{b.stack(version)}: try {n}: {trial.outcome or 'no verdict'}: {trial.reason}")
        got = b.verdicts()[version]
        say(f"{b.stack(version)}: {got[0]} ({got[1]})")
    return b.answer()

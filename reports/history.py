"""History of a suite over its runs, read from the results index (harness.results.index):
history.html (self-contained) and history.md.

- every cell (family × feature row × column, as reports/cells.py builds them) and every case as
  a strip of outcomes over the last N runs, oldest to newest;
- the runs where a node's stack changed, and the versions that moved;
- for a cell or case that is red now, the first run of its red streak and the stack change
  between it and the run before;
- each case's flip rate over the window: changes between pass-like (PASS, XFAIL) and fail-like
  (FAIL, BAD_REJECT, UNEXPECTED_ACCEPT, KNOWN_ISSUE, FLAKY) outcomes over the judged runs
  minus one (SKIP and ERROR judge nothing about the product and are left out), with a
  suggestion to waive a case as `flaky`, or to drop a waiver that stopped firing;
- startup time and each PP stage's mean forward time per case, as sparklines, with the step
  where a value moved by more than a fifth.
"""

from __future__ import annotations

import datetime
import sqlite3
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from harness import safe_write
from harness.outcomes import FAIL_LIKE, FAILS_RUN, NOT_RUN_SYMBOL, PASS_LIKE, Kind, Outcome, severity, symbol
from harness.results import index
from harness.results.index import IndexedCase, IndexedRun
from harness.target.versions import Change, stack, stack_changes

from .cells import Entry
from .render import environment

# the legend reads from green to red: claims held, waived, skipped, then what fails a run
LEGEND_ORDER = (
    Outcome.PASS,
    Outcome.XFAIL,
    Outcome.KNOWN_ISSUE,
    Outcome.FLAKY,
    Outcome.SKIP,
    Outcome.FAIL,
    Outcome.BAD_REJECT,
    Outcome.UNEXPECTED_ACCEPT,
    Outcome.ERROR,
)
LEGEND = ", ".join([*(f"{o.symbol} {o.value}" for o in LEGEND_ORDER), f"{NOT_RUN_SYMBOL} not in the run"])

DEFAULT_LAST = 20
FLAKY_RATE = 0.3  # flip rate from which a case is suggested to be waived as flaky...
FLAKY_FLIPS = 2  # ...when it flipped at least this often (one flip is a regression or a fix, not flakiness)
DROP_AFTER = 3  # a waived case that passed in its last this-many runs: its waiver no longer fires
STEP = 0.2  # a trend moved when the median after a run differs from the median before by this fraction
SPARK = "▁▂▃▄▅▆▇█"


@dataclass
class RunView:
    run: IndexedRun
    changes: list[Change] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.run.started[:16].replace('T', ' ')} · {self.run.run_id[:8]}"

    @property
    def stacks(self) -> list[str]:
        return [f"{node}: {stack(v)}" for node, v in sorted(self.run.versions.items())]


@dataclass
class Mark:
    run: RunView
    outcome: str | None
    reason: str = ""

    @property
    def symbol(self) -> str:
        return symbol(self.outcome)


@dataclass
class Red:
    """Since when a strip is red, and what moved in the stack just before."""

    first: RunView
    reason: str
    previous: RunView | None  # the last run before the streak that ran it; None: red since its first run
    changes: list[Change]


@dataclass
class Strip:
    name: str  # case id, or "family / row / column" for a cell
    marks: list[Mark]  # the window, oldest first
    red: Red | None
    flips: int
    judged: int

    @property
    def flip_rate(self) -> float | None:
        return self.flips / (self.judged - 1) if self.judged > 1 else None


@dataclass
class Suggestion:
    case: str
    action: str  # "waive as flaky" | "drop the waiver"
    why: str


@dataclass
class Trend:
    case: str
    metric: str
    unit: str
    values: list[tuple[RunView, float | None]]
    step: tuple[RunView, float, float] | None  # the run where it moved, median before, median after
    deployments: list[str]  # the deployment keys it ran in over the window: a second one is a changed launch

    @property
    def shown(self) -> str:
        return ", ".join("·" if v is None else f"{v:g}" for _, v in self.values)

    @property
    def spark(self) -> str:
        """The values as one line of block characters (· where the run has none)."""
        present = [v for _, v in self.values if v is not None]
        lo, hi = (min(present), max(present)) if present else (0.0, 0.0)
        return "".join(
            "·" if v is None else SPARK[0 if hi == lo else round((v - lo) / (hi - lo) * (len(SPARK) - 1))]
            for _, v in self.values
        )

    def svg(self, width: int = 160, height: int = 28) -> dict:
        """Coordinates of an inline SVG sparkline: a polyline and one titled dot per run."""
        present = [v for _, v in self.values if v is not None]
        lo, hi = (min(present), max(present)) if present else (0.0, 1.0)
        span = (hi - lo) or 1.0
        dx = (width - 6) / max(len(self.values) - 1, 1)
        dots = [
            {
                "x": round(3 + i * dx, 1),
                "y": round(height / 2 if hi == lo else height - 3 - (v - lo) / span * (height - 6), 1),
                "title": f"{rv.label}: {v:g} {self.unit}",
                "step": self.step is not None and rv is self.step[0],
            }
            for i, (rv, v) in enumerate(self.values)
            if v is not None
        ]
        return {"width": width, "height": height, "dots": dots, "points": " ".join(f"{d['x']},{d['y']}" for d in dots)}


@dataclass
class SuiteHistory:
    suite: str
    runs: list[RunView]  # the window, oldest first
    total_runs: int
    cells: list[Strip]
    cases: list[Strip]
    suggestions: list[Suggestion]
    trends: list[Trend]

    @property
    def red(self) -> list[Strip]:
        return [s for s in self.cells + self.cases if s.red]


@dataclass
class History:
    suites: list[SuiteHistory]
    last: int

    @property
    def stack_changes(self) -> list[RunView]:
        """The runs of the windows where some node's stack changed, oldest first."""
        seen = {rv.run.run_id: rv for s in self.suites for rv in s.runs if rv.changes}
        return sorted(seen.values(), key=lambda rv: (rv.run.started, rv.run.run_id))


def _views(runs: list[IndexedRun]) -> dict[str, RunView]:
    """Every run with what changed on each of its nodes since that node's previous run (on the
    same cluster), whatever suite that was."""
    last: dict[tuple[str | None, str], dict] = {}
    views = {}
    for run in runs:
        before = {node: last[(run.cluster, node)] for node in run.versions if (run.cluster, node) in last}
        changes = [c for c in stack_changes(before, run.versions) if c.node in before]
        views[run.run_id] = RunView(run, changes)
        for node, v in run.versions.items():
            last[(run.cluster, node)] = v
    return views


def _kind(outcome: str | None) -> str | None:
    return "pass" if outcome in PASS_LIKE else "fail" if outcome in FAIL_LIKE else None


def _fails(outcome: str | None) -> bool:
    return outcome in FAILS_RUN


def _strip(name: str, series: list[Mark], last: int) -> Strip:
    """A strip of the window, with the red streak read over the whole series; red only when
    the newest run holds it and it failed there."""
    present = [m for m in series if m.outcome is not None]
    red = None
    if series and _fails(series[-1].outcome):
        i = len(present) - 1
        while i > 0 and _fails(present[i - 1].outcome):
            i -= 1
        previous = present[i - 1].run if i > 0 else None
        first = present[i].run
        changes = stack_changes(previous.run.versions, first.run.versions) if previous else []
        red = Red(first, present[i].reason, previous, changes)
    window = series[-last:]
    kinds = [k for k in (_kind(m.outcome) for m in window) if k]
    flips = sum(a != b for a, b in zip(kinds, kinds[1:], strict=False))
    return Strip(name, window, red, flips, len(kinds))


def _worst(recs: list[IndexedCase]) -> IndexedCase:
    return max(recs, key=lambda c: severity(c.outcome))


def _cell_name(c: IndexedCase) -> tuple[str, str, str]:
    e = Entry(**c.coordinates(), expectation=c.expectation)
    return c.family, e.row, e.column


def _suggest(strip: Strip, latest: IndexedCase, flaky_rate: float) -> Suggestion | None:
    rate = strip.flip_rate
    if latest.waiver != Kind.FLAKY and rate is not None and rate >= flaky_rate and strip.flips >= FLAKY_FLIPS:
        exp = latest.expectation
        rule = f" (its claim now: {exp.kind.value}" + (f", {exp.where})" if exp.where else ")")
        return Suggestion(
            strip.name,
            "waive as flaky",
            f"flipped between passing and failing {strip.flips} times in {strip.judged} judged runs "
            f"(rate {rate:.2f}){rule}; if it is not broken, add a rule `expect: flaky` with a link",
        )
    recent = [m for m in strip.marks if m.outcome is not None][-DROP_AFTER:]
    if latest.waiver and len(recent) == DROP_AFTER and all(m.outcome == Outcome.PASS for m in recent):
        exp = latest.expectation
        where = f" at {exp.where}" if exp.where else ""
        link = f" ({exp.link})" if exp.link else ""
        return Suggestion(
            strip.name,
            "drop the waiver",
            f"passed in each of its last {DROP_AFTER} runs under its {latest.waiver} waiver{link}: "
            f"the rule{where} no longer fires; claim it supported",
        )
    return None


def _step(values: list[tuple[RunView, float | None]], threshold: float) -> tuple[RunView, float, float] | None:
    """Where the series steps: the split into a before and an after that each sit closest to
    their own median; reported when the medians differ by ``threshold`` (a fraction) or more."""
    pts = [(rv, v) for rv, v in values if v is not None]

    def spread(vs: list[float]) -> float:
        mid = statistics.median(vs)
        return sum(abs(v - mid) for v in vs)

    splits = [(spread([v for _, v in pts[:k]]) + spread([v for _, v in pts[k:]]), k) for k in range(1, len(pts))]
    if not splits:
        return None
    k = min(splits)[1]
    before, after = statistics.median(v for _, v in pts[:k]), statistics.median(v for _, v in pts[k:])
    if before > 0 and abs(after - before) / before >= threshold:
        return pts[k][0], before, after
    return None


def _trends(case: str, window: list[tuple[RunView, IndexedCase | None]]) -> list[Trend]:
    out = []
    keys = list(dict.fromkeys(c.plan_key for _, c in window if c and c.plan_key))
    ready = [(rv, c.ready_s if c else None) for rv, c in window]
    if any(v is not None for _, v in ready):
        out.append(Trend(case, "startup", "s", ready, _step(ready, STEP), keys))
    stages = sorted({s[0] for _, c in window if c for s in c.stages})
    for k in stages:
        values = [(rv, next((s[2] for s in c.stages if s[0] == k), None) if c else None) for rv, c in window]
        if any(v is not None for _, v in values):
            out.append(Trend(case, f"stage {k} forward", "ms", values, _step(values, STEP), keys))
    return out


def suite_history(
    suite: str, runs: list[RunView], cases: list[IndexedCase], last: int, flaky_rate: float = FLAKY_RATE
) -> SuiteHistory:
    """The history of one suite from its runs (oldest first) and all their cases."""
    by_run: dict[str, dict[str, IndexedCase]] = {}
    for c in cases:
        by_run.setdefault(c.run_id, {})[c.case] = c
    case_ids = sorted({c.case for c in cases})
    case_strips, suggestions, trends = [], [], []
    for cid in case_ids:
        recs = [(rv, by_run.get(rv.run.run_id, {}).get(cid)) for rv in runs]
        if not any(c for _, c in recs[-last:]):
            continue  # not in the window: a case the suite no longer has
        series = [Mark(rv, c.outcome if c else None, c.reason if c else "") for rv, c in recs]
        strip = _strip(cid, series, last)
        case_strips.append(strip)
        latest = next(c for _, c in reversed(recs) if c)
        if (s := _suggest(strip, latest, flaky_rate)) is not None:
            suggestions.append(s)
        trends += _trends(cid, recs[-last:])
    cells: dict[tuple[str, str, str], dict[str, list[IndexedCase]]] = {}
    for c in cases:
        cells.setdefault(_cell_name(c), {}).setdefault(c.run_id, []).append(c)
    cell_strips = []
    for name in sorted(cells, key=lambda n: (n[0], n[1] != "PP", n[1], n[2])):
        series = []
        for rv in runs:
            group = cells[name].get(rv.run.run_id)
            worst = _worst(group) if group else None
            series.append(Mark(rv, worst.outcome if worst else None, f"{worst.case}: {worst.reason}" if worst else ""))
        if any(m.outcome for m in series[-last:]):
            cell_strips.append(_strip(" / ".join(name), series, last))
    return SuiteHistory(suite, runs[-last:], len(runs), cell_strips, case_strips, suggestions, trends)


def build(
    conn: sqlite3.Connection, last: int = DEFAULT_LAST, suite: str | None = None, flaky_rate: float = FLAKY_RATE
) -> History:
    views = _views(index.runs(conn))
    suites = [suite] if suite else sorted({rv.run.suite for rv in views.values()})
    out = []
    for name in suites:
        runs = [rv for rv in views.values() if rv.run.suite == name]
        out.append(suite_history(name, runs, index.cases(conn, name), last, flaky_rate))
    return History(out, last)


def render(history: History, out: Path, source: str, force: bool = False) -> tuple[Path, Path]:
    """Write history.md and history.html into ``out``; ``source`` names the index in the header."""
    safe_write.make_dir(out)
    ctx = {
        "h": history,
        "legend": LEGEND,
        "source": source,
        "made": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    md, html = out / "history.md", out / "history.html"
    safe_write.write_text(md, environment(False).get_template("history.md.j2").render(**ctx), force=force)
    safe_write.write_text(html, environment(True).get_template("history.html.j2").render(**ctx), force=force)
    return md, html


def write_history(
    index_path: Path,
    out: Path,
    last: int = DEFAULT_LAST,
    suite: str | None = None,
    flaky_rate: float = FLAKY_RATE,
    force: bool = False,
) -> tuple[Path, Path]:
    conn = index.connect(index_path, create=False)
    try:
        history = build(conn, last, suite, flaky_rate)
    finally:
        conn.close()
    if suite and not history.suites[0].runs:
        raise index.IndexFileError(f"{index_path}: no run of the suite {suite!r}")
    return render(history, out, str(index_path), force)

"""The results index: many runs in one SQLite file, so history needs no re-reading of every
results.jsonl.

    ppconf ingest runs/nightly-* --index runs/index.sqlite

A run is keyed by ``run_id``, the UUID its run.json got when it started (runs written before
that have none: the first 16 hex digits of sha256(started, suite, absolute path of the run
directory) stand in): ingesting a run again (after a resume added cases, by mistake, or a copy
of its directory) replaces that run's rows, never adds a second copy. Records are read through
the results store, so they are validated, one per case (the last repeat wins), with reasons
already masked.

The file is ppconf's own: ``PRAGMA application_id`` = ``APPLICATION_ID`` marks it (an index of
version 1 from before the mark, with its three tables, is marked when opened), and any other
SQLite database is refused, never given tables of its own. A file another writer holds locked
longer than ``BUSY_TIMEOUT_S`` is an ``IndexFileError`` saying so.

Schema (``PRAGMA user_version`` = ``VERSION``)::

    runs(run_id TEXT PRIMARY KEY,
         path TEXT,          -- the run directory, absolute, as ingested
         suite TEXT,         -- run.json's suite (else the records')
         started TEXT,       -- ISO 8601 in UTC, orders the runs
         cluster TEXT, network TEXT,     -- run.json's (NULL when it has none)
         versions TEXT,      -- JSON {node: {distribution: version}}: the stack the run started on
         ingested TEXT)      -- when this row was written
    cases(run_id TEXT REFERENCES runs ON DELETE CASCADE, case_id TEXT,
          suite, family, variant, topology, platform, partition TEXT,
          features TEXT,     -- JSON list, in the case's order
          expectation TEXT,  -- JSON: the claim the case was judged against
          waiver TEXT,       -- 'known-issue' | 'flaky' | NULL: the waiver kind of that claim
          outcome TEXT, reason TEXT, fails_run INTEGER,
          duration_s REAL, ready_s REAL,
          plan_key TEXT,     -- the deployment the case ran in (same launches, same key across runs)
          PRIMARY KEY (run_id, case_id))
    stages(run_id, case_id REFERENCES cases ON DELETE CASCADE, stage INTEGER, layers INTEGER,
           step_ms REAL, peak_mib REAL,   -- observation.tuning, where the case measured it
           PRIMARY KEY (run_id, case_id, stage))
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import safe_write
from harness.case_key import CaseKey
from harness.outcomes import WAIVER_KINDS
from harness.results import store
from harness.results.meta import run_stack
from harness.results.result import Expectation, Observation, RecordError

DEFAULT_INDEX = Path("runs") / "index.sqlite"
VERSION = 1
APPLICATION_ID = 0x70706366  # "ppcf"
TABLES = frozenset({"runs", "cases", "stages"})
BUSY_TIMEOUT_S = 5.0  # how long a write waits for another writer (a concurrent ingest) to finish

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, path TEXT NOT NULL, suite TEXT NOT NULL, started TEXT NOT NULL,
    cluster TEXT, network TEXT, versions TEXT NOT NULL, ingested TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cases (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, case_id TEXT NOT NULL,
    suite TEXT NOT NULL, family TEXT NOT NULL, variant TEXT NOT NULL, topology TEXT NOT NULL,
    platform TEXT NOT NULL, partition TEXT NOT NULL, features TEXT NOT NULL, expectation TEXT NOT NULL,
    waiver TEXT, outcome TEXT NOT NULL, reason TEXT NOT NULL, fails_run INTEGER NOT NULL,
    duration_s REAL, ready_s REAL, plan_key TEXT,
    PRIMARY KEY (run_id, case_id));
CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL, case_id TEXT NOT NULL, stage INTEGER NOT NULL, layers INTEGER NOT NULL,
    step_ms REAL, peak_mib REAL,
    PRIMARY KEY (run_id, case_id, stage),
    FOREIGN KEY (run_id, case_id) REFERENCES cases(run_id, case_id) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS runs_by_suite ON runs(suite, started);
CREATE INDEX IF NOT EXISTS cases_by_case ON cases(suite, case_id);
"""


class IndexFileError(ValueError):
    """An index file that cannot be opened or read as one; the message names the file."""


@dataclass(frozen=True)
class IndexedRun:
    run_id: str
    path: str
    suite: str
    started: str
    cluster: str | None
    network: str | None
    versions: dict[str, dict[str, str]]


class IndexedCase(CaseKey):
    """A case of one run as the index holds it."""

    run_id: str
    expectation: Expectation
    waiver: str | None
    outcome: str
    reason: str
    fails_run: bool
    duration_s: float | None
    ready_s: float | None
    plan_key: str | None
    # (stage, layers, step_ms, peak_mib) per PP stage, from observation.tuning
    stages: tuple[tuple[int, int, float | None, float | None], ...] = ()


@contextmanager
def answering(path: Path | str) -> Iterator[None]:
    """SQLite's errors on the index at ``path`` as one-line ``IndexFileError``s: a lock another
    writer holds, or a file that is not a database."""
    try:
        yield
    except sqlite3.OperationalError as err:
        if "locked" in str(err) or "busy" in str(err):
            raise IndexFileError(
                f"{path}: locked by another writer (another `ppconf ingest`?) for over {BUSY_TIMEOUT_S:g} s; "
                f"try again when it is done"
            ) from None
        raise IndexFileError(f"{path}: {err}") from None
    except sqlite3.DatabaseError as err:
        raise IndexFileError(f"{path}: not a results index ({err})") from None


def _file(conn: sqlite3.Connection) -> str:
    return next(row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main") or "the index"


def _claim(conn: sqlite3.Connection, path: Path) -> None:
    """Make ``conn``'s database an index of this version, or refuse one that is not ppconf's."""
    app, version = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("application_id", "user_version"))
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app not in (0, APPLICATION_ID) or (app == 0 and tables and not (version == 1 and TABLES <= tables)):
        held = f"its tables: {', '.join(sorted(tables))}" if tables else f"application_id {app:#x}"
        raise IndexFileError(
            f"{path}: an SQLite database that is not a ppconf results index ({held}); "
            f"give --index a new file or an index ppconf made"
        )
    if version not in (0, VERSION):
        raise IndexFileError(f"{path}: an index of schema version {version}; this ppconf reads version {VERSION}")
    with conn:
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {VERSION}")


def connect(path: Path, create: bool = True) -> sqlite3.Connection:
    """The index at ``path``, its schema in place. Without ``create``, a missing file is an error."""
    if not path.exists() and not create:
        raise IndexFileError(f"{path}: no such index; make it with `ppconf ingest RUN_DIR... --index {path}`")
    if path.is_symlink():  # SQLite would write through it
        raise IndexFileError(f"{path} is a symbolic link; ppconf writes nothing through it (give --index a file)")
    if path.exists() and not path.is_file():
        raise IndexFileError(f"{path} is not a file")
    try:
        safe_write.make_dir(path.parent)
    except safe_write.WriteRefused as err:
        raise IndexFileError(str(err)) from None
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        with answering(path):
            _claim(conn, path)
            conn.execute("PRAGMA foreign_keys = ON")
    except IndexFileError:
        conn.close()
        raise
    return conn


def _utc(text: str) -> str:
    """ISO 8601 in UTC, so that text order is time order (a naive time is taken as UTC)."""
    t = datetime.datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return t.astimezone(datetime.UTC).isoformat(timespec="seconds")


def run_id(meta: dict[str, Any], started: str, suite: str, run_dir: Path) -> str:
    """run.json's UUID; for a run from before it, derived from where and when the run was made."""
    if meta.get("run_id"):
        return str(meta["run_id"])
    key = "\0".join((_utc(started), suite, str(Path(run_dir).resolve())))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _stages(obs: Observation) -> list[tuple[int, int, float | None, float | None]]:
    stages = obs.tuning.stages if obs.tuning else []
    return [(s.stage, s.layers, s.step_ms, s.peak_mib) for s in stages]


def ingest(conn: sqlite3.Connection, run_dir: Path) -> tuple[IndexedRun, int, bool]:
    """Add (or replace) one run: its row, its cases, their stage timings. Returns the run, the
    number of cases and whether the run was in the index before."""
    store.check_run_dir(run_dir)
    meta = store.read_meta(run_dir)
    records = store.read(run_dir)
    started = meta.get("started") or min((r.started for r in records if r.started), default=None)
    if not started:
        raise store.RunDirError(
            f"{run_dir}: no start time (run.json has no 'started' and no record has one), "
            f"so the run cannot be placed in history"
        )
    suites = sorted({r.suite for r in records})
    suite = meta.get("suite") or (suites[0] if len(suites) == 1 else None)
    if not suite:
        raise store.RunDirError(
            f"{run_dir}: run.json names no suite and the records name {', '.join(suites) or 'none'}"
        )
    versions = run_stack(meta, records)
    run = IndexedRun(
        run_id(meta, started, suite, run_dir),
        str(Path(run_dir).resolve()),
        suite,
        _utc(started),
        meta.get("cluster"),
        meta.get("network"),
        versions,
    )
    with answering(_file(conn)), conn:
        existed = conn.execute("DELETE FROM runs WHERE run_id = ?", (run.run_id,)).rowcount > 0
        conn.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.path,
                run.suite,
                run.started,
                run.cluster,
                run.network,
                json.dumps(versions, sort_keys=True),
                datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            ),
        )
        for r in records:
            exp = r.expectation
            conn.execute(
                "INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.run_id,
                    r.case,
                    r.suite,
                    r.family,
                    r.variant,
                    r.topology,
                    r.platform,
                    r.partition,
                    json.dumps(r.features),
                    json.dumps(exp.to_json(), sort_keys=True),
                    exp.kind.value if exp.kind in WAIVER_KINDS else None,
                    r.outcome.value,
                    r.reason,
                    int(r.fails_run),
                    r.duration_s,
                    r.observation.ready_s,
                    r.plan_key,
                ),
            )
            conn.executemany(
                "INSERT INTO stages VALUES (?, ?, ?, ?, ?, ?)",
                [(run.run_id, r.case, *s) for s in _stages(r.observation)],
            )
    return run, len(records), existed


def _json(text: Any, what: str) -> Any:
    """A JSON column of the index; IndexFileError names the row when it is not JSON."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as err:
        raise IndexFileError(f"{what} in the index is not JSON ({str(err).split(':')[0]}): {text!r:.60}") from None


def _rows(conn: sqlite3.Connection, sql: str, params: tuple) -> list[Any]:
    with answering(_file(conn)):
        return conn.execute(sql, params).fetchall()


def runs(conn: sqlite3.Connection, suite: str | None = None) -> list[IndexedRun]:
    """Every run (of ``suite``), oldest first."""
    where, params = ("WHERE suite = ?", (suite,)) if suite else ("", ())
    rows = _rows(
        conn,
        f"SELECT run_id, path, suite, started, cluster, network, versions FROM runs {where} ORDER BY started, run_id",
        params,
    )
    return [
        IndexedRun(run_id, path, suite_, started, cluster, network, _json(versions, f"run {run_id}: versions"))
        for run_id, path, suite_, started, cluster, network, versions in rows
    ]


def cases(conn: sqlite3.Connection, suite: str | None = None) -> list[IndexedCase]:
    """The cases of every run (of ``suite``), with their stage timings."""
    where, params = ("WHERE r.suite = ?", (suite,)) if suite else ("", ())
    stages: dict[tuple[str, str], list] = {}
    for run, case, *s in _rows(
        conn,
        f"SELECT s.run_id, s.case_id, stage, layers, step_ms, peak_mib FROM stages s "
        f"JOIN runs r USING (run_id) {where} ORDER BY stage",
        params,
    ):
        stages.setdefault((run, case), []).append(tuple(s))
    out = []
    for row in _rows(
        conn,
        f"SELECT c.run_id, case_id, c.suite, family, variant, topology, platform, partition, "
        f"features, expectation, waiver, outcome, reason, fails_run, duration_s, ready_s, "
        f"plan_key FROM cases c JOIN runs r USING (run_id) {where} ORDER BY case_id",
        params,
    ):
        (
            run,
            case,
            suite_,
            family,
            variant,
            topology,
            platform,
            partition,
            features,
            expectation,
            waiver,
            outcome,
            reason,
            fails,
            duration,
            ready,
            plan_key,
        ) = row
        try:
            claim = Expectation.from_json(_json(expectation, f"case {case} of run {run}: expectation"))
        except RecordError as err:
            raise IndexFileError(f"case {case} of run {run} in the index: expectation.{err}") from None
        out.append(
            IndexedCase(
                id=case,
                suite=suite_,
                family=family,
                variant=variant,
                topology=topology,
                platform=platform,
                partition=partition,
                features=tuple(_json(features, f"case {case} of run {run}: features")),
                run_id=run,
                expectation=claim,
                waiver=waiver,
                outcome=outcome,
                reason=reason,
                fails_run=bool(fails),
                duration_s=duration,
                ready_s=ready,
                plan_key=plan_key,
                stages=tuple(stages.get((run, case), ())),
            )
        )
    return out

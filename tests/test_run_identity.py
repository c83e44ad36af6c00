"""A run's identity and its owner: the UUID run.json gets when the run starts (a copy of the
directory is the same run), the results index that is ppconf's own, and a pid checked only on
the host that wrote it. Pure logic: nothing is launched."""

import logging
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

from harness import safe_write
from harness.cli import main
from harness.results import index, store
from harness.results.lock import foreign_owner, live_owner, run_lock
from harness.results.meta import write_meta
from tests.records import record
from tests.test_hardening import one_error
from tests.test_history import make_run


def started_run(path):
    """A run directory as `ppconf run` starts it (run.json by write_meta), with one record."""
    path.mkdir(parents=True)
    write_meta(path, "s", "local", [], {})
    store.append(path, record("qwen3-tiny/pp2-tp1-mp/auto/none", started="2026-11-01T20:00:00+00:00"))
    return path


def test_run_json_names_the_run_by_a_uuid_and_its_pid_by_the_host(tmp_path):
    meta = store.read_meta(started_run(tmp_path / "run"))
    assert uuid.UUID(meta["run_id"]) and meta["host"] == socket.gethostname()
    assert store.read_meta(started_run(tmp_path / "other"))["run_id"] != meta["run_id"]


def test_a_copied_run_directory_is_the_same_run_in_the_index(tmp_path):
    run = started_run(tmp_path / "run")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    conn = index.connect(tmp_path / "i.sqlite")
    first, _, existed = index.ingest(conn, run)
    assert not existed and first.run_id == store.read_meta(run)["run_id"]
    again, _, existed = index.ingest(conn, copy)
    assert existed and again.run_id == first.run_id
    assert [(r.run_id, r.path) for r in index.runs(conn)] == [(first.run_id, str(copy.resolve()))]
    conn.close()


def test_a_run_json_without_a_run_id_ingests_with_one_derived(tmp_path):
    old = make_run(tmp_path / "old", [record("q/pp2/auto/x")])  # a run.json from before the UUID
    conn = index.connect(tmp_path / "i.sqlite")
    run, count, _ = index.ingest(conn, old)
    assert count == 1 and len(run.run_id) == 16 and int(run.run_id, 16) >= 0
    conn.close()


def test_a_run_id_that_is_no_uuid_is_refused_naming_it(tmp_path):
    run = make_run(tmp_path / "run", [record("q/pp2/auto/x")])
    meta = store.read_meta(run)
    safe_write.write_json(run / store.META, {**meta, "run_id": "not-a-uuid"})
    with pytest.raises(store.RunDirError, match="run.json: run_id: .*'not-a-uuid'"):
        store.read_meta(run)


def tables(db):
    conn = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    finally:
        conn.close()


def test_history_and_ingest_refuse_a_database_that_is_not_a_ppconf_index(tmp_path, capsys):
    db = tmp_path / "app.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    out = tmp_path / "history"
    one_error(capsys, main(["history", "--index", str(db), "--out", str(out)]), str(db), "not a ppconf results index")
    run = started_run(tmp_path / "run")
    one_error(capsys, main(["ingest", str(run), "--index", str(db)]), "its tables: users")
    assert tables(db) == ["users"]  # nothing added to somebody else's database
    other = tmp_path / "other-app.sqlite"
    sqlite3.connect(other).execute("PRAGMA application_id = 42").connection.close()
    with pytest.raises(index.IndexFileError, match="application_id 0x2a"):
        index.connect(other)


def test_an_index_from_before_the_mark_is_still_read_and_marked(tmp_path):
    db = tmp_path / "i.sqlite"
    conn = index.connect(db)
    index.ingest(conn, started_run(tmp_path / "run"))
    conn.execute("PRAGMA application_id = 0")  # as version 1 wrote it
    conn.close()
    conn = index.connect(db, create=False)
    assert len(index.runs(conn)) == 1
    assert conn.execute("PRAGMA application_id").fetchone()[0] == index.APPLICATION_ID
    conn.close()


def test_a_locked_index_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(index, "BUSY_TIMEOUT_S", 0.05)
    db = tmp_path / "i.sqlite"
    index.connect(db).close()
    run = started_run(tmp_path / "run")
    writer = sqlite3.connect(db)
    writer.execute("BEGIN EXCLUSIVE")  # another ingest, mid-write
    try:
        one_error(capsys, main(["ingest", str(run), "--index", str(db)]), str(db), "locked by another writer")
        out = tmp_path / "history"
        one_error(capsys, main(["history", "--index", str(db), "--out", str(out)]), "locked by another writer")
    finally:
        writer.rollback()
        writer.close()
    assert main(["ingest", str(run), "--index", str(db)]) == 0


def test_a_pid_of_another_host_is_not_looked_up_here(tmp_path, caplog):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.1)
        here = {"pid": child.pid, "host": socket.gethostname()}
        assert live_owner(here) == child.pid and foreign_owner(here) is None
        # the same number on another host is another process: never refused by this one's
        there = {"pid": child.pid, "host": "node-b.example"}
        assert live_owner(there) is None and foreign_owner(there) == f"process {child.pid} on node-b.example"
        run = make_run(tmp_path / "run", [])
        with caplog.at_level(logging.WARNING), run_lock(run, there):
            pass
        assert f"ppconf process {child.pid} on node-b.example, which cannot be checked from" in caplog.text
    finally:
        child.kill()
        child.wait()

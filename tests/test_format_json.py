"""``--format json`` on lint, diff, signoff and docs-drift: the JSON carries what the text says,
and the exit status is the text form's."""

import json
import shutil
import textwrap

import pytest

from harness.cases.expand import expand
from harness.cli import main
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.results import store
from tests.records import finished_run, record
from tests.test_plan_validate import FAMILY, suite

# the tiny family of the plan checks; a rule for PP > 1 only, so its PP=1 case is uncovered
TINY = (
    FAMILY
    + """
rules:
  - when: 'family == "tiny" && pp > 1'
    expect: supported
    why: a test claim
"""
    + suite("- {families: [tiny], topologies: [pp1-tp1, pp2-tp1-mp]}")
)


@pytest.fixture
def tiny(tmp_path):
    """A small matrix of its own (the shipped platforms and topologies, TINY unless told): write(text,
    **files) writes it, with more files, and returns its directory."""
    root = tmp_path / "tiny"
    root.mkdir()
    for name in ("platforms.yaml", "ascend/vllm-ascend-facts.json", "topologies.yaml"):
        (root / name).parent.mkdir(exist_ok=True)
        shutil.copy(DEFAULT_MATRICES / name, root / name)

    def write(text: str = TINY, **files: str) -> str:
        (root / "tiny.yaml").write_text(text)
        for name, body in files.items():
            (root / f"{name}.yaml").write_text(textwrap.dedent(body))
        return str(root)

    return write


def run_cli(capsys, argv):
    code = main(argv)
    return code, capsys.readouterr().out


def test_lint_json_gives_every_finding_with_its_position_and_the_counts(tiny, capsys):
    root = tiny()
    code, text = run_cli(capsys, ["lint", "--matrices", root])
    assert code == 0
    assert text.endswith("1 rules, 2 cases in 1 suites: 0 errors, 1 warnings\n")
    code, out = run_cli(capsys, ["lint", "--matrices", root, "--format", "json"])
    assert code == 0
    got = json.loads(out)
    assert {k: got[k] for k in ("ok", "rules", "cases", "suites", "errors", "warnings")} == {
        "ok": True,
        "rules": 1,
        "cases": 2,
        "suites": 1,
        "errors": 0,
        "warnings": 1,
    }
    (warning,) = got["findings"]
    assert warning == {
        "severity": "warning",
        "file": None,  # about a case, not a line of a matrix file
        "line": None,
        "column": None,
        "message": "case tiny/pp1-tp1/auto/none (suite s): no rule covers it; it is 'unspecified'",
    }
    assert f"warning: {warning['message']}\n" in text


def test_lint_json_of_an_error_gives_its_file_and_line_and_exits_1(tiny, capsys):
    root = tiny(
        zz_rules="""\
        rules:
          - when: 'platform == "cuda"'
            expect: supported
            why: matches nothing
        """
    )
    code, text = run_cli(capsys, ["lint", "--matrices", root])
    assert code == 1
    code, out = run_cli(capsys, ["lint", "--matrices", root, "--format", "json"])
    assert code == 1
    got = json.loads(out)
    assert got["ok"] is False and got["errors"] == 1
    (error,) = [f for f in got["findings"] if f["severity"] == "error"]
    assert error["file"].endswith("zz_rules.yaml") and (error["line"], error["column"]) == (2, 5)
    assert error["message"] == "rule 'platform == \"cuda\"' matches no case of any suite"
    assert f"error: {error['file']}:2:5: {error['message']}\n" in text


def test_lint_text_and_json_go_to_stdout_alone(tiny, capsys):
    root = tiny()
    assert main(["lint", "--matrices", root, "--format", "json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # nothing but the object
    assert captured.err == ""


# runs: records as the runner writes them


def make_run(path, records, suite="s"):
    path.mkdir(parents=True)
    for r in records:
        store.append(path, r)
    (path / "run.json").write_text(json.dumps({"suite": suite}))
    return str(path)


STACK = {"n1": {"vllm": "0.32.0", "torch": "2.9.0"}}


def rec(case, outcome="PASS", reason="because"):
    return record(case, outcome, reason=reason, versions=STACK)


def test_diff_json_gives_each_changed_case_with_both_outcomes(tmp_path, capsys):
    base = make_run(tmp_path / "base", [rec("f/pp2/auto/none"), rec("f/pp4/auto/none", "FAIL"), rec("f/old/auto/none")])
    now = make_run(
        tmp_path / "now",
        [rec("f/pp2/auto/none", "FAIL", "outputs differ"), rec("f/pp4/auto/none"), rec("f/new/auto/none")],
    )
    code, text = run_cli(capsys, ["diff", now, base])
    assert code == 1
    code, out = run_cli(capsys, ["diff", now, base, "--format", "json"])
    assert code == 1
    got = json.loads(out)
    assert (got["run"], got["baseline"]) == (now, base)
    (regressed,) = got["regressed"]
    assert regressed == {
        "case": "f/pp2/auto/none",
        "family": "qwen3-tiny",
        "row": "PP",
        "column": "pp2-tp1-mp · cpu",
        "before": "PASS",
        "after": "FAIL",
        "reason": "outputs differ",
    }
    assert [(c["case"], c["before"], c["after"]) for c in got["recovered"]] == [("f/pp4/auto/none", "FAIL", "PASS")]
    assert [(c["case"], c["before"], c["after"]) for c in got["appeared"]] == [("f/new/auto/none", None, "PASS")]
    assert [(c["case"], c["before"], c["after"]) for c in got["vanished"]] == [("f/old/auto/none", "PASS", None)]
    assert got["changed"] == [] and got["flaky"] == []
    # the text says the same, one line per changed case
    assert text.splitlines() == [
        "regressed qwen3-tiny / PP / pp2-tp1-mp · cpu: PASS -> FAIL (f/pp2/auto/none): outputs differ",
        "recovered qwen3-tiny / PP / pp2-tp1-mp · cpu: FAIL -> PASS (f/pp4/auto/none)",
        "appeared  qwen3-tiny / PP / pp2-tp1-mp · cpu: PASS (f/new/auto/none)",
        "vanished  qwen3-tiny / PP / pp2-tp1-mp · cpu: was PASS (f/old/auto/none)",
    ]


def test_diff_json_of_a_flaky_case_and_of_no_difference(tmp_path, capsys):
    base = make_run(tmp_path / "base", [rec("f/pp2/auto/none")])
    same = make_run(tmp_path / "same", [rec("f/pp2/auto/none")])
    code, out = run_cli(capsys, ["diff", same, base, "--format", "json"])
    assert code == 0
    got = json.loads(out)
    assert all(got[k] == [] for k in ("regressed", "recovered", "changed", "appeared", "vanished", "flaky"))
    flaky = make_run(tmp_path / "flaky", [rec("f/pp2/auto/none", "FAIL"), rec("f/pp2/auto/none")])
    code, out = run_cli(capsys, ["diff", flaky, base, "--format", "json"])
    assert code == 0
    assert json.loads(out)["flaky"] == [{"case": "f/pp2/auto/none", "repeats": ["FAIL", "PASS"]}]


@pytest.fixture(scope="module")
def smoke():
    return load_matrix(DEFAULT_MATRICES)


def test_signoff_json_gives_the_verdict_and_the_waivers_it_accepted(smoke, tmp_path, capsys):
    waived = [c for c in expand(smoke, "smoke-cpu").cases if c.expectation.kind.value == "known-issue"]
    assert len(waived) == 3  # the zero entry, eager mode, and Qwen3-MoE's output modules
    finished_run(tmp_path / "run", smoke, load_cluster(None), "smoke-cpu", {c.id: "KNOWN_ISSUE" for c in waived})
    run = str(tmp_path / "run")
    code, out = run_cli(capsys, ["signoff", run, "--format", "json"])
    assert code == 0
    got = json.loads(out)
    assert (got["verdict"], got["ok"], got["reasons"], got["cases"]) == ("YES", True, [], 11)
    assert got["run"] == run and got["baseline"] is None
    assert got["stack"] == {"local": "vllm 0.32.0, torch 2.9.0"}
    assert sorted(w["case"] for w in got["waivers"]) == sorted(c.id for c in waived)
    for w in got["waivers"]:
        exp = next(c.expectation for c in waived if c.id == w["case"])
        assert w == {
            "case": w["case"],
            "outcome": "KNOWN_ISSUE",
            "kind": "known-issue",
            "link": exp.link,
            "owner": exp.owner,
            "until": "2027-03-01",
        }
    # the text form is the page signoff.md holds, in both forms
    code, text = run_cli(capsys, ["signoff", run])
    assert code == 0 and text == (tmp_path / "run" / "signoff.md").read_text()
    assert f"Waivers accepted ({len(waived)}):" in text


def test_signoff_json_of_a_no_gives_its_reasons_and_exits_1(smoke, tmp_path, capsys):
    supported = next(c for c in expand(smoke, "smoke-cpu").cases if c.expectation.kind.value == "supported")
    finished_run(tmp_path / "run", smoke, load_cluster(None), "smoke-cpu", {supported.id: "FAIL"})
    code, out = run_cli(capsys, ["signoff", str(tmp_path / "run"), "--format", "json"])
    assert code == 1
    got = json.loads(out)
    assert (got["verdict"], got["ok"]) == ("NO", False)
    assert got["reasons"] == [f"FAIL: {supported.id} — as claimed"]


def test_docs_drift_json_gives_each_disagreement_with_both_sides(tmp_path, capsys):
    doc = tmp_path / "guide.md"
    doc.write_text("Prose.\n\n| Feature stacked with PP | Support |\n|---|---|\n| Prefix caching | Not supported. |\n")
    code, text = run_cli(capsys, ["docs-drift", str(doc), "--suite", "smoke-cpu"])
    assert code == 1
    code, out = run_cli(capsys, ["docs-drift", str(doc), "--suite", "smoke-cpu", "--format", "json"])
    assert code == 1
    got = json.loads(out)
    assert (got["doc"], got["suites"], got["run"]) == (str(doc), ["smoke-cpu"], None)
    (d,) = got["disagreements"]
    assert (d["file"], d["line"], d["name"], d["published"]) == (str(doc), 5, "Prefix caching", "❌")
    assert d["claimed"] and d["claimed"] != d["published"] and d["observed"] is None
    assert text.startswith(f"{doc}:5: Prefix caching: {d['message']}")
    assert text.endswith(f"1 disagreement(s) between {doc} and the claims of smoke-cpu\n")


def test_docs_drift_json_of_a_page_that_agrees_exits_0(tmp_path, capsys):
    doc = tmp_path / "guide.md"
    doc.write_text("No support table here.\n")
    code, out = run_cli(capsys, ["docs-drift", str(doc), "--suite", "smoke-cpu", "--format", "json"])
    assert code == 0 and json.loads(out)["disagreements"] == []


@pytest.mark.slow  # over 2 s: it builds the engine's serve parser
def test_lint_plans_json_gives_the_plan_errors(tiny, capsys):
    root = tiny(
        TINY.replace("topologies: [pp1-tp1, pp2-tp1-mp]}", "topologies: [pp2-tp1-mp], features: [long+short]}"),
        features="""\
        features:
          long: {title: long, args: [--max-num-seqs, "8"]}
          short: {title: short, args: [--max-num-seqs, "4"]}
        """,
    )
    code, out = run_cli(capsys, ["-q", "lint", "--matrices", root, "--plans", "--suite", "s", "--format", "json"])
    assert code == 1
    plans = json.loads(out)["plans"]
    assert plans["ok"] is False and plans["errors"] >= 1
    assert any(f["severity"] == "error" and f["suite"] == "s" and f["cluster"] == "local" for f in plans["findings"])


def test_lint_migrate_json_says_what_changed_in_the_object_alone(tiny, capsys):
    old = TINY.replace("    platform: cpu\n", "    platform: cpu\n    accuracy:\n      logprob_tolerance: 0.1\n")
    assert old != TINY
    root = tiny(old)
    code, out = run_cli(capsys, ["lint", "--matrices", root, "--migrate", "--format", "json"])
    assert code == 0
    (migrated,) = json.loads(out)["migrated"]
    assert migrated["root"] == root
    moved = [c for c in migrated["changes"] if "logprob_tolerance" in c["message"]]
    line = old.splitlines().index("      logprob_tolerance: 0.1") + 1
    assert [(c["file"].endswith("tiny.yaml"), c["line"], c["column"]) for c in moved] == [(True, line, 7)]
    assert moved[0]["message"] == "suites.s.accuracy.logprob_tolerance -> suites.s.accuracy.compare.logprob_tolerance"
    code, out = run_cli(capsys, ["lint", "--matrices", root, "--migrate"])  # a second time: nothing
    assert code == 0 and out.startswith(f"{root}: nothing to migrate (matrix format ")


def test_lint_migrate_json_names_what_it_changed_before_a_directory_it_could_not_migrate(tiny, capsys, tmp_path):
    old = TINY.replace("    platform: cpu\n", "    platform: cpu\n    accuracy:\n      logprob_tolerance: 0.1\n")
    root = tiny(old)
    missing = str(tmp_path / "no-such-matrices")
    code = main(["lint", "--matrices", root, "--matrices", missing, "--migrate", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 2
    got = json.loads(captured.out)  # the first directory was migrated on disk: the object says so
    assert got["ok"] is False and [m["root"] for m in got["migrated"]] == [root]
    assert any("logprob_tolerance" in c["message"] for c in got["migrated"][0]["changes"])
    assert got["errors"] == [f"matrix directory not found: {missing}"]
    assert f"matrix directory not found: {missing}" in captured.err

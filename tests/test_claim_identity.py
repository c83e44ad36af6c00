"""A claim is what it claims: where its rule is written (file:line, index) is not part of it, so
editing around a rule leaves sign-off and resume as they were."""

import pytest

from harness.cases.expand import expand
from harness.matrix.load import load_matrix
from harness.plan.cluster import load_cluster
from harness.results.result import Expectation
from reports.signoff import current_claims, signoff
from tests.records import finished_run

SUITE = "smoke-cpu"


def _finished_run(run_dir, m, cluster):
    return finished_run(run_dir, m, cluster, SUITE)


@pytest.fixture
def moved(matrix_dir):
    """The matrices before, and after a comment line was inserted at the top of the smoke rules."""
    before = load_matrix(matrix_dir.root)
    rules = matrix_dir.root / "cpu" / "rules.yaml"
    rules.write_text("# a comment a release manager added\n" + rules.read_text())
    return before, load_matrix(matrix_dir.root)


def test_a_comment_line_moves_every_rule_but_changes_no_claim(moved):
    before, after = moved
    old = {c.id: c.expectation for c in expand(before, SUITE).cases}
    new = {c.id: c.expectation for c in expand(after, SUITE).cases}
    assert old.keys() == new.keys() and len(old) >= 10
    moved_rules = [i for i in old if old[i].where and old[i].where != new[i].where]
    assert moved_rules, "the comment line should move the smoke rules"
    assert all(old[i].claim() == new[i].claim() for i in old)


def test_a_claims_content_is_its_identity():
    base = Expectation(kind="rejected", error="x", phase="config", rule=3, where="a.yaml:1")
    assert base.claim() == Expectation(kind="rejected", error="x", phase="config", rule=9, where="b.yaml:7").claim()
    for change in ({"error": "y"}, {"phase": "startup"}, {"within_s": 5.0}, {"compare": {"mode": "logprob"}}):
        assert base.model_copy(update=change).claim() != base.claim(), change


def test_signoff_sees_no_changed_claim_after_a_comment_line(moved, tmp_path):
    before, after = moved
    run_dir = tmp_path / "run"
    _finished_run(run_dir, before, load_cluster(None))
    verdict = signoff(run_dir, None, current_claims(run_dir, after))
    assert not [r for r in verdict.reasons if "claim changed" in r], verdict.reasons
    assert verdict.ok, verdict.reasons


def test_signoff_still_sees_a_claim_whose_content_changed(matrix_dir, tmp_path):
    before = load_matrix(matrix_dir.root)
    run_dir = tmp_path / "run"
    _finished_run(run_dir, before, load_cluster(None))
    rules = matrix_dir.root / "cpu" / "rules.yaml"
    text = rules.read_text()
    assert "phase: config" in text
    rules.write_text(text.replace("phase: config", "phase: startup", 1))
    verdict = signoff(run_dir, None, current_claims(run_dir, load_matrix(matrix_dir.root)))
    assert [r for r in verdict.reasons if "claim changed" in r]


def test_resume_keeps_every_finished_case_after_a_comment_line(moved, tmp_path, monkeypatch):
    from harness import run as run_module
    from harness.run import RunConfig, SuiteRun

    before, after = moved
    cluster = load_cluster(None)
    run_dir = tmp_path / "run"
    cases = _finished_run(run_dir, before, cluster)
    monkeypatch.setattr(run_module, "probe_versions", lambda cluster, models=(): {})  # no node is asked
    suite_run = SuiteRun(RunConfig(after, SUITE, cluster, run_dir, resume=True))
    monkeypatch.setattr(suite_run, "_ensure_models", lambda cases: None)
    assert suite_run.prepare() == []  # nothing to launch again
    assert suite_run.summary.skipped_finished == len(cases)


def test_a_resumed_run_checks_the_plans_of_the_cases_left_only(tmp_path, monkeypatch):
    """Checking launch plans against vLLM's parser imports vLLM (seconds): a resumed run asks it
    of the cases still to run only, and of none when every case is finished."""
    from harness import run as run_module
    from harness.run import RunConfig, SuiteRun

    m, cluster = load_matrix(), load_cluster(None)
    run_dir = tmp_path / "run"
    cases = _finished_run(run_dir, m, cluster)
    checked: list[list[str]] = []
    monkeypatch.setattr(
        run_module, "plan_errors", lambda m, cases, cluster: checked.append([c.id for c in cases]) or []
    )
    SuiteRun(RunConfig(m, SUITE, cluster, run_dir, resume=True)).check_plans()
    assert checked == []
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    (run_dir / "results.jsonl").write_text("\n".join(lines[1:]) + "\n")  # the first case not finished
    SuiteRun(RunConfig(m, SUITE, cluster, run_dir, resume=True)).check_plans()
    assert checked == [[cases[0].id]]
    SuiteRun(RunConfig(m, SUITE, cluster, run_dir)).check_plans()  # a fresh run: every case
    assert len(checked[-1]) == len(cases)

"""The gate compares what it claims to: sign-off says NO, with its reason, to every run that
does not show the claims held on a stack it can name."""

import datetime
import json

import pytest

from harness.results import store
from harness.results.result import Result
from reports.github import job_summary
from reports.signoff import signoff, waiver
from tests.records import record

STACK = {"n1": {"python": "3.11.7", "vllm": "0.32.0", "torch": "2.9.0"}}
TODAY = datetime.date(2026, 12, 1)


def rec(case, outcome="PASS", kind="supported", versions=None, **fields):
    return record(case, outcome, kind, versions=STACK if versions is None else versions, **fields)


GOOD = [
    rec("qwen3-tiny/pp2-tp1-mp/auto/none"),
    rec("qwen3-tiny/pp2-tp1-mp/1,2/none", "XFAIL", "rejected", partition="1,2"),
]


def run(path, records, suite="s"):
    path.mkdir(parents=True)
    for r in records:
        store.append(path, r)
    (path / "run.json").write_text(json.dumps({"suite": suite}))
    return path


def claims(records):
    return {r["case"]: r["expectation"] for r in records}


def test_a_good_run_signs(tmp_path):
    v = signoff(run(tmp_path / "run", GOOD), run(tmp_path / "base", GOOD), claims(GOOD), TODAY)
    assert v.ok, v.reasons
    assert "- n1: vllm 0.32.0, torch 2.9.0" in v.page


def test_a_baseline_of_another_suite_or_with_nothing_in_common_is_no(tmp_path):
    mine = run(tmp_path / "run", GOOD)
    other_suite = run(tmp_path / "other", [dict(r, suite="t") for r in GOOD], suite="t")
    v = signoff(mine, other_suite, claims(GOOD), TODAY)
    assert not v.ok and any("ran the suite 't', this run 's'" in r for r in v.reasons), v.reasons
    elsewhere = run(tmp_path / "elsewhere", [rec("bert-tiny/pp2-tp1-mp/auto/none", family="bert-tiny")])
    v = signoff(mine, elsewhere, claims(GOOD), TODAY)
    assert not v.ok and any("shares no case with this run" in r for r in v.reasons), v.reasons


@pytest.mark.parametrize(
    "versions, says",
    [
        ({}, "record no node's stack"),
        ({"n1": {}}, "no versions were recorded"),
        ({"n1": {"vllm": None, "torch": "2.9.0"}}, "no version of vllm"),
        ({"n1": {"error": "ssh: connect to host n1 port 22: Connection refused"}}, "Connection refused"),
        ({"n1": {"vllm": "Traceback (most recent call last):"}}, "not a version"),
        ({"n1": {"python": "3.11.7", "torch": "2.9.0"}}, "no version of vLLM"),
    ],
)
def test_a_run_on_no_known_stack_is_no(tmp_path, versions, says):
    records = [dict(r, versions=versions) for r in GOOD]
    v = signoff(run(tmp_path / "run", records), None, claims(records), TODAY)
    assert not v.ok and any(says in r for r in v.reasons), v.reasons
    assert "Signed stack" not in v.page


def test_a_run_where_nothing_launched_is_no(tmp_path):
    records = [rec("bert-tiny/pp2-tp1-mp/auto/none", "SKIP", "unsupported-on-platform", versions={})]
    v = signoff(run(tmp_path / "run", records), None, claims(records), TODAY)
    assert not v.ok and any("nothing in this run launched" in r for r in v.reasons), v.reasons


@pytest.mark.parametrize(
    "records, says",
    [
        ([rec("a/pp2/auto/none", "XFAIL", "supported")], "XFAIL is no verdict on a supported claim"),
        ([rec("a/pp2/auto/none", "PASS", "rejected")], "PASS is no verdict on a rejected claim"),
        ([rec("a/pp2/auto/none", "KNOWN_ISSUE", "flaky")], "KNOWN_ISSUE is no verdict on a flaky claim"),
        ([dict(rec("a/pp2/auto/none"), suite="other")], "a record of the suite 'other', not this run's 's'"),
        ([rec("a/pp2/auto/none", "FAIL"), rec("a/pp2/auto/none", "PASS")], "2 verdicts on one claim (FAIL then PASS)"),
        ([rec("a/pp2/auto/none"), rec("a/pp2/auto/none")], "2 verdicts on one claim (PASS then PASS)"),
    ],
)
def test_forged_or_concatenated_results_are_no(tmp_path, records, says):
    v = signoff(run(tmp_path / "run", records), None, claims(records), TODAY)
    assert not v.ok and any(says in r for r in v.reasons), v.reasons


def test_a_retry_after_an_infrastructure_error_or_a_changed_claim_is_one_verdict(tmp_path):
    retried = [rec("a/pp2/auto/none", "ERROR", reason="infrastructure: port taken"), rec("a/pp2/auto/none")]
    assert signoff(run(tmp_path / "retry", retried), None, claims(retried[1:]), TODAY).ok
    # a resume relaunches a case whose claim changed: the old verdict was on another claim
    reclaimed = [rec("a/pp2/auto/none", "FAIL", "known-issue"), rec("a/pp2/auto/none")]
    v = signoff(run(tmp_path / "reclaimed", reclaimed), None, claims(reclaimed[1:]), TODAY)
    assert v.ok, v.reasons


FLAKY = {"link": "https://github.com/o/r/issues/7", "owner": "alice", "waives": ["accuracy"]}


def test_a_flaky_waiver_past_its_date_is_no_like_a_known_issue(tmp_path):
    expired = {"kind": "flaky", **FLAKY, "until": "2026-11-30"}
    records = GOOD + [rec("f/pp2/auto/none", "FLAKY", "flaky", family="f", expectation=expired)]
    v = signoff(run(tmp_path / "run", records), None, claims(records), TODAY)
    assert not v.ok
    want = "flaky waiver expired on 2026-11-30: f/pp2/auto/none (https://github.com/o/r/issues/7, owner alice)"
    assert want in v.reasons


def test_signoff_and_the_job_summary_list_the_waivers_accepted(tmp_path):
    waived = [
        rec("f/pp2/auto/none", "FLAKY", "flaky", family="f", expectation={"kind": "flaky", **FLAKY}),
        rec(
            "k/pp2/auto/none",
            "KNOWN_ISSUE",
            family="k",
            expectation={"kind": "known-issue", **FLAKY, "owner": "bob", "until": "2027-01-31"},
        ),
    ]
    records = GOOD + waived
    v = signoff(run(tmp_path / "run", records), None, claims(records), TODAY)
    assert v.ok, v.reasons
    assert [waiver(e) for e in v.waivers] == [
        "FLAKY f/pp2/auto/none: flaky https://github.com/o/r/issues/7, owner alice, no expiry",
        "KNOWN_ISSUE k/pp2/auto/none: known-issue https://github.com/o/r/issues/7, owner bob, until 2027-01-31",
    ]
    assert "Waivers accepted (2):" in v.page and "owner bob, until 2027-01-31" in v.page
    summary = job_summary("s", [Result.from_json(r) for r in records], tmp_path / "report", env={})
    assert "### Waived cases" in summary
    assert "| KNOWN_ISSUE | k/pp2/auto/none | https://github.com/o/r/issues/7 | bob | 2027-01-31 |" in summary
    assert "| FLAKY | f/pp2/auto/none | https://github.com/o/r/issues/7 | alice | no expiry |" in summary

import datetime

import pytest

from harness.check.verdict.judge import judge
from harness.outcomes import Outcome
from harness.results.result import Comparison, Expectation, Observation

SUPPORTED = Expectation(kind="supported")
REJECT_STARTUP = Expectation(kind="rejected", error="sum\\(partitions\\)", phase="startup", within_s=60)
REJECT_FIRST = Expectation(kind="rejected", error="intermediate_tensors", phase="first-request", within_s=30)
LINE = {"log": "node0-api", "line": 10, "text": "ValueError: sum(partitions)=3 does not match num_hidden_layers=5."}


def ready(**kw):
    return Observation(
        ready=True,
        ready_s=60.0,
        partition=[[0, 3], [3, 5]],
        partition_expected=[[0, 3], [3, 5]],
        accuracy={"equal": True, "summary": "ok"},
        **kw,
    )


def test_only_failing_outcomes_fail_the_run():
    assert {o for o in Outcome if o.fails_run} == {
        Outcome.FAIL,
        Outcome.UNEXPECTED_ACCEPT,
        Outcome.BAD_REJECT,
        Outcome.ERROR,
    }


def test_supported_and_every_check_passed():
    assert judge(SUPPORTED, ready()).outcome is Outcome.PASS


@pytest.mark.parametrize(
    "obs,words",
    [
        (
            Observation(
                failed_phase="startup", root_cause={"log": "node0-api", "line": 1, "text": "RuntimeError: boom"}
            ),
            "boom",
        ),
        (Observation(hung=True, failed_phase="startup"), "startup deadline"),
        (ready(request_error="ReadTimeout"), "request failed"),
    ],
)
def test_supported_but_broken_is_fail(obs, words):
    v = judge(SUPPORTED, obs)
    assert v.outcome is Outcome.FAIL and words in v.reason


def test_wrong_partition_fails():
    obs = ready()
    obs.partition = [[0, 2], [2, 5]]
    v = judge(SUPPORTED, obs)
    assert v.outcome is Outcome.FAIL and "[[0, 2], [2, 5]]" in v.reason


def test_output_mismatch_fails():
    obs = ready()
    obs.accuracy = Comparison(equal=False, summary="1 of 3 prompts differ")
    assert judge(SUPPORTED, obs).outcome is Outcome.FAIL


def test_silent_disable_fails_a_supported_claim():
    obs = ready(silent_disable=[{"log": "a", "line": 3, "text": "WARNING Async scheduling is disabled"}])
    v = judge(SUPPORTED, obs)
    assert v.outcome is Outcome.FAIL and "silently disabled" in v.reason


def test_expected_rejection_in_time_is_xfail():
    obs = Observation(failed_phase="startup", failed_after_s=38, expected_error_line=LINE, expected_error_after_s=38)
    v = judge(REJECT_STARTUP, obs)
    assert v.outcome is Outcome.XFAIL and "node0-api:10" in v.reason


def test_rejection_too_late_is_bad_reject():
    obs = Observation(failed_phase="startup", expected_error_line=LINE, expected_error_after_s=90)
    assert judge(REJECT_STARTUP, obs).outcome is Outcome.BAD_REJECT


def test_other_error_or_hang_is_bad_reject():
    other = Observation(
        failed_phase="startup", root_cause={"log": "node0-api", "line": 1, "text": "OSError: no such file"}
    )
    assert judge(REJECT_STARTUP, other).outcome is Outcome.BAD_REJECT
    assert judge(REJECT_STARTUP, Observation(hung=True)).outcome is Outcome.BAD_REJECT


def test_claimed_rejection_that_works_is_unexpected_accept():
    v = judge(REJECT_STARTUP, ready())
    assert v.outcome is Outcome.UNEXPECTED_ACCEPT


def test_first_request_rejection():
    line = {"log": "node0-api", "line": 99, "text": "assert self.intermediate_tensors is not None"}
    obs = Observation(
        ready=True,
        request_error="expected error appeared",
        failed_phase="first-request",
        expected_error_line=line,
        expected_error_after_s=2.0,
    )
    assert judge(REJECT_FIRST, obs).outcome is Outcome.XFAIL
    startup_died = Observation(failed_phase="startup", expected_error_line=line)
    assert judge(REJECT_FIRST, startup_died).outcome is Outcome.BAD_REJECT


def test_known_issue_and_flaky_and_infra():
    ki = Expectation(
        kind="known-issue", link="https://x/1", owner="a", until=datetime.date(2027, 1, 1), waives=("startup",)
    )
    broken = Observation(failed_phase="startup")
    assert judge(ki, broken).outcome is Outcome.KNOWN_ISSUE
    assert judge(ki, ready()).outcome is Outcome.PASS
    assert judge(Expectation(kind="flaky", link="https://x/2", waives=("startup",)), broken).outcome is Outcome.FLAKY
    assert judge(SUPPORTED, Observation(infra_error="port in use")).outcome is Outcome.ERROR
    assert judge(Expectation(kind="unspecified"), Observation()).outcome is Outcome.SKIP


def test_unverified_partition_is_not_a_pass():
    obs = ready()
    obs.partition = None
    v = judge(SUPPORTED, obs)
    assert v.outcome is Outcome.FAIL and "could not be read" in v.reason


def test_config_phase_rejection_after_engine_start_is_bad_reject():
    exp = Expectation(kind="rejected", error="SupportsPP", phase="config", within_s=60)
    line = {"log": "node0-api", "line": 5, "text": "NotImplementedError: ... SupportsPP"}
    assert judge(exp, Observation(failed_phase="startup", expected_error_line=line)).outcome is Outcome.XFAIL
    late = Observation(failed_phase="startup", expected_error_line=line, engine_started=True)
    assert judge(exp, late).outcome is Outcome.BAD_REJECT


def test_an_accuracy_waiver_waives_only_accuracy():
    """LayerSplit's intermittent output mismatch: a mismatch is waived, a failed start is FAIL."""
    ki = Expectation(
        kind="known-issue", link="https://x/1", owner="a", until=datetime.date(2027, 1, 1), waives=("accuracy",)
    )
    mismatch = ready()
    mismatch.accuracy = Comparison(equal=False, summary="prompt 2 differs at token 5")
    assert judge(ki, mismatch).outcome is Outcome.KNOWN_ISSUE
    flaky = Expectation(kind="flaky", link="https://x/2", waives=("accuracy",))
    assert judge(flaky, mismatch).outcome is Outcome.FLAKY
    died = Observation(
        failed_phase="startup", root_cause={"log": "node0-api", "line": 1, "text": "RuntimeError: HCCL init failed"}
    )
    v = judge(ki, died)
    assert v.outcome is Outcome.FAIL and "covers only accuracy" in v.reason
    assert judge(flaky, died).outcome is Outcome.FAIL
    wrong_partition = ready()
    wrong_partition.partition = [[0, 2], [2, 5]]
    wrong_partition.accuracy = Comparison(equal=False, summary="")
    assert judge(ki, wrong_partition).outcome is Outcome.FAIL


def test_a_crash_waiver_needs_its_root_cause():
    ki = Expectation(
        kind="known-issue",
        link="https://x/1",
        owner="a",
        until=datetime.date(2027, 1, 1),
        waives=("startup",),
        error="ZeroDivisionError",
    )
    crash = Observation(
        failed_phase="startup",
        root_cause={"log": "node0-api", "line": 1, "text": "ZeroDivisionError: integer division or modulo by zero"},
    )
    assert judge(ki, crash).outcome is Outcome.KNOWN_ISSUE
    other = Observation(
        failed_phase="startup",
        root_cause={"log": "node0-api", "line": 1, "text": "OSError: [Errno 28] No space left on device"},
    )
    v = judge(ki, other)
    assert v.outcome is Outcome.FAIL and "not the waived failure" in v.reason


def test_a_request_waiver_covers_the_partition_the_failed_request_left_unchecked():
    exp = Expectation(
        kind="known-issue",
        link="L",
        owner="o",
        until=datetime.date(2099, 1, 1),
        waives=("request",),
        error="intermediate_tensors",
    )
    obs = Observation(
        ready=True,
        request_error="process exited during the request",
        root_cause={"log": "n", "line": 1, "text": "AssertionError: intermediate_tensors is None"},
        partition_expected=[[0, 3], [3, 5]],
    )
    v = judge(exp, obs)
    assert v.outcome is Outcome.KNOWN_ISSUE and "partition the workers built was not checked" in v.reason


def test_a_reference_that_did_not_start_leaves_accuracy_unjudged():
    obs = Observation(
        ready=True,
        partition=[[0, 5]],
        partition_expected=[[0, 5]],
        reference_error="reference did not start (exited after 9 s): OOM",
    )
    v = judge(Expectation(kind="supported"), obs)
    assert (
        v.outcome is Outcome.ERROR
        and v.reason == "accuracy not judged: reference did not start (exited after 9 s): OOM"
    )
    # a case that itself failed is FAIL whatever its reference did
    broken = Observation(
        ready=False, root_cause={"log": "n", "line": 1, "text": "ValueError: x"}, reference_error="not launched"
    )
    assert judge(Expectation(kind="supported"), broken).outcome is Outcome.FAIL

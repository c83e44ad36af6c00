"""One item per matrix case; the verdict comes from what the real deployment did."""

import pytest

from conformance.plugin import evidence


def test_case(ppconf_case, ppconf_session, record_property):
    suite, case_id = ppconf_case
    record = ppconf_session.record(suite, case_id)
    for name, value in evidence(record).items():
        record_property(name, value)
    outcome, reason = record.outcome, record.reason
    # the outcome says how its item ends (harness.outcomes.Outcome.pytest)
    if outcome.pytest == "passed":
        return
    if outcome.pytest == "xfailed":
        pytest.xfail(f"{outcome.value}: {reason}")
    if outcome.pytest == "skipped":
        pytest.skip(reason)  # the verdict SKIP (not applicable here), not a need of this machine
    if outcome.pytest == "xpassed":
        pytest.fail(f"[XPASS(strict)] {reason}", pytrace=False)
    pytest.fail(f"{outcome.value}: {reason}", pytrace=False)

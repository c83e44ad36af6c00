"""One item per matrix case; the verdict comes from what the real deployment did."""

import pytest

from conformance.plugin import evidence
from harness.outcomes import WAIVED, Outcome


def test_case(ppconf_case, ppconf_session, record_property):
    suite, case_id = ppconf_case
    record = ppconf_session.record(suite, case_id)
    for name, value in evidence(record).items():
        record_property(name, value)
    outcome, reason = record.outcome, record.reason
    if outcome is Outcome.PASS:
        return
    if outcome in (Outcome.XFAIL, *WAIVED):
        pytest.xfail(f"{outcome.value}: {reason}")
    if outcome is Outcome.SKIP:
        pytest.skip(reason)
    if outcome is Outcome.UNEXPECTED_ACCEPT:
        pytest.fail(f"[XPASS(strict)] {reason}", pytrace=False)
    pytest.fail(f"{outcome.value}: {reason}", pytrace=False)

"""Each outcome carries its facts (label, symbol, severity, JUnit element, pytest ending, whether
it fails a run) and the reports read them from it."""

from harness.outcomes import FAILS_RUN, NOT_RUN_SEVERITY, NOT_RUN_SYMBOL, WAIVED, Outcome, severity, symbol
from reports import history


def test_every_outcome_has_distinct_facts():
    assert sorted(o.severity for o in Outcome) == list(range(len(Outcome)))
    assert len({o.symbol for o in Outcome} | {NOT_RUN_SYMBOL}) == len(Outcome) + 1
    assert Outcome.KNOWN_ISSUE.label == "known issue"


def test_what_fails_a_run_is_a_junit_failure_or_error_and_a_failed_item():
    assert set(FAILS_RUN) == {Outcome.FAIL, Outcome.UNEXPECTED_ACCEPT, Outcome.BAD_REJECT, Outcome.ERROR}
    for o in Outcome:
        assert o.fails_run == (o.junit in ("failure", "error")) == (o.pytest in ("failed", "xpassed"))
    assert {o for o in Outcome if o.pytest == "xfailed"} == {Outcome.XFAIL, *WAIVED}
    assert Outcome.PASS.junit is None and Outcome.SKIP.pytest == "skipped"
    # a verified rejection is a passed JUnit test (the claim held); only the harness's failure is an error
    assert Outcome.XFAIL.junit is None and {o for o in Outcome if o.junit == "error"} == {Outcome.ERROR}
    assert {o for o in Outcome if o.junit == "skipped"} == {Outcome.SKIP, *WAIVED}


def test_a_verified_rejection_and_a_waived_case_differ_in_symbol_and_colour():
    assert len({o.colour for o in Outcome}) == len(Outcome)
    assert Outcome.XFAIL.symbol != Outcome.KNOWN_ISSUE.symbol and Outcome.XFAIL.colour != Outcome.KNOWN_ISSUE.colour


def test_a_record_value_reads_as_its_outcome_and_not_run_is_below_all():
    assert severity(None) == NOT_RUN_SEVERITY < min(o.severity for o in Outcome)
    assert severity("ERROR") == max(o.severity for o in Outcome)
    assert symbol("FLAKY") == Outcome.FLAKY.symbol and symbol(None) == NOT_RUN_SYMBOL
    assert symbol("NOT_AN_OUTCOME") == "?" and severity("NOT_AN_OUTCOME") == 0


def test_the_history_legend_names_every_outcome_by_its_own_symbol():
    for o in Outcome:
        assert f"{o.symbol} {o.value}" in history.LEGEND
    assert history.LEGEND.endswith(f"{NOT_RUN_SYMBOL} not in the run")

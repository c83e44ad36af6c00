"""Each outcome carries its facts (label, symbol, severity, JUnit element, pytest ending, whether
it fails a run) and the reports read them from it."""

from harness.outcomes import FAILS_RUN, NOT_RUN_SEVERITY, NOT_RUN_SYMBOL, WAIVED, Outcome, severity, symbol
from reports import history


def test_every_outcome_has_distinct_facts():
    assert sorted(o.severity for o in Outcome) == list(range(len(Outcome)))
    assert len({o.symbol for o in Outcome} | {NOT_RUN_SYMBOL}) == len(Outcome) + 1
    assert Outcome.KNOWN_ISSUE.label == "known issue"


def test_what_fails_a_run_is_a_junit_failure_and_a_failed_item():
    assert set(FAILS_RUN) == {Outcome.FAIL, Outcome.UNEXPECTED_ACCEPT, Outcome.BAD_REJECT, Outcome.ERROR}
    for o in Outcome:
        assert o.fails_run == (o.junit == "failure") == (o.pytest in ("failed", "xpassed"))
    assert {o for o in Outcome if o.pytest == "xfailed"} == {Outcome.XFAIL, *WAIVED}
    assert Outcome.PASS.junit is None and Outcome.SKIP.pytest == "skipped"


def test_a_record_value_reads_as_its_outcome_and_not_run_is_below_all():
    assert severity(None) == NOT_RUN_SEVERITY < min(o.severity for o in Outcome)
    assert severity("ERROR") == max(o.severity for o in Outcome)
    assert symbol("FLAKY") == Outcome.FLAKY.symbol and symbol(None) == NOT_RUN_SYMBOL
    assert symbol("NOT_AN_OUTCOME") == "?" and severity("NOT_AN_OUTCOME") == 0


def test_the_history_legend_names_every_outcome_by_its_own_symbol():
    for o in Outcome:
        assert f"{o.symbol} {o.value}" in history.LEGEND
    assert history.LEGEND.endswith(f"{NOT_RUN_SYMBOL} not in the run")

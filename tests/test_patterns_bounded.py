"""No pattern can hang ppconf: every match of a matrix pattern runs with the log search's time
budget (the judge's waiver matching and lint included), lint warns on the shapes that backtrack,
and a condition's size is bounded with a positioned error."""

from __future__ import annotations

import threading
import time

import pytest

from harness.cases.lint import lint
from harness.check.verdict.judge import judge
from harness.matrix.condition import MAX_TOKENS, ConditionError, parse
from harness.matrix.load import load_matrix
from harness.matrix.pattern import backtracking_shape
from harness.outcomes import Outcome
from harness.results.result import Expectation, LogLine, Observation

# Each passes the load's nested-quantifier check, and backtracks exponentially on the text below.
HOSTILE = [r"(a|a)*$", r"(\w+\s?){1,60}$"]
ALMOST = "a" * 40 + "!"


def in_time(fn, limit_s: float):
    """fn()'s value, or a failure if it has not returned within limit_s (it is left running)."""
    out: list = []

    def call():
        try:
            out.append((fn(), None))
        except Exception as err:  # noqa: BLE001 - handed to the caller
            out.append((None, err))

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(limit_s)
    assert out, f"still running after {limit_s:g} s"
    value, err = out[0]
    if err is not None:
        raise err
    return value


@pytest.mark.parametrize("pattern", HOSTILE)
def test_the_judges_waiver_matching_is_time_bounded(pattern, monkeypatch):
    monkeypatch.setattr("harness.matrix.pattern.PATTERN_BUDGET_S", 0.3)
    exp = Expectation(kind="known-issue", error=pattern, waives=["startup"], link="https://x", owner="o")
    obs = Observation(failed_phase="startup", root_cause=LogLine(log="a", line=1, text=ALMOST))
    t0 = time.monotonic()
    v = in_time(lambda: judge(exp, obs), 30)
    assert v.outcome is Outcome.ERROR and "took more than" in v.reason and pattern in v.reason
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    "pattern, shape",
    [
        (r"(\w|\w|\w|\w)*y", "an alternation under a quantifier"),
        (r"(a|a)*$", "an alternation under a quantifier"),
        (r"(\w+\s?){1,60}$", "a repetition that is itself repeated"),
        (r"(.*a){25}", "a repetition that is itself repeated"),
        (r"HCCL.*(timeout|time out|timed out)", None),
        (r"sum\(partitions\)=\d+ does not match", None),
    ],
)
def test_backtracking_shapes_are_named(pattern, shape):
    assert backtracking_shape(pattern) == shape


@pytest.mark.slow
def test_lint_warns_on_alternation_under_a_quantifier(matrix_dir):
    matrix_dir(
        "cpu/zz-hostile.yaml",
        """\
        rules:
          - when: 'platform == "cpu" && pp > 1 && "prefix-caching" in features && partition == "auto"'
            expect: known-issue
            error: "(a|a)*$"
            waives: [startup]
            link: https://example.invalid/1
            owner: nobody
            until: 2027-03-01
            why: a hostile waiver pattern
        """,
    )
    text = (matrix_dir.root / "cpu/rules.yaml").read_text()
    (matrix_dir.root / "cpu/rules.yaml").unlink()
    (matrix_dir.root / "cpu/zz-rules.yaml").write_text(text)
    report = in_time(lambda: lint(load_matrix(matrix_dir.root)), 120)
    hits = [w for w in map(str, report.warnings) if "alternation under a quantifier" in w]
    assert len(hits) == 1 and "zz-hostile.yaml:2:5" in hits[0], report.warnings


def test_a_huge_condition_fails_fast_with_its_position():
    text = " && ".join(["pp > 1"] * 50_000)
    t0 = time.monotonic()
    with pytest.raises(ConditionError) as err:
        in_time(lambda: parse(text, {"pp": int}), 30)
    assert time.monotonic() - t0 < 5
    assert err.value.reason == f"condition longer than {MAX_TOKENS} tokens; split it into several rules"
    # it points at the first token past the bound, early in the text
    assert err.value.column < 4 * MAX_TOKENS and not text[err.value.column - 1].isspace()
    shown = str(err.value)
    assert len(shown) < 400 and shown.splitlines()[1].startswith("  …")  # a window, not 350 kB
    # a long but real condition still parses
    assert parse(" && ".join(["pp > 1"] * 200), {"pp": int}).evaluate({"pp": 2})


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_lint_warns_on_a_backtracking_silent_disable_pattern_at_its_line(matrix_dir):
    path = matrix_dir(
        "features-hostile.yaml",
        """\
        features:
          hostile-off:
            title: a feature whose silent-disable pattern backtracks
            args: [--enforce-eager]
            silent_disable:
              - "turned off"
              - "(a|a)*$"
        """,
    )
    report = in_time(lambda: lint(load_matrix(matrix_dir.root)), 120)
    (hit,) = [w for w in report.warnings if "feature hostile-off: silent_disable" in str(w)]
    assert hit.where is not None and hit.where.file.endswith(path.name) and hit.where.line == 7, hit

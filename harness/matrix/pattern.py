"""Matching a matrix pattern (a rule's error, a feature's silent_disable, a diagnosis) with a time
budget: every match of a pattern a matrix wrote, anywhere in ppconf (log searches, the judge's
waiver matching, lint), goes through ``Pattern``, so a pattern that backtracks without end ends
in a plain error instead of a hang. The `regex` module's timeout bounds each search."""

from __future__ import annotations

import time

import regex

# The budget is for all the searches one Pattern makes (one search over all the logs it is
# applied to, or one lint question).
PATTERN_BUDGET_S = 2.0


class PatternTimeout(RuntimeError):
    """A matrix pattern took longer than its budget: a harness problem (ERROR), named plainly."""


class Pattern:
    """A matrix pattern whose searches share one time budget."""

    def __init__(self, pattern: str, budget_s: float = PATTERN_BUDGET_S):
        self.pattern = pattern
        self.rx = regex.compile(pattern)
        self.budget_s = budget_s
        self.deadline = time.monotonic() + self.budget_s

    def search(self, text: str) -> bool:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self.rx.search(text, timeout=left) is not None
        except TimeoutError:
            raise PatternTimeout(
                f"pattern /{self.pattern}/ took more than {self.budget_s:g} s to search "
                f"(it backtracks); simplify it in the matrix"
            ) from None


def matches(pattern: str, text: str, budget_s: float = PATTERN_BUDGET_S) -> bool:
    """Whether ``pattern`` finds ``text``, within the budget (PatternTimeout if not)."""
    return Pattern(pattern, budget_s).search(text)

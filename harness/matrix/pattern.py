"""Matching a matrix pattern (a rule's error, a feature's silent_disable, a diagnosis) with a time
budget: every match of a pattern a matrix wrote, anywhere in ppconf (log searches, the judge's
waiver matching, lint), goes through ``Pattern``, so a pattern that backtracks without end ends
in a plain error instead of a hang. The `regex` module's timeout bounds each search."""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]
import re._parser as _parser  # type: ignore[import-not-found]
import time

import regex

# The budget is for all the searches one Pattern makes (one search over all the logs it is
# applied to, or one lint question).
PATTERN_BUDGET_S = 2.0


class PatternTimeout(RuntimeError):
    """A matrix pattern took longer than its budget: a harness problem (ERROR), named plainly."""


class Pattern:
    """A matrix pattern whose searches share one time budget."""

    def __init__(self, pattern: str, budget_s: float | None = None):
        self.pattern = pattern
        self.rx = regex.compile(pattern)
        self.budget_s = PATTERN_BUDGET_S if budget_s is None else budget_s
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


def backtracking_shape(pattern: str) -> str | None:
    """Why ``pattern`` may backtrack for long on a line that almost matches, or None: an
    alternation under a quantifier (``(a|a)*$``), or a repetition repeated, even a bounded number
    of times (``(\\w+\\s?){1,60}$``). The load refuses only unbounded nested quantifiers
    (harness.matrix.schema); lint warns on these, and the time budget bounds them anyway."""
    try:
        parsed = _parser.parse(pattern)
    except re.error:
        return None  # the load says why it does not compile
    return _shape(list(parsed))


def _shape(items: list) -> str | None:
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            _, hi, sub = av
            if hi > 1 and _holds(sub, (_c.BRANCH,)):
                return "an alternation under a quantifier"
            if hi > 1 and _holds(sub, (_c.MAX_REPEAT, _c.MIN_REPEAT), repeat=True):
                return "a repetition that is itself repeated"
            found = _shape(list(sub))
        elif op == _c.BRANCH:
            found = next((f for s in av[1] if (f := _shape(list(s)))), None)
        elif op in (_c.SUBPATTERN, _c.ATOMIC_GROUP, _c.ASSERT, _c.ASSERT_NOT):
            found = _shape(list(av[-1]))
        else:
            found = None
        if found:
            return found
    return None


def _holds(items, ops: tuple, repeat: bool = False) -> bool:
    for op, av in items:
        if op in ops and (not repeat or av[1] > 1):
            return True
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            subs = [av[2]]
        elif op == _c.BRANCH:
            subs = av[1]
        elif op in (_c.SUBPATTERN, _c.ATOMIC_GROUP, _c.ASSERT, _c.ASSERT_NOT):
            subs = [av[-1]]
        else:
            continue
        if any(_holds(s, ops, repeat) for s in subs):
            return True
    return False

"""The vocabulary of verdicts, in one place: what a case can end as, what a rule can claim, and
which outcomes mean what to a run.

Every layer speaks it (the matrix claims kinds, the judge gives outcomes, the results store and
every report read them), so it depends on nothing else of ppconf.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum, StrEnum


class Outcome(str, Enum):
    """What a case ended as, and everything ppconf says about it (lit's ``ResultCode``): reports,
    JUnit, pytest and the exit status ask the outcome instead of keeping tables of their own.

    - ``label``: how a sentence names it ("known issue");
    - ``symbol``: its square in a history strip;
    - ``severity``: which outcome speaks for a cell holding several cases (the highest);
    - ``colour``: the background of its cells on the evidence page, a light tint of its symbol's;
    - ``junit``: the element a JUnit test case gets (``failure``; ``error`` where the harness or the
      infrastructure failed; ``skipped``; or none for a pass, a verified rejection included);
    - ``pytest``: how a conformance item ends (``passed``, ``xfailed``, ``skipped``, ``xpassed``
      — an unexpected pass, failed as pytest's strict XPASS — or ``failed``);
    - ``fails_run``: the product broke a claim, or the harness or infrastructure could not check
      it (the run's exit status, a report's ❗).
    """

    PASS = "PASS"
    FAIL = "FAIL"
    XFAIL = "XFAIL"  # the expected rejection happened, with the expected error, in time
    UNEXPECTED_ACCEPT = "UNEXPECTED_ACCEPT"  # claimed rejected, but it launched and worked
    BAD_REJECT = "BAD_REJECT"  # expected a rejection; got another error, a hang, or a late one
    KNOWN_ISSUE = "KNOWN_ISSUE"
    FLAKY = "FLAKY"
    SKIP = "SKIP"
    ERROR = "ERROR"  # the harness or infrastructure failed, not the system under test

    @property
    def label(self) -> str:
        return self.value.lower().replace("_", " ")

    @property
    def symbol(self) -> str:
        return _FACTS[self.value].symbol

    @property
    def severity(self) -> int:
        return _FACTS[self.value].severity

    @property
    def colour(self) -> str:
        return _FACTS[self.value].colour

    @property
    def junit(self) -> str | None:
        return _FACTS[self.value].junit

    @property
    def pytest(self) -> str:
        return _FACTS[self.value].pytest

    @property
    def fails_run(self) -> bool:
        return self.junit in ("failure", "error")


@dataclass(frozen=True)
class _Facts:
    symbol: str
    severity: int
    colour: str
    junit: str | None
    pytest: str


_FACTS = {
    "PASS": _Facts("🟩", 0, "#d9f2d9", None, "passed"),
    "FAIL": _Facts("🟥", 5, "#f8d0d0", "failure", "failed"),
    "XFAIL": _Facts("🟦", 1, "#dbe6fa", None, "xfailed"),
    "UNEXPECTED_ACCEPT": _Facts("🟫", 7, "#eadbcf", "failure", "xpassed"),
    "BAD_REJECT": _Facts("🟪", 6, "#e8d6f2", "failure", "failed"),
    "KNOWN_ISSUE": _Facts("🟨", 3, "#fdf0c8", "skipped", "xfailed"),
    "FLAKY": _Facts("🟧", 4, "#fde0c2", "skipped", "xfailed"),
    "SKIP": _Facts("⬜", 2, "#f4f4f4", "skipped", "skipped"),
    "ERROR": _Facts("⬛", 8, "#cfcfcf", "error", "failed"),
}


# A case that was not in a run (a cell or strip slot with no outcome): below every outcome, and
# a symbol of its own. A value that names no outcome (a record of a stranger writer) reads as "?".
NOT_RUN_SYMBOL = "·"
NOT_RUN_SEVERITY = -1


def _known(value: str) -> Outcome | None:
    try:
        return Outcome(value)
    except ValueError:
        return None


def severity(value: str | None) -> int:
    """The severity of the outcome a record holds (None: not run)."""
    if value is None:
        return NOT_RUN_SEVERITY
    known = _known(value)
    return known.severity if known else 0


def symbol(value: str | None) -> str:
    if value is None:
        return NOT_RUN_SYMBOL
    known = _known(value)
    return known.symbol if known else "?"


class Kind(StrEnum):
    """What a rule claims about the cases it matches (``expect:`` in the matrix); it reads as its
    matrix spelling (``f"{kind}"`` is ``known-issue``)."""

    SUPPORTED = "supported"
    REJECTED = "rejected"
    UNSUPPORTED_ON_PLATFORM = "unsupported-on-platform"
    KNOWN_ISSUE = "known-issue"
    FLAKY = "flaky"
    UNSPECIFIED = "unspecified"  # no rule matched the case

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        """The verdicts the judge gives this claim (besides ERROR, which any claim can end in when
        the harness or the infrastructure fails): a record pairing the claim with another outcome
        was not judged against it."""
        return VERDICTS[self]


# Groups are tuples, not sets: a plain string from a JSON record must test as a member, and an
# enum member hashes by its name, not its value.
# Outcomes that mean "the claim held" (a report's green), and those that mean it did not, whether
# or not the matrix waived it (known issues and flaky cases do not fail a run).
PASS_LIKE = (Outcome.PASS, Outcome.XFAIL)
FAIL_LIKE = (Outcome.FAIL, Outcome.BAD_REJECT, Outcome.UNEXPECTED_ACCEPT, Outcome.KNOWN_ISSUE, Outcome.FLAKY)
WAIVED = (Outcome.KNOWN_ISSUE, Outcome.FLAKY)
FAILS_RUN = tuple(o for o in Outcome if o.fails_run)
# Claims whose cases launch and are compared with a reference; claims recorded without a launch.
NEEDS_REFERENCE = (Kind.SUPPORTED, Kind.KNOWN_ISSUE, Kind.FLAKY)
NO_LAUNCH = (Kind.UNSUPPORTED_ON_PLATFORM, Kind.UNSPECIFIED)
WAIVER_KINDS = (Kind.KNOWN_ISSUE, Kind.FLAKY)
VERDICTS = {
    Kind.SUPPORTED: (Outcome.PASS, Outcome.FAIL),
    Kind.REJECTED: (Outcome.XFAIL, Outcome.BAD_REJECT, Outcome.UNEXPECTED_ACCEPT),
    Kind.UNSUPPORTED_ON_PLATFORM: (Outcome.SKIP,),
    Kind.KNOWN_ISSUE: (Outcome.PASS, Outcome.FAIL, Outcome.KNOWN_ISSUE),
    Kind.FLAKY: (Outcome.PASS, Outcome.FAIL, Outcome.FLAKY),
    Kind.UNSPECIFIED: (Outcome.SKIP,),
}


class Cause(StrEnum):
    """What an error line of a log is: a refusal the code was written to make (it names what is
    wrong with the configuration), a crash (the code broke on it), or another error (an OSError, a
    plain RuntimeError: neither). Only a refusal meets a claimed rejection."""

    REFUSAL = "refusal"
    CRASH = "crash"
    OTHER = "other"

    @classmethod
    def of(cls, exception: str | None, message: str = "") -> Cause:
        """The cause of an exception, by its class name (a dotted name counts by its last part)
        and, for the classes that serve both, its message."""
        name = (exception or "").rsplit(".", 1)[-1]
        if name in CRASH_CLASSES or (name == "TypeError" and _TYPE_CRASH.search(message)):
            return cls.CRASH
        if name in ("RuntimeError", "DistBackendError", "AcceleratorError") and _DEVICE_CRASH.search(message):
            return cls.CRASH
        if name in REFUSAL_CLASSES:
            return cls.REFUSAL
        return cls.OTHER


# Exception classes that mean the code under test broke, not that it refused a configuration.
CRASH_CLASSES = (
    "AssertionError",
    "ZeroDivisionError",
    "IndexError",
    "KeyError",
    "AttributeError",
    "UnboundLocalError",
    "NameError",
    "RecursionError",
    "MemoryError",
    "OutOfMemoryError",
    "FloatingPointError",
    "SystemError",
    "DistBackendError",
    "AcceleratorError",
)
# Classes that argument and configuration checks raise (vLLM's argparse errors are named
# "argparse" by the log reader, pydantic's and vLLM's config checks raise a ValidationError).
REFUSAL_CLASSES = (
    "ValueError",
    "NotImplementedError",
    "TypeError",
    "ValidationError",
    "ArgumentError",
    "ArgumentTypeError",
    "argparse",
)
# A TypeError that Python raised inside the code, not one an argument check raised with a message.
_TYPE_CRASH = re.compile(
    r"takes \d+ positional argument|got an unexpected keyword argument|missing \d+ required positional"
    r"|unsupported operand type|object is not (callable|subscriptable|iterable)|can't multiply sequence"
    r"|NoneType"
)
# A RuntimeError from the device, its runtime or its collectives: a crash, whatever it says.
_DEVICE_CRASH = re.compile(
    r"CUDA error|CUDA out of memory|device-side assert|NPU (function )?error|ACL error|aclnn\w*|HCCL|NCCL"
    r"|\bE[EIZLKH]\d{4}\b|out of memory|Segmentation fault|illegal memory access"
)

# Signals whose exit means the process crashed (a status of -N from Python, 128+N from a shell).
CRASH_SIGNALS = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}


def crash_signal(status: int | None) -> str | None:
    """The crash signal an exit status reports, or None (a clean exit, or SIGTERM/SIGKILL: the
    signals a stop sends)."""
    if status is None:
        return None
    number = -status if status < 0 else status - 128 if status > 128 else 0
    return CRASH_SIGNALS.get(number)

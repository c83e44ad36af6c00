"""The vocabulary of verdicts, in one place: what a case can end as, what a rule can claim, and
which outcomes mean what to a run.

Every layer speaks it (the matrix claims kinds, the judge gives outcomes, the results store and
every report read them), so it depends on nothing else of ppconf.
"""

from __future__ import annotations

import re
from enum import Enum, StrEnum


class Outcome(str, Enum):
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
    def fails_run(self) -> bool:
        return self in FAILS_RUN


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
# Outcomes that fail a run (its exit status, a report's ❗): the product broke a claim, or the
# harness or infrastructure could not check it.
FAILS_RUN = (Outcome.FAIL, Outcome.UNEXPECTED_ACCEPT, Outcome.BAD_REJECT, Outcome.ERROR)
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

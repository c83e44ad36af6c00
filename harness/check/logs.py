"""Reading server logs: the root cause of a failure, expected rejections, silent disables.

vLLM's API server only says "Engine core initialization failed. See root cause above."; the real
cause is an exception line printed earlier, often by a worker process. So every search covers
all node logs, and wrapper lines never count as a root cause.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import regex

from harness.results.result import LogLine

# Lines that only report that something else failed.
WRAPPERS = re.compile(
    r"Engine core initialization failed|See root cause above|WorkerProc initialization failed"
    r"|WorkerProc hit an exception|Worker proc .* died unexpectedly|EngineDeadError|"
    r"Exception in worker|Traceback \(most recent call last\)|RuntimeError: Engine process failed to start"
)
# "ValueError: ...", "torch.OutOfMemoryError: ...", a bare "AssertionError" — at the start of a message.
EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b(?::|$)")
ASSERT_SOURCE = re.compile(r"^\s*assert\s")
WARNING = re.compile(r"\bWARNING\b")
# vLLM prefixes lines with the process, e.g. "(Worker_PP1 pid=123) ", and logger lines with
# "LEVEL MM-DD HH:MM:SS [file.py:123] ".
PREFIX = re.compile(r"^(\(\w[\w ]*pid=\d+\)\s*)")
HEADER = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\] ")


# Matrix patterns (rule errors, silent_disable, diagnosis) run with the `regex` module's timeout:
# a pattern that backtracks without end must not hang the run. The budget is for one search over
# all the logs it is applied to.
PATTERN_BUDGET_S = 2.0


class PatternTimeout(RuntimeError):
    """A matrix pattern took longer than its budget: a harness problem (ERROR), named plainly."""


class Pattern:
    """A matrix pattern whose searches share one time budget."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.rx = regex.compile(pattern)
        self.budget_s = PATTERN_BUDGET_S
        self.deadline = time.monotonic() + self.budget_s

    def search(self, text: str) -> bool:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self.rx.search(text, timeout=left) is not None
        except TimeoutError:
            raise PatternTimeout(
                f"pattern /{self.pattern}/ took more than {self.budget_s:g} s to search the "
                f"logs (it backtracks); simplify it in the matrix"
            ) from None


def message(line: str) -> tuple[str | None, str]:
    """(log level or None for raw stderr, the message text) of one log line."""
    rest = PREFIX.sub("", line)
    m = HEADER.match(rest)
    return (m.group("level"), rest[m.end() :]) if m else (None, rest)


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def search(logs: dict[str, Path], pattern: str) -> LogLine | None:
    """The first line in any log that matches ``pattern`` (wrapper lines included: the caller's
    pattern decides). Logs are searched in launch order."""
    rx = Pattern(pattern)
    for name, path in logs.items():
        for i, line in enumerate(read_lines(path), 1):
            if rx.search(line):
                return LogLine(log=name, line=i, text=line.strip())
    return None


# Records at these levels report, they do not fail: vLLM's INFO line of non-default arguments
# echoes every flag, so a claimed error pattern must never be found there.
NOT_AN_ERROR = ("DEBUG", "INFO", "WARNING")


def search_errors(logs: dict[str, Path], pattern: str) -> LogLine | None:
    """The first line matching ``pattern`` that can carry an error: an ERROR or CRITICAL record,
    or raw stderr (tracebacks, an exception's continuation lines); never an INFO or WARNING record."""
    rx = Pattern(pattern)
    for name, path in logs.items():
        for i, line in enumerate(read_lines(path), 1):
            if message(line)[0] not in NOT_AN_ERROR and rx.search(line):
                return LogLine(log=name, line=i, text=line.strip())
    return None


def root_cause(logs: dict[str, Path]) -> LogLine | None:
    """The first exception line (an ERROR record or raw stderr, never a warning) that is not a
    wrapper. For a bare ``AssertionError`` the ``assert`` source line printed above it is added."""
    for name, path in logs.items():
        lines = read_lines(path)
        for i, line in enumerate(lines, 1):
            level, text = message(line)
            if level not in (None, "ERROR", "CRITICAL") or WRAPPERS.search(text) or not EXCEPTION.match(text):
                continue
            text = text.strip()
            if text == "AssertionError":
                for back in range(i - 2, max(i - 6, -1), -1):
                    source = message(lines[back])[1]
                    if ASSERT_SOURCE.search(source):
                        text = f"AssertionError ({source.strip()})"
                        break
            return LogLine(log=name, line=i, text=text)
    return None


def warnings_matching(logs: dict[str, Path], patterns: list[str]) -> list[LogLine]:
    found = []
    for pattern in patterns:
        rx = Pattern(pattern)
        for name, path in logs.items():
            for i, line in enumerate(read_lines(path), 1):
                if WARNING.search(line) and rx.search(line):
                    found.append(LogLine(log=name, line=i, text=line.strip()))
                    break
    return found


def excerpt(path: Path, number: int, before: int = 5, after: int = 5) -> list[str]:
    lines = read_lines(path)
    lo = max(0, number - 1 - before)
    return lines[lo : number + after]

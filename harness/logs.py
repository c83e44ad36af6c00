"""Reading server logs: the root cause of a failure, expected rejections, silent disables.

vLLM's API server only says "Engine core initialization failed. See root cause above."; the real
cause is an exception line printed earlier, often by a worker process. So every search covers
all node logs, and wrapper lines never count as a root cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Lines that only report that something else failed.
WRAPPERS = re.compile(
    r"Engine core initialization failed|See root cause above|WorkerProc initialization failed"
    r"|WorkerProc hit an exception|Worker proc .* died unexpectedly|EngineDeadError|"
    r"Exception in worker|Traceback \(most recent call last\)|RuntimeError: Engine process failed to start"
)
EXCEPTION = re.compile(r"\b((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)|AssertionError|NotImplementedError)\b:?(.*)$")
ASSERT_SOURCE = re.compile(r"^\s*assert\s")
WARNING = re.compile(r"\bWARNING\b")
# One log line carries a process prefix like "(Worker_PP1 pid=123) "; strip it when quoting.
PREFIX = re.compile(r"^(\(\w[\w ]*pid=\d+\)\s*)")


@dataclass(frozen=True)
class LogLine:
    log: str  # launch name
    number: int  # 1-based
    text: str

    def __str__(self) -> str:
        return f"{self.log}:{self.number}: {self.text}"

    def to_json(self) -> dict:
        return {"log": self.log, "line": self.number, "text": self.text}


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


def search(logs: dict[str, Path], pattern: str) -> LogLine | None:
    """The first line in any log that matches ``pattern`` (wrapper lines included: the caller's
    pattern decides). Logs are searched in launch order."""
    rx = re.compile(pattern)
    for name, path in logs.items():
        for i, line in enumerate(read_lines(path), 1):
            if rx.search(line):
                return LogLine(name, i, line.strip())
    return None


def root_cause(logs: dict[str, Path]) -> LogLine | None:
    """The first exception line in any log that is not a wrapper; for a bare assertion, the
    ``assert`` source line printed just above it says more, so it is returned instead."""
    best: LogLine | None = None
    for name, path in logs.items():
        lines = read_lines(path)
        for i, line in enumerate(lines, 1):
            if WRAPPERS.search(line) or not EXCEPTION.search(line):
                continue
            if "Error" not in line and "Exception" not in line:
                continue
            text = line.strip()
            if re.search(r"AssertionError\s*$", text):
                for back in range(i - 2, max(i - 6, -1), -1):
                    if ASSERT_SOURCE.search(PREFIX.sub("", lines[back])):
                        text = f"{text} ({PREFIX.sub('', lines[back]).strip()})"
                        break
            best = LogLine(name, i, text)
            break
        if best:
            return best
    return best


def warnings_matching(logs: dict[str, Path], patterns: list[str]) -> list[LogLine]:
    found = []
    for pattern in patterns:
        rx = re.compile(pattern)
        for name, path in logs.items():
            for i, line in enumerate(read_lines(path), 1):
                if WARNING.search(line) and rx.search(line):
                    found.append(LogLine(name, i, line.strip()))
                    break
    return found


def excerpt(path: Path, number: int, before: int = 5, after: int = 5) -> list[str]:
    lines = read_lines(path)
    lo = max(0, number - 1 - before)
    return lines[lo:number + after]

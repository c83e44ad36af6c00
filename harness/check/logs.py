"""Reading server logs: the root cause of a failure, expected rejections, silent disables.

vLLM's API server only says "Engine core initialization failed. See root cause above."; the real
cause is an exception line printed earlier, often by a worker process. So every search covers
all node logs, and wrapper lines never count as a root cause.
"""

from __future__ import annotations

import re
from pathlib import Path

# matrix patterns run with the time budget of harness.matrix.pattern (re-exported for the checks)
from harness.matrix.pattern import PATTERN_BUDGET_S as PATTERN_BUDGET_S
from harness.matrix.pattern import Pattern as Pattern
from harness.matrix.pattern import PatternTimeout as PatternTimeout
from harness.outcomes import Cause
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


# Where a traceback's frames are: a line inside them (a source line) belongs to the exception the
# traceback ends in, not to one above it.
FRAME = re.compile(r'^\s*File "[^"]*", line \d+|^Traceback \(most recent call last\)')
# vLLM's argument parser: "usage: vllm serve ..." then "vllm serve: error: argument ...".
ARGPARSE = re.compile(r"^(?:usage: \S|[\w.-]+(?: [\w.-]+)?: error: )")
CONTEXT = 40  # lines searched either side of a line for the exception it belongs to


def message(line: str) -> tuple[str | None, str]:
    """(log level or None for raw stderr, the message text) of one log line."""
    rest = PREFIX.sub("", line)
    m = HEADER.match(rest)
    return (m.group("level"), rest[m.end() :]) if m else (None, rest)


def _exception(text: str) -> str | None:
    """The exception class a message starts with ("argparse" for the argument parser's error)."""
    m = EXCEPTION.match(text)
    if m:
        return m.group(0).rstrip(":")
    return "argparse" if ARGPARSE.match(text) else None


def _origin(line: str) -> str:
    # what a line carries before its message: one multi-line record (a logged traceback, a
    # pydantic error block) repeats the same process prefix and logger header on every line
    # (the indentation the process prefix swallows is not part of it)
    return line[: len(line) - len(message(line)[1])].rstrip()


def classify(lines: list[str], index: int) -> tuple[str | None, Cause]:
    """The exception the line at ``index`` (0-based) belongs to, and its cause: the line's own
    class; else the class of the message it continues (a pydantic block, a multi-line message:
    the header above it, in the same record); else, for a line inside a traceback's frames (an
    ``assert`` source line), the class the traceback ends in."""
    text = message(lines[index])[1]
    name = _exception(text)
    if name is None:
        origin = _origin(lines[index])
        inside = False
        for j in range(index - 1, max(index - CONTEXT, -1), -1):
            if _origin(lines[j]) != origin:
                continue
            above = message(lines[j])[1]
            if not above.strip() or FRAME.match(above):
                inside = bool(above.strip())
                break
            name = _exception(above)
            if name:
                text = above
                break
        if name is None and (inside or FRAME.match(text)):
            for j in range(index + 1, min(index + CONTEXT, len(lines))):
                below = message(lines[j])[1]
                if _origin(lines[j]) == origin and (name := _exception(below)):
                    text = below
                    break
    return name, Cause.of(name, text)


# A traceback's frame line: 'File "path", line N, in function'.
FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+, in \S+')
TRACEBACK_LINES = 400  # how far above its exception line a traceback's first frame may be
FRAMES_KEPT = 12  # the innermost frames a record keeps


def frames(lines: list[str], index: int) -> list[str]:
    """The frames of the traceback that the exception line at ``index`` (0-based) ends, innermost
    last: the 'File "...", line N, in f' lines of the same record above it, up to its
    "Traceback (most recent call last)" header; [] for an exception logged without one."""
    own = _frames_above(lines, index)
    if own:
        return own
    # an exception logged first and then with its traceback (vLLM's worker: "WorkerProc hit an
    # exception." then the chain, ending in the same line): the traceback of that later line
    origin, text = _origin(lines[index]), message(lines[index])[1].strip()
    for j in range(index + 1, min(index + TRACEBACK_LINES, len(lines))):
        if _origin(lines[j]) == origin and message(lines[j])[1].strip() == text:
            return _frames_above(lines, j)
    return []


def _frames_above(lines: list[str], index: int) -> list[str]:
    origin = _origin(lines[index])
    found: list[str] = []
    for j in range(index - 1, max(index - TRACEBACK_LINES, -1), -1):
        if _origin(lines[j]) != origin:
            continue
        text = message(lines[j])[1]
        if text.startswith("Traceback (most recent call last)"):
            return found[:FRAMES_KEPT][::-1]
        if _exception(text.strip()) and not FRAME_LINE.match(text):
            break  # the line ending an earlier traceback: this exception has none of its own above
        if FRAME_LINE.match(text):
            found.append(text.strip())
    return []


def _line(name: str, lines: list[str], index: int, text: str | None = None) -> LogLine:
    exception, cause = classify(lines, index)
    return LogLine(
        log=name,
        line=index + 1,
        text=text or lines[index].strip(),
        exception=exception,
        cause=cause,
        frames=frames(lines, index) if _exception(message(lines[index])[1].strip()) else [],
    )


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
        lines = read_lines(path)
        for i, line in enumerate(lines):
            if message(line)[0] not in NOT_AN_ERROR and rx.search(line):
                return _line(name, lines, i)
    return None


def root_cause(logs: dict[str, Path]) -> LogLine | None:
    """The first exception line (an ERROR record or raw stderr, never a warning) that is not a
    wrapper, with its class and cause. For a bare ``AssertionError`` the ``assert`` source line
    printed above it is added."""
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
            return _line(name, lines, i - 1, text)
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

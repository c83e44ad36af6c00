"""A failure's text with what differs between two occurrences of it taken out (addresses, pids,
times, paths, hashes, durations), so the same failure reads the same across cases, stacks and
runs: what ``ppconf triage`` clusters on and ``ppconf shrink`` compares signatures with."""

from __future__ import annotations

import re

# In order: what varies between two occurrences of one failure, and what it becomes.
NORMALISE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r)
    for p, r in (
        (r"\x1b\[[0-?]*[ -/]*[@-~]", ""),  # terminal colours
        (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>"),
        (r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<time>"),
        (r"\b\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?", "<time>"),  # vLLM's log prefix
        (r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>"),
        (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<addr>"),
        (r"\[::1?\](?::\d+)?|\blocalhost:\d+", "<addr>"),
        (r"\b0x[0-9a-f]+\b", "<hex>"),
        (r"(?<![\w.])(?:[~.]?/[\w.@+=:,-]+){2,}/?", "<path>"),
        (r"\b(pid|process|pgid|worker_pid)([ =:]+)\d+", r"\1\2<pid>"),
        (r"\(pid=\d+\)", "(pid=<pid>)"),
        (r"\bport[ =:]+\d+", "port <port>"),
        (r"\b[0-9a-f]{12,}\b", "<hash>"),
        (r"\b\d+(?:\.\d+)?\s?(?:s|ms|seconds?)\b", "<n> s"),
        (r"\s+", " "),
    )
)


def normalise(text: str) -> str:
    """``text`` with what differs between occurrences of one failure taken out, on one line."""
    for rx, repl in NORMALISE:
        text = rx.sub(repl, text)
    return text.strip()

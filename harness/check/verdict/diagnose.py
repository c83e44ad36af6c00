"""Classifying a failure with the matrix's diagnosis table (symptom -> advice)."""

from __future__ import annotations

from pathlib import Path

from harness.check import logs
from harness.matrix.schema import DiagnosisRule

UNCLASSIFIED = {
    "symptom": "unclassified",
    "advice": "No known symptom matched; start from the root cause and the logs of each node.",
}


def diagnose(table: list[DiagnosisRule], texts: list[str], log_paths: dict[str, Path]) -> dict[str, str]:
    """The first entry whose pattern matches the verdict's own texts, else any node log line."""
    for entry in table:
        for pattern in entry.patterns:
            rx = logs.Pattern(pattern)
            hit = next((t for t in texts if t and rx.search(t)), None)
            if hit is None:
                line = logs.search(log_paths, pattern)
                hit = str(line) if line else None
            if hit is not None:
                out = {"symptom": entry.symptom, "advice": entry.advice, "evidence": hit[:500]}
                if entry.link:
                    out["link"] = entry.link
                return out
    return dict(UNCLASSIFIED)

"""Keeping secrets out of results, logs quoted in reports, and rendered pages."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
MASK = "***"


def env(values: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if SECRET_NAME.search(k) and v else v) for k, v in values.items()}


def text(s: str, secrets: list[str]) -> str:
    """``s`` with every known secret value masked."""
    for value in sorted((v for v in secrets if len(v) >= 4), key=len, reverse=True):
        s = s.replace(value, MASK)
    return s

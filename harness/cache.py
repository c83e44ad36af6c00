"""Where ppconf keeps what it builds or measures between runs: ``$PPCONF_CACHE``, else
``~/.cache/ppconf`` (tiny models, installed engine stacks, the engine's model answers, this
host's read rate)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("PPCONF_CACHE") or Path.home() / ".cache" / "ppconf")

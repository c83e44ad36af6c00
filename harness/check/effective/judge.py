"""Judging the configuration the engine built against what each claimed feature needs of it.

Pure: it reads an ``EffectiveConfig`` (``harness.check.effective.read`` fills it from a live
deployment) and the features' ``Requirement``s (``effective:`` in features.yaml). A feature is
"disabled by the engine" when a process reports one of its fields with another value, or no
process has the field at all (an engine that does not know a setting does not apply it).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from harness.matrix.effective import CONFIG_SECTIONS, WORKER_SECTIONS, Requirement
from harness.results.result import EffectiveConfig, EngineDisabled

# The same rules as the stage probe's flattening (harness.target.worker_probe.flatten_config), for the
# API server's JSON: a test holds the two to one output (SKIP is the probe's _EFFECTIVE_SKIP).
DEPTH = 3
LIST = 32
SKIP = r"token$|secret|password|api_key|^hf_config$|^hf_text_config$|^static_|^traced_files$|_time$"


def flatten(config: Mapping[str, Any]) -> dict[str, Any]:
    """The sections ppconf reads of a VllmConfig as JSON (``/server_info``), as dotted names."""
    import re

    skip = re.compile(SKIP, re.I)
    out: dict[str, Any] = {}

    def walk(value: Any, name: str, depth: int) -> None:
        if isinstance(value, dict):
            if depth >= DEPTH or not value:
                out[name] = "<dict>" if value else None
                return
            for key, child in value.items():
                if not str(key).startswith("_") and not skip.search(str(key)):
                    walk(child, f"{name}.{key}", depth + 1)
        elif isinstance(value, list):
            plain = all(v is None or isinstance(v, (bool, int, float, str)) for v in value)
            out[name] = value if plain and len(value) <= LIST else f"<{len(value)} items>"
        else:
            out[name] = value

    for section in CONFIG_SECTIONS:
        walk(config.get(section), section, 0)
    return out


def worker_differences(api: Mapping[str, Any], worker: Mapping[str, Any]) -> dict[str, Any]:
    """What a worker reports that the API server does not, or reports otherwise."""
    return {k: v for k, v in worker.items() if k not in api or api[k] != v or type(api[k]) is not type(v)}


def views(eff: EffectiveConfig) -> dict[str, dict[str, Any]]:
    """Each process's whole configuration, by who reported it: every worker's where workers
    answered (enums by name; the engine runs there), else the API server's."""
    if eff.workers:
        return {f"rank {rank}": {**eff.api, **fields} for rank, fields in eff.workers.items()}
    return {"api server": dict(eff.api)} if eff.api else {}


def _unset_parent(field: str, view: Mapping[str, Any]) -> str | None:
    """The enclosing section a view reports as unset (``speculative_config`` is null without a
    drafter), or None."""
    parts = field.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        if parent in view and view[parent] is None:
            return parent
    return None


def disabled(needs: Mapping[str, list[Requirement]], eff: EffectiveConfig) -> list[EngineDisabled]:
    """Each claimed feature's first field that some process says is off, with that process's
    value; [] where no process answered (nothing to judge) or every field holds."""
    seen = views(eff)
    if not seen:
        return []
    out = []
    for feature, reqs in needs.items():
        for req in reqs:
            if req.field.split(".", 1)[0] in WORKER_SECTIONS and not eff.workers:
                continue  # only a worker knows its model runner and platform
            found = _off(feature, req, seen)
            if found is not None:
                out.append(found)
                break
    return out


def _off(feature: str, req: Requirement, seen: Mapping[str, Mapping[str, Any]]) -> EngineDisabled | None:
    for source, view in seen.items():
        if req.field in view:
            if not req.holds(view[req.field]):
                return _record(feature, req.field, req.describe(), view[req.field], source)
            continue
        parent = _unset_parent(req.field, view)
        if parent is not None:
            return _record(feature, parent, req.describe(), None, source)
    if any(req.field in view for view in seen.values()):
        return None
    names = sorted({k for view in seen.values() for k in view})
    close = difflib.get_close_matches(req.field, names, n=1, cutoff=0.6)
    return EngineDisabled(
        feature=feature,
        field=req.field,
        needs=req.describe(),
        source=f"closest field: {close[0]}" if close else "",
        missing=True,
    )


def _record(feature: str, field: str, needs: str, value: Any, source: str) -> EngineDisabled:
    # through JSON, so the record keeps a value of false or null: it is the evidence
    return EngineDisabled.of({"feature": feature, "field": field, "needs": needs, "value": value, "source": source})


def describe(d: EngineDisabled) -> str:
    """The verdict's words for one disabled feature (on a P/D pair, with the side that runs it)."""
    feature = f"{d.feature} on the {d.instance} instance" if d.instance else d.feature
    if d.missing:
        where = f" ({d.source})" if d.source else ""
        return (
            f"{feature}: disabled by the engine: its configuration has no field {d.field}{where}; "
            f"the feature needs {d.needs}"
        )
    value = "null" if d.value is None else d.value
    return f"{feature}: disabled by the engine: {d.field} = {value} ({d.source}); the feature needs {d.needs}"

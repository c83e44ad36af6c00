"""An explicit phase's answers against the reference's: request by request, each by its
endpoint's rule; counted as the other phases count (exact, tied, mismatched)."""

from __future__ import annotations

from typing import Any

from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare
from harness.registry import ENDPOINTS


def compare_explicit(
    compare: Compare, requests: tuple[ExplicitRequest, ...], ref: list[dict[str, Any]], got: list[dict[str, Any]]
) -> dict[str, Any]:
    refs = {a["request"]: a for a in ref}
    gots = {a["request"]: a for a in got}
    counts = {"requests": len(requests), "exact": 0, "tied": 0, "mismatched": 0}
    ties: list[dict[str, Any]] = []
    diffs: list[dict[str, Any]] = []
    for req in requests:
        label = req.name or ""
        r, g = refs.get(label), gots.get(label)
        if r is None or g is None:
            counts["mismatched"] += 1
            diffs.append({"request": label, "why": f"no answer from {'the reference' if r is None else 'the case'}"})
            continue
        verdict = ENDPOINTS[req.endpoint].compare(compare, req, r, g)
        if verdict.whys:
            counts["mismatched"] += 1
            diffs.append({"request": label, "why": f"{req.endpoint}: {'; '.join(verdict.whys)}"})
        elif verdict.ties:
            counts["tied"] += 1
            ties += verdict.ties
        else:
            counts["exact"] += 1
    return counts | {"ties": ties, "diffs": diffs}

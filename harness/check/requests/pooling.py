"""Pooling endpoints: embeddings by cosine similarity (at least ``cosine_min``), scores, rerank
relevances and class probabilities by absolute difference (at most ``score_tolerance``), item by
item in the order of their ``index``; a classification's label must be equal."""

from __future__ import annotations

from typing import Any

from harness.check.requests.endpoint import Endpoint, RuleVerdict
from harness.check.traffic.compare import cosine
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare


def _items(answer: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return sorted(answer["body"].get(key) or [], key=lambda d: d.get("index", 0))


def _counts(ref: list[Any], got: list[Any], what: str) -> list[str]:
    return [] if len(ref) == len(got) else [f"{len(got)} {what}, the reference {len(ref)}"]


def _within(what: str, ref: list[float], got: list[float], tolerance: float) -> list[str]:
    if len(ref) != len(got):
        return [f"{what}: {len(got)} values, the reference {len(ref)}"]
    worst = max((abs(a - b) for a, b in zip(ref, got, strict=True)), default=0.0)
    return [f"{what}: |Δ| {worst:.3g} > {tolerance:g}"] if worst > tolerance else []


class _Embeddings(Endpoint):
    path = "/v1/embeddings"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        r, g = _items(ref, "data"), _items(got, "data")
        whys = _counts(r, g, "embeddings")
        for i, (a, b) in enumerate(zip(r, g, strict=False)):
            va, vb = a["embedding"], b["embedding"]
            if len(va) != len(vb):
                whys.append(f"embedding {i}: dimension {len(vb)}, the reference {len(va)}")
            elif (c := cosine(va, vb)) < compare.cosine_min:
                whys.append(f"embedding {i}: cosine {c:.6f} < {compare.cosine_min:g}")
        return RuleVerdict(whys)


class _Classify(Endpoint):
    path = "/classify"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        r, g = _items(ref, "data"), _items(got, "data")
        whys = _counts(r, g, "classifications")
        for i, (a, b) in enumerate(zip(r, g, strict=False)):
            if a.get("label") != b.get("label"):
                whys.append(f"input {i}: label {b.get('label')!r}, the reference {a.get('label')!r}")
            whys += _within(f"input {i}: class probabilities", a["probs"], b["probs"], compare.score_tolerance)
        return RuleVerdict(whys)


class _Score(Endpoint):
    path = "/score"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        r, g = _items(ref, "data"), _items(got, "data")
        whys = _counts(r, g, "scores")
        if not whys:
            whys = _within("scores", [a["score"] for a in r], [b["score"] for b in g], compare.score_tolerance)
        return RuleVerdict(whys)


class _Rerank(Endpoint):
    """Relevance by document (its ``index``); the order given must be the reference's wherever the
    reference's scores are further apart than the tolerance."""

    path = "/rerank"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        r, g = ref["body"].get("results") or [], got["body"].get("results") or []
        whys = _counts(r, g, "results")
        if whys:
            return RuleVerdict(whys)
        by_doc = {x["index"]: x["relevance_score"] for x in r}
        mine = {x["index"]: x["relevance_score"] for x in g}
        if set(by_doc) != set(mine):
            return RuleVerdict([f"documents {sorted(mine)} ranked, the reference {sorted(by_doc)}"])
        docs = sorted(by_doc)
        whys = _within("relevance scores", [by_doc[d] for d in docs], [mine[d] for d in docs], compare.score_tolerance)
        order, theirs = [x["index"] for x in g], [x["index"] for x in r]
        steps = zip(theirs, theirs[1:], strict=False)
        apart = all(abs(by_doc[a] - by_doc[b]) > compare.score_tolerance for a, b in steps)
        if order != theirs and apart:
            whys.append(f"documents ranked {order}, the reference {theirs}")
        return RuleVerdict(whys)


EMBEDDINGS = _Embeddings()
CLASSIFY = _Classify()
SCORE = _Score()
RERANK = _Rerank()

"""A case's outputs and its reference's: what is requested of both, and how they are compared.

Both sides answer the same requests (the suite's prompts as text, some streamed, and the same
prompts as token ids), sampled the same way (greedy, or seeded sampling). The comparison mode is
data (``matrix.schema.Compare``) and is named in the evidence with the numbers that decided it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.check.serving.client import Completion, Sampling
from harness.check.serving.live import LiveDeployment
from harness.check.traffic.phases import PhaseOutputs
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Accuracy, Compare
from harness.registry import ENDPOINTS


@dataclass
class Outputs:
    completions: list[Completion] = field(default_factory=list)
    embeddings: list[list[float]] = field(default_factory=list)
    # the prompts as token ids, tokenised once by the case's server and sent as they are to both
    id_prompts: list[list[int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    score: dict[str, Any] | None = None  # the task score measured on this server, when one was asked
    phases: dict[str, PhaseOutputs] = field(default_factory=dict)  # the workload's phases, by name
    # a sequence classifier's answers (pooling ``classify``): each prompt's label and class probs
    classes: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "completions": [c.to_json() for c in self.completions],
            "embeddings": self.embeddings,
            **({"classes": self.classes} if self.classes else {}),
            "id_prompts": self.id_prompts,
            "notes": self.notes,
            "score": self.score,
            "phases": {k: v.to_json() for k, v in self.phases.items()},
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Outputs:
        return Outputs(
            [Completion.from_json(c) for c in d.get("completions") or []],
            [list(map(float, v)) for v in d.get("embeddings") or []],
            [list(map(int, p)) for p in d.get("id_prompts") or []],
            list(d.get("notes") or []),
            d.get("score"),
            {k: PhaseOutputs.from_json(v) for k, v in (d.get("phases") or {}).items()},
            [{"label": c["label"], "probs": list(map(float, c["probs"]))} for c in d.get("classes") or []],
        )


def sampling_of(compare: Compare) -> Sampling:
    if compare.mode == "seeded":
        return Sampling(temperature=compare.temperature, seed=compare.seed, top_logprobs=compare.top_logprobs)
    return Sampling(top_logprobs=compare.top_logprobs)


def request_shape(
    accuracy: Accuracy, compare: Compare, pooling: str, phases: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What was asked of a server: outputs are comparable only between equal shapes. ``phases``:
    the workload's phases after the sequential requests, as planned (none: the shape is the one
    recorded before workloads existed)."""
    s = sampling_of(compare)
    extra = {"phases": phases} if phases else {}
    return (
        extra
        | {
            "prompts": list(accuracy.prompts),
            "max_tokens": accuracy.max_tokens,
            "streamed": accuracy.streamed,
            "temperature": s.temperature,
            "seed": s.seed,
            "top_logprobs": s.top_logprobs,
            "token_id_prompts": compare.token_id_prompts,
            "pooling": bool(pooling),
        }
        | ({"pooled": pooling} if pooling and pooling != "embed" else {})
    )


def collect(
    live: LiveDeployment,
    accuracy: Accuracy,
    compare: Compare,
    pooling: str,
    id_prompts: list[list[int]] | None = None,
) -> Outputs:
    """Ask a ready deployment the sequential requests. The prompts sent as token ids are
    ``id_prompts`` where given (the case's tokenisation, sent to its reference as they are), else
    this server's own tokenisation of them."""
    model = live.model_name or ""
    out = Outputs()
    if pooling == "classify":
        out.classes = [live.client.classify(model, p) for p in accuracy.prompts]
        return out
    if pooling:
        out.embeddings = [live.client.embed(model, p) for p in accuracy.prompts]
        return out
    sampling = sampling_of(compare)
    n = accuracy.max_tokens
    out.completions = [live.client.complete(model, p, n, sampling, f"text:{i}") for i, p in enumerate(accuracy.prompts)]
    out.completions += [
        live.client.complete_streamed(model, p, n, sampling, f"stream:{i}")
        for i, p in enumerate(accuracy.prompts[: accuracy.streamed])
    ]
    if compare.token_id_prompts:
        if id_prompts is None:
            try:
                id_prompts = [live.client.tokenize(model, p) for p in accuracy.prompts]
            except Exception as err:  # noqa: BLE001 — a server without /tokenize (a P/D proxy) gives none
                out.notes.append(f"prompts not sent as token ids: /tokenize failed ({type(err).__name__}: {err})")
                id_prompts = []
        out.id_prompts = id_prompts
        out.completions += [
            live.client.complete(model, ids, n, sampling, f"ids:{i}") for i, ids in enumerate(id_prompts)
        ]
    return out


def _first_mismatch(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if i is None and len(a) != len(b):
        i = min(len(a), len(b))
    return i


def pair(compare: Compare, ref: Completion, got: Completion) -> dict[str, Any]:
    """One request's verdict: {"ok", "first_divergence", "max_logprob_diff", "why"}."""
    first = _first_mismatch(ref.token_ids, got.token_ids)
    upto = len(ref.token_ids) if first is None else first
    delta = max((abs(a - b) for a, b in list(zip(ref.logprobs, got.logprobs, strict=False))[:upto]), default=0.0)
    mode = compare.mode
    why = ""
    if mode == "non-empty":
        ok = len(got.token_ids) > 0 and bool(got.text)
        why = "" if ok else "empty output"
    elif mode == "seeded":
        ok = first is None
        why = "" if ok else f"sampled token ids diverge at token {first}"
    elif mode == "first-divergence":
        ok = first is None or first >= compare.diverge_after
        why = "" if ok else f"token ids diverge at token {first}, before token {compare.diverge_after}"
    elif mode == "logprob":
        ok = delta <= compare.logprob_tolerance
        why = "" if ok else f"|Δlogprob| {delta:.3g} before any divergence exceeds {compare.logprob_tolerance:g}"
        if ok and first is not None:
            r_top = ref.top[first] if first < len(ref.top) else {}
            g_top = got.top[first] if first < len(got.top) else {}
            r_id = ref.token_ids[first] if first < len(ref.token_ids) else None
            g_id = got.token_ids[first] if first < len(got.token_ids) else None
            near_tie = r_id is not None and g_id is not None and g_id in r_top and r_id in g_top
            ok = near_tie
            why = (
                ""
                if ok
                else (
                    f"token ids diverge at token {first} and the two picks are not a near-tie "
                    f"(each outside the other's top {compare.top_logprobs})"
                )
            )
    else:  # exact
        ok = first is None and ref.text == got.text and delta <= compare.logprob_tolerance
        if first is not None:
            why = f"token ids diverge at token {first}"
        elif ref.text != got.text:
            why = "texts differ with equal token ids"
        elif not ok:
            why = f"|Δlogprob| {delta:.3g} exceeds {compare.logprob_tolerance:g}"
    return {"ok": ok, "first_divergence": first, "max_logprob_diff": delta, "why": why}


def compare_outputs(compare: Compare, ref: Outputs, got: Outputs, pooling: str) -> dict[str, Any]:
    """The evidence of one comparison; ``equal`` is its verdict."""
    if pooling == "classify":
        return _compare_classes(compare, ref.classes, got.classes)
    if pooling:
        return _compare_embeddings(compare, ref.embeddings, got.embeddings)
    refs = {c.label or f"#{i}": c for i, c in enumerate(ref.completions)}
    gots = {c.label or f"#{i}": c for i, c in enumerate(got.completions)}
    skipped = ""
    if not ref.id_prompts or not got.id_prompts:
        # one side could not tokenise (a P/D proxy has no /tokenize): compare the text prompts only
        dropped = sorted(k for k in set(refs) | set(gots) if k.startswith("ids:"))
        refs = {k: v for k, v in refs.items() if k not in dropped}
        gots = {k: v for k, v in gots.items() if k not in dropped}
        skipped = f"; {len(dropped)} token-id requests not compared (one side could not tokenise)" if dropped else ""
    diffs: list[dict[str, Any]] = []
    worst = 0.0
    firsts: list[int] = []
    for label in sorted(set(refs) | set(gots)):
        if label not in refs or label not in gots:
            diffs.append({"request": label, "why": "answered by only one side"})
            continue
        r, g = refs[label], gots[label]
        v = pair(compare, r, g)
        worst = max(worst, v["max_logprob_diff"])
        if v["first_divergence"] is not None:
            firsts.append(v["first_divergence"])
        if not v["ok"]:
            diffs.append(
                {
                    "request": label,
                    "prompt": r.prompt,
                    "why": v["why"],
                    "first_token_mismatch": v["first_divergence"],
                    "baseline_ids": list(r.token_ids),
                    "observed_ids": list(g.token_ids),
                    "max_logprob_diff": v["max_logprob_diff"],
                }
            )
    equal = not diffs and bool(refs)
    n = len(refs)
    divergence = f", first divergence at token {min(firsts)}" if firsts else ", no divergence"
    head = f"{mode_name(compare)}: " + (f"{n} requests agree" if equal else f"{len(diffs)} of {n} requests differ")
    if not refs:
        head = f"{mode_name(compare)}: the reference has no outputs to compare with"
    return {
        "mode": compare.mode,
        "equal": equal,
        "requests": n,
        "max_logprob_diff": worst,
        "first_divergence": min(firsts) if firsts else None,
        "tolerance": compare.logprob_tolerance,
        "summary": f"{head}, max |Δlogprob| {worst:.3g}{divergence}{skipped}",
        "diffs": diffs,
    }


def mode_name(compare: Compare) -> str:
    return {
        "exact": f"exact token ids and text (|Δlogprob| ≤ {compare.logprob_tolerance:g})",
        "logprob": f"logprobs within {compare.logprob_tolerance:g}, near-tie divergence allowed",
        "first-divergence": f"no divergence before token {compare.diverge_after}",
        "seeded": f"seeded sampling (seed {compare.seed}, temperature {compare.temperature:g}) exact",
        "non-empty": "non-empty output",
    }[compare.mode]


def cosine(a: list[float], b: list[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def _compare_embeddings(compare: Compare, ref: list[list[float]], got: list[list[float]]) -> dict[str, Any]:
    base = {"mode": "cosine", "cosine_min": compare.cosine_min, "requests": len(ref)}
    if not ref:
        return base | {
            "equal": False,
            "summary": "cosine: the reference has no embeddings to compare with",
            "diffs": [],
        }
    if len(ref) != len(got) or any(len(a) != len(b) for a, b in zip(ref, got, strict=True)):
        return base | {
            "equal": False,
            "diffs": [],
            "summary": f"cosine: shape differs from the reference: {[len(v) for v in got]} vs {[len(v) for v in ref]}",
        }
    cosines = [cosine(a, b) for a, b in zip(ref, got, strict=True)]
    worst = min(cosines)
    equal = worst >= compare.cosine_min
    diffs = [
        {"request": f"embed:{i}", "why": f"cosine {c:.6f} < {compare.cosine_min:g}"}
        for i, c in enumerate(cosines)
        if c < compare.cosine_min
    ]
    return base | {
        "equal": equal,
        "min_cosine": worst,
        "diffs": diffs,
        "summary": f"cosine: {len(got)} embeddings of dimension {len(got[0])}, min cosine {worst:.6f} "
        f"(≥ {compare.cosine_min:g} needed)",
    }


def _compare_classes(compare: Compare, ref: list[dict[str, Any]], got: list[dict[str, Any]]) -> dict[str, Any]:
    """A classifier's answers: the same label, each class probability within ``score_tolerance``."""
    base = {"mode": "classes", "score_tolerance": compare.score_tolerance, "requests": len(ref)}
    if not ref or len(ref) != len(got):
        why = "the reference has no classifications" if not ref else f"{len(got)} answers, the reference {len(ref)}"
        return base | {"equal": False, "diffs": [], "summary": f"classes: {why} to compare with"}
    diffs, worst = [], 0.0
    for i, (r, g) in enumerate(zip(ref, got, strict=True)):
        whys = [f"label {g['label']!r}, the reference {r['label']!r}"] if r["label"] != g["label"] else []
        if len(r["probs"]) != len(g["probs"]):
            whys.append(f"{len(g['probs'])} classes, the reference {len(r['probs'])}")
        else:
            delta = max((abs(a - b) for a, b in zip(r["probs"], g["probs"], strict=True)), default=0.0)
            worst = max(worst, delta)
            if delta > compare.score_tolerance:
                whys.append(f"|Δprob| {delta:.3g} > {compare.score_tolerance:g}")
        diffs += [{"request": f"classify:{i}", "why": why} for why in whys]
    return base | {
        "equal": not diffs,
        "max_prob_diff": worst,
        "diffs": diffs,
        "summary": f"classes: {len(got)} classifications, {len(diffs)} differences (label, or a class "
        f"probability beyond {compare.score_tolerance:g}), max |Δprob| {worst:.3g}",
    }


def tie_at(compare: Compare, ref: Completion, got: Completion, first: int) -> dict[str, Any] | None:
    """The numbers of a near-tie at ``first``, where the case's token is among the reference's
    top logprobs within ``tie_margin`` nats of the reference's own pick; else None."""
    if compare.tie_margin <= 0 or first >= len(ref.token_ids) or first >= len(got.token_ids):
        return None
    top = ref.top[first] if first < len(ref.top) else {}
    r_id, g_id = ref.token_ids[first], got.token_ids[first]
    if g_id not in top or r_id not in top:
        return None
    gap = top[r_id] - top[g_id]
    if abs(gap) > compare.tie_margin:
        return None
    return {"at_token": first, "reference_id": r_id, "case_id": g_id, "logprob_gap": round(gap, 6)}


def compare_phase(compare: Compare, labels: list[str], ref: list[Completion], got: list[Completion]) -> dict[str, Any]:
    """Request by request: exact, a tie (a near-tie divergence; what follows it is not compared),
    or a mismatch; with the numbers of every tie and the tokens of every mismatch. Seeded
    requests (``-seeded:`` in their label) must match exactly."""
    refs = {c.label: c for c in ref}
    gots = {c.label: c for c in got}
    counts = {"requests": len(labels), "exact": 0, "tied": 0, "mismatched": 0}
    ties: list[dict[str, Any]] = []
    diffs: list[dict[str, Any]] = []
    for label in labels:
        r, g = refs.get(label), gots.get(label)
        if r is None or g is None:
            counts["mismatched"] += 1
            diffs.append({"request": label, "why": f"no answer from {'the reference' if r is None else 'the case'}"})
            continue
        mode = Compare(**(compare.model_dump() | {"mode": "seeded"})) if "-seeded:" in label else compare
        v = pair(mode, r, g)
        if v["ok"]:
            counts["exact"] += 1
            continue
        tie = tie_at(compare, r, g, v["first_divergence"]) if v["first_divergence"] is not None else None
        if tie is not None and mode.mode != "seeded":
            counts["tied"] += 1
            ties.append({"request": label, **tie})
            continue
        counts["mismatched"] += 1
        diffs.append(
            {
                "request": label,
                "why": v["why"],
                "first_token_mismatch": v["first_divergence"],
                "baseline_ids": list(r.token_ids),
                "observed_ids": list(g.token_ids),
                "max_logprob_diff": v["max_logprob_diff"],
            }
        )
    return counts | {"ties": ties, "diffs": diffs}


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

"""Task scores of a deployment: lm-evaluation-harness or AISBench run against its OpenAI API.

Each tool has its module (``harness.check.scores.lmeval``, ``harness.check.scores.aisbench``),
found by the score's ``tool`` in ``harness.registry.SCORE_TOOLS``; both run as a guarded
subprocess (``harness.check.scores.tool``). Nodes have no internet: datasets are local
files and the Hugging Face libraries run offline. This module picks the tool and judges the
number against the reference's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.check.scores.tool import ScoreError, ScoreTool
from harness.registry import SCORE_TOOLS

__all__ = ["ScoreError", "evaluate", "evaluate_live", "judge_score", "missing_files"]

# float noise in reference - value (0.35 - 0.3 > 0.05) must not fail a drop exactly at the limit
DROP_EPS = 1e-9


def tool_of(score: Any) -> ScoreTool:
    """The score's tool (``harness.check.scores``): lm-eval unless it names another."""
    return SCORE_TOOLS[getattr(score, "tool", "lm-eval")]


def evaluate(
    base_url: str,
    model_name: str,
    score: Any,
    base_dir: Path,
    workdir: Path,
    timeout_s: float,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Score the server at ``base_url`` (its root, e.g. ``http://host:8000``) serving
    ``model_name`` with ``score.tool``: lm-eval runs ``score.task``, AISBench
    ``score.dataset_config``. Files the score names are relative to ``base_dir`` (the folder of
    the matrix file that names them). Raises ScoreError when the tool is missing, fails or runs
    past ``timeout_s``."""
    return tool_of(score).evaluate(base_url, model_name, score, base_dir, workdir, timeout_s, tokenizer)


def missing_files(score: Any, base_dir: Path) -> str | None:
    """Why a file the score names is not there (None when all are): asked by ``ppconf lint``
    before anything launches. Names are relative to ``base_dir``."""
    return tool_of(score).missing_files(score, base_dir)


def judge_score(value: float, reference_value: float | None, score: Any) -> dict[str, Any]:
    """Judge a score by ``score.min``, ``score.max_drop`` (reference − value) and ``score.threshold``
    (|value − reference|, both ways: vllm-ascend's rule). The reference
    is ``reference_value`` (the reference launch's score) or else ``score.baseline`` (recorded)."""
    if reference_value is not None:
        reference, source = reference_value, "reference"
    else:
        reference, source = score.baseline, "baseline"
    problems: list[str] = []
    passed: list[str] = []
    unusable = [
        f"{name} {number!r}"
        for name, number in (("score", value), (source, reference))
        if number is not None and not math.isfinite(number)
    ]
    if unusable:  # a NaN compares false both ways and an infinity beats every bound: neither is judged
        problems.append(f"{' and '.join(unusable)}: not a finite number, so the score fails")
    elif score.min is not None:
        (passed if value >= score.min else problems).append(
            f"score {value:g} {'>=' if value >= score.min else '<'} min {score.min:g}"
        )
    if score.max_drop is not None and not unusable:
        if reference is None:
            problems.append(
                f"max_drop {score.max_drop:g} is set but there is no reference score "
                f"(no reference run and no recorded baseline)"
            )
        else:
            drop = reference - value
            ok = drop <= score.max_drop + DROP_EPS
            (passed if ok else problems).append(
                f"drop {drop:g} from {source} {reference:g} {'<=' if ok else '>'} max_drop {score.max_drop:g}"
            )
    if score.threshold is not None and not unusable:
        if reference is None:
            problems.append(
                f"threshold {score.threshold:g} is set but there is no reference score "
                f"(no reference run and no recorded baseline)"
            )
        else:
            off = abs(value - reference)
            ok = off <= score.threshold + DROP_EPS
            (passed if ok else problems).append(
                f"|score {value:g} - {source} {reference:g}| = {off:g} {'<=' if ok else '>'} "
                f"threshold {score.threshold:g}"
            )
    if score.min is None and score.max_drop is None and score.threshold is None:
        problems.append("no threshold: set min, max_drop and/or threshold")
    tool = getattr(score, "tool", "lm-eval")
    return {
        "ok": not problems,
        "tool": tool,
        "value": value if math.isfinite(value) else None,  # JSON has no NaN nor infinity
        "reference": reference if reference is None or math.isfinite(reference) else None,
        "reference_source": source if reference is not None else None,
        "min": score.min,
        "max_drop": score.max_drop,
        "threshold": score.threshold,
        "detail": f"{SCORE_TOOLS[tool].label}: " + "; ".join(problems or passed),
    }


def evaluate_live(live: Any, score: Any, base_dir: Path, workdir: Path, request_timeout_s: float) -> dict[str, Any]:
    """The task score of a ready deployment (a case's or a reference's), by the score's tool, in
    twenty request timeouts in all; lm-eval reads the model's tokenizer where the model is a local
    folder (AISBench needs none)."""
    model = live.deployment.model
    return evaluate(
        live.client.base,
        live.model_name or "",
        score,
        base_dir,
        workdir,
        request_timeout_s * 20,
        tokenizer=model if Path(model).is_dir() else None,
    )

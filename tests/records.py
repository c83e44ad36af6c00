"""Synthetic results records, as the runner writes them (``Result.to_json``) and as records of
older writers look (no ``schema``, no ``fails_run``, ``plan_key`` or ``versions``): ``record``
gives the JSON object a results.jsonl line holds, ``result`` the ``Result`` a reader gets from it."""

from harness.results.result import Result


def record(
    case,
    outcome="PASS",
    kind="supported",
    family="qwen3-tiny",
    topology="pp2-tp1-mp",
    partition="auto",
    features=(),
    reason="because",
    **fields,
):
    rec = {
        "case": case,
        "suite": "s",
        "family": family,
        "variant": "default",
        "topology": topology,
        "partition": partition,
        "features": list(features),
        "platform": "cpu",
        "expectation": {"kind": kind},
        "outcome": outcome,
        "reason": reason,
        "observation": {},
        "deployment": None,
        "started": "2026-11-30T20:00:00+00:00",
        "duration_s": 10.0,
    }
    rec.update(fields)
    return rec


def result(case, outcome="PASS", **fields) -> Result:
    """``record(...)`` as a reader gets it back from the store."""
    return Result.from_json(record(case, outcome, **fields))

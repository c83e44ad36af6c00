"""Synthetic results records of the shape the runner writes (harness.results.schema.Record)."""


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

"""Synthetic results records, as the runner writes them (``Result.to_json``) and as records of
older writers look (no ``schema``, no ``fails_run``, ``plan_key`` or ``versions``): ``record``
gives the JSON object a results.jsonl line holds, ``result`` the ``Result`` a reader gets from it."""

from harness import safe_write
from harness.results import store
from harness.results.result import Expectation, Result


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


def _outcome(exp: Expectation) -> str:
    return {"rejected": "XFAIL", "unsupported-on-platform": "SKIP"}.get(exp.kind.value, "PASS")


def finished_run(run_dir, m, cluster, suite, outcomes=None):
    """A run of ``suite`` that finished every case, as the recorder writes its records: each case
    as claimed (``outcomes`` may give some case ids other outcomes); returns the cases."""
    from harness.cases.expand import expand
    from harness.plan.deployment import plan

    run_dir.mkdir()
    cases = expand(m, suite).cases
    for c in cases:
        outcome = (outcomes or {}).get(c.id, _outcome(c.expectation))
        store.append(
            run_dir,
            {
                "case": c.id,
                "suite": suite,
                "family": c.family,
                "variant": c.variant,
                "topology": c.topology,
                "partition": c.partition,
                "features": list(c.features),
                "platform": c.platform,
                "expectation": c.expectation.to_json(),
                "outcome": outcome,
                "reason": "as claimed",
                "plan_key": plan(m, c, cluster).key if outcome != "SKIP" else None,
                "versions": {"local": {"vllm": "0.32.0", "torch": "2.9.0"}},
            },
        )
    safe_write.write_json(run_dir / "run.json", {"suite": suite, "matrices": [str(m.root)]})
    return cases

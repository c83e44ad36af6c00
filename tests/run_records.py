"""Reading what a real run wrote, for the end-to-end tests: the records of results.jsonl and the
answers a case's reference gave (its launch's, kept in the run, or its golden's)."""

import json
from pathlib import Path


def records(run_dir: Path) -> dict[str, dict]:
    """The run's records by case id."""
    return {r["case"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}


def reference_answers(run_dir: Path, record: dict, phase: str) -> list[dict]:
    """The answers of ``record``'s reference to ``phase``: from its golden when it was compared
    with one, else from the reference kept in the run that holds that phase (one launch may answer
    several cases' sets of requests, each kept under its own key)."""
    golden = record["observation"]["reference"].get("golden")
    files = [Path(golden)] if golden else sorted((run_dir / "references").glob("*.json"))
    (answers,) = [
        held[phase]["answers"] for f in files if phase in (held := json.loads(f.read_text())["outputs"]["phases"])
    ]
    return answers

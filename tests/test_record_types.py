"""A record is made of the plan's own types (``CaseKey``, ``Deployment``, ``LaunchSpec``): what
results.jsonl holds is derived from them by one function each, and a recorded file reads back
into them and is written again byte for byte."""

import json
from pathlib import Path

import pytest

from harness.case_key import CaseKey
from harness.cases.lint import Finding
from harness.launch import Deployment, LaunchSpec, Payload
from harness.matrix.source import Where
from harness.redact import MASK
from harness.results import store
from harness.results.result import RecordError, Result

SMOKE = Path(__file__).resolve().parent / "data" / "smoke-run"


def test_a_recorded_results_file_round_trips_to_identical_json(tmp_path):
    lines = (SMOKE / store.RESULTS).read_text().splitlines(keepends=True)
    assert any('"deployment": {' in line for line in lines), "the file records no deployment"
    for line in lines:
        assert json.dumps(Result.from_json(json.loads(line)).to_json(), sort_keys=True) + "\n" == line
    for r in store.read_all(SMOKE):
        store.append(tmp_path, r.to_json())
    assert (tmp_path / store.RESULTS).read_text() == "".join(lines)


def test_an_older_or_newer_writers_deployment_is_written_back_as_it_was_read(tmp_path):
    rec = json.loads(next(l for l in (SMOKE / store.RESULTS).read_text().splitlines() if '"payload": [' in l))
    deployment = rec["deployment"]
    del deployment["model"], deployment["launches"][0]["set_env"]  # an older writer's
    deployment["region"] = "eu"  # a newer writer's
    deployment["launches"][0]["argv"] += ["--api-key", MASK]  # a masked secret: the key is of the real one
    line = json.dumps(rec, sort_keys=True) + "\n"
    (tmp_path / store.RESULTS).write_text(line)
    (r,) = store.read(tmp_path)
    assert r.deployment is not None and r.deployment.key == deployment["key"]
    assert json.dumps(r.to_json(), sort_keys=True) + "\n" == line


def test_a_records_deployment_is_the_plans_type_with_its_secrets_masked():
    line = next(l for l in (SMOKE / store.RESULTS).read_text().splitlines() if '"payload": [' in l)
    r = Result.from_json(json.loads(line))
    assert isinstance(r.deployment, Deployment) and isinstance(r.deployment.launches[0], LaunchSpec)
    assert r.deployment.key == json.loads(line)["deployment"]["key"]  # as recorded, not the masked launches'
    token = "hf_" + "x" * 30
    spec = LaunchSpec(
        "node0-api",
        "api",
        "local",
        "localhost",
        ("vllm", "serve", "m", "--api-key", token),
        (("HF_TOKEN", token), ("VLLM_X", "1")),
        8000,
        payload=(Payload("probe.py", "print(1)\n"),),
    )
    planned = Deployment(("c",), (spec,), "node0-api", model="m")
    recorded = planned.recorded()
    (launch,) = recorded.to_json()["launches"]
    assert launch == {
        "name": "node0-api",
        "role": "api",
        "node": "local",
        "host": "localhost",
        "argv": ["vllm", "serve", "m", "--api-key", MASK],
        "env": {"HF_TOKEN": MASK, "VLLM_X": "1"},
        "port": 8000,
        "set_env": None,
        "payload": [{"name": "probe.py", "sha256": spec.payload[0].sha256}],
    }
    assert recorded.to_json() == planned.to_json() and recorded.key == planned.key
    assert recorded.launches[0].payload[0].sha256 == spec.payload[0].sha256


def test_every_step_holds_one_case_key(tmp_path):
    from harness.results import index
    from reports.cells import entries_from_results

    conn = index.connect(tmp_path / "i.sqlite")
    index.ingest(conn, SMOKE)
    r = store.read(SMOKE)[0]
    indexed = next(c for c in index.cases(conn) if c.case == r.case)
    (entry,) = [e for e in entries_from_results([r]) if e.case == r.case]
    for held in (r, indexed, entry):
        assert isinstance(held, CaseKey) and held.coordinates() == r.coordinates()
    flat = {f.alias or name for name, f in CaseKey.model_fields.items()}
    assert flat == {"case", "suite", "family", "variant", "topology", "partition", "features", "platform"}
    assert {k: v for k, v in r.to_json().items() if k in flat} == {
        k: v for k, v in json.loads((SMOKE / store.RESULTS).read_text().splitlines()[0]).items() if k in flat
    }


def test_a_finding_says_its_severity_and_what_it_is_about():
    at = Where("m.yaml", 3, 5)
    assert Finding("bad", at, "warning").to_json() == {
        "severity": "warning",
        "file": "m.yaml",
        "line": 3,
        "column": 5,
        "message": "bad",
    }
    planned = Finding("no fit", severity="note", suite="s", cluster="local")
    assert planned.to_json() == {"severity": "note", "suite": "s", "cluster": "local", "message": "no fit"}
    assert str(planned) == "s on local: no fit" and str(Finding("bad", at)) == f"{at}: bad"


def test_a_deployment_that_does_not_fit_is_refused_naming_the_recorded_field():
    rec = json.loads((SMOKE / store.RESULTS).read_text().splitlines()[0])
    for deployment, says in (
        ({"key": 5}, "deployment.key: should be a string (got 5)"),
        ({"cases": [1]}, "deployment.cases.0: Input should be a valid string"),
        ({"launches": [{"name": "n"}]}, "deployment.launches.0.role: Field required"),
    ):
        with pytest.raises(RecordError) as err:
            Result.from_json(rec | {"deployment": deployment})
        assert str(err.value).startswith(says)

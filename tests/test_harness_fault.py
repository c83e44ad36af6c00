"""A fault of ppconf itself while checking a case is ERROR with its traceback kept in the result
and the repro bundle, apart from infrastructure failures (which are retried once, tests/test_faults.py), and it is not
retried."""

import json

from harness.matrix.load import load_matrix
from harness.outcomes import Outcome
from harness.plan.cluster import load_cluster
from harness.results import store
from harness.run import RunConfig, SuiteRun


def test_a_harness_fault_is_kept_with_its_traceback_and_not_retried(tmp_path, monkeypatch):
    m = load_matrix()
    run = SuiteRun(
        RunConfig(m, "smoke-cpu", load_cluster(None), tmp_path / "run", case_ids=["qwen3-tiny/pp2-tp1-mp/auto/none"])
    )
    monkeypatch.setattr("harness.run.probe_versions", lambda cluster, models=(): {"local": {"vllm": "test"}})
    monkeypatch.setattr(SuiteRun, "_ensure_models", lambda self, cases: None)
    (d,) = run.prepare()
    calls = []

    def broken(deployment, cases, dummy_weights=False, check_config=False):
        calls.append(deployment.key)
        raise KeyError("a bug in ppconf")

    monkeypatch.setattr(run.observer, "observe", broken)
    (result,) = run.execute(d)
    assert calls == [d.key], "a harness fault is not retried"
    assert result.outcome is Outcome.ERROR and result.reason.startswith("harness fault: KeyError")
    assert "Traceback (most recent call last)" in result.harness_error and "broken" in result.harness_error
    (rec,) = store.read(tmp_path / "run")
    assert rec.harness_error == result.harness_error
    case = json.loads((tmp_path / "run" / "repro").glob("*/case.json").__next__().read_text())
    assert "a bug in ppconf" in case["harness_error"]

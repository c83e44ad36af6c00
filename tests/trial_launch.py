"""A run of one case whose launches are answered by fakes in turn, for the tests of a launch tried
before the real one (a configuration check, dummy weights): ``run_one`` gives the case's result
and, per launch, whether it was the trial; ``refused`` an observation of a refusal in the log."""

from harness.plan.cluster import load_cluster
from harness.results import store
from harness.results.result import Observation
from harness.run import RunConfig, SuiteRun


def refused(exception: str, text: str, **fields) -> Observation:
    line = {"cause": "refusal", "exception": exception, "line": 9, "log": "node0-api", "text": text}
    return Observation.model_validate(
        {
            "exit_codes": {"node0-api": 1},
            "failed_after_s": 5.0,
            "failed_phase": "startup",
            "expected_error_after_s": 5.0,
            "expected_error_line": line,
            "root_cause": line,
            **fields,
        }
    )


def run_one(tmp_path, monkeypatch, m, case_id, answers, trial, replan):
    """``case_id`` of smoke-cpu run with each launch observed by the next of ``answers``;
    ``trial`` names the observer's option of the tried launch (``check_config``, ``dummy_weights``)
    and ``replan`` turns a deployment into that launch."""
    run = SuiteRun(RunConfig(m, "smoke-cpu", load_cluster(None), tmp_path / "run", case_ids=[case_id]))
    monkeypatch.setattr("harness.run.probe_versions", lambda cluster, models=(): {"local": {"vllm": "test"}})
    monkeypatch.setattr(SuiteRun, "_ensure_models", lambda self, cases: None)
    (d,) = run.prepare()
    launches: list[bool] = []

    def observe(deployment, cases, **how):
        assert set(how) <= {"check_config", "dummy_weights"} and not any(v for k, v in how.items() if k != trial)
        launches.append(bool(how.get(trial)))
        launched = replan(deployment) if launches[-1] else deployment
        return launched, {c.id: answers[len(launches) - 1]() for c in cases}

    monkeypatch.setattr(run.observer, "observe", observe)
    (result,) = run.execute(d)
    (record,) = store.read(tmp_path / "run")
    assert record.outcome is result.outcome
    return result, launches

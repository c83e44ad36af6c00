"""The pytest plugin loads through its `pytest11` entry point wherever ppconf is installed.

A throwaway environment gets ppconf (this checkout, editable, as `pip install -e` makes it) and
sees the test environment's other libraries through a .pth file, so nothing is downloaded.
"""

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("env")
    venv.EnvBuilder(with_pip=False).create(env)
    exe = env / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [exe, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # pytest, pydantic ... from the test environment; its own ppconf install is not activated (a
    # path in a .pth file is added, its .pth files are not read)
    (purelib / "base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(exe),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return exe


def test_a_project_with_only_ppconf_installed_collects_the_cases(python, tmp_path):
    project = tmp_path / "elsewhere"
    project.mkdir()
    # the shipped test function, imported: no conftest, no copied code
    (project / "test_pp.py").write_text("from conformance.test_conformance import test_case  # noqa: F401\n")

    def collect(*args: str) -> list[str]:
        out = subprocess.run(
            [python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "--ppconf-suite", "smoke-cpu", *args],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return [line for line in out.stdout.splitlines() if line.startswith("test_pp.py::test_case[")]

    assert "test_pp.py::test_case[qwen3-tiny/pp2-tp1-mp/auto/none]" in collect("-m", "pp")
    # the plugin's markers select: the one two-node case of the suite
    assert collect("-m", "pp and multinode") == ["test_pp.py::test_case[qwen3-tiny/pp2-tp1-2node-mp/auto/none]"]
    rejected = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:ppconf",
            "--ppconf-suite",
            "smoke-cpu",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "unrecognized arguments: --ppconf-suite" in rejected.stderr  # it was the entry point that loaded it


def test_this_repository_does_not_register_the_plugin_twice(python):
    """The root conftest registers the plugin only when the entry point did not: naming it in
    pytest_plugins as well would make pytest refuse the second registration."""
    out = subprocess.run(
        [python, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "conformance/test_conformance.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_case[qwen3-tiny/pp2-tp1-mp/auto/none]" in out.stdout

import functools
import shutil
import signal
import textwrap
from pathlib import Path

import pytest

from harness.matrix.load import DEFAULT_MATRICES, load_matrix

# Several tests check what Ctrl-C does (SIGINT to ppconf, to a driver, to this process). A shell
# that starts pytest as a background job leaves SIGINT ignored, an ignored signal stays ignored
# across exec, and Python then installs no KeyboardInterrupt for it: those tests would show the
# job's signal mask, not ppconf. Ctrl-C means Ctrl-C here and in every process the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _vllm_distributions_listed_once():
    """Which vLLM distribution an interpreter has installed does not change during a session, but
    listing them reads every installed distribution's metadata (~0.07 s), and about a hundred tests
    plan on the local cluster, which asks each time."""
    from harness.target import vllm_cpu

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vllm_cpu, "_installed_names", functools.cache(vllm_cpu._installed_names))
        yield


@pytest.fixture(scope="session")
def shipped():
    return load_matrix(DEFAULT_MATRICES)


@pytest.fixture
def matrix_dir(tmp_path):
    """A copy of the shipped matrices that a test may edit; write(name, text) adds a file."""
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)

    def write(name: str, text: str) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    write.root = root
    return write

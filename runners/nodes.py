"""Short programs run on a node of the inventory, whichever way it is reached: version probes,
reading a model's config, reaping what a killed ppconf left behind.

    outputs = run_on_nodes(cluster, [(node, [node.python, "-c", CODE, arg])], timeout_s=60)

Each call gives a ``NodeOutput`` (status, stdout, stderr, or why the node could not run it). The
argv is a list on every path: run directly on this host, one ``shlex.quote``-d word each over
SSH, and from a task pinned to the node on Ray. With ``set_env`` the node's set_env script (CANN's)
is sourced first, as it is for a launch.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

from harness.plan.cluster import Cluster, Node
from runners.output import NodeOutput

_WITH_SET_ENV = 'source "$1" && shift && exec "$@"'


def _argv(node: Node, argv: Sequence[str], set_env: bool) -> list[str]:
    if set_env and node.set_env:
        return ["bash", "-c", _WITH_SET_ENV, "ppconf-probe", node.set_env, *argv]
    return list(argv)


def _local(node: Node, argv: list[str], timeout_s: float) -> NodeOutput:
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, start_new_session=True
        )
    except subprocess.TimeoutExpired:
        return NodeOutput(node.name, None, error=f"no answer within {timeout_s:g} s")
    except OSError as err:
        return NodeOutput(node.name, None, error=f"cannot run {argv[0]}: {err}")
    return NodeOutput(node.name, done.returncode, done.stdout, done.stderr)


def _ssh(node: Node, argv: list[str], timeout_s: float) -> NodeOutput:
    from runners.ssh import SshOptions, SshTarget, reachable, run_ssh, ssh_argv

    opts = SshOptions()
    why = reachable(node, min(timeout_s, opts.connect_timeout_s + 5), opts)
    if why:
        return NodeOutput(node.name, None, error=why)
    done = run_ssh(ssh_argv(SshTarget.from_node(node), opts) + [shlex.join(argv)], timeout_s)
    if done is None:
        return NodeOutput(node.name, None, error=f"no answer within {timeout_s:g} s")
    if done.returncode == 255:  # ssh's own failure, not the program's
        lines = done.stderr.strip().splitlines()
        return NodeOutput(node.name, None, done.stdout, done.stderr, error=lines[-1] if lines else "ssh failed")
    return NodeOutput(node.name, done.returncode, done.stdout, done.stderr)


def run_on_nodes(
    cluster: Cluster, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float = 60.0, set_env: bool = False
) -> list[NodeOutput]:
    """Runs each ``(node, argv)``; one NodeOutput per call, in order. Never raises for a node
    that cannot be reached: its output says why."""
    out: list[NodeOutput | None] = [None] * len(calls)
    ray_calls = []
    for i, (node, argv) in enumerate(calls):
        full = _argv(node, argv, set_env)
        if node.reach == "local":
            out[i] = _local(node, full, timeout_s)
        elif node.reach == "ssh":
            out[i] = _ssh(node, full, timeout_s)
        else:
            ray_calls.append((i, node, full))
    if ray_calls:
        if not cluster.ray_address:
            for i, node, _ in ray_calls:
                out[i] = NodeOutput(node.name, None, error="reached by ray, but the inventory gives no ray_address")
        else:
            from runners.ray import run_commands

            for (i, _, _), result in zip(
                ray_calls,
                run_commands(cluster.ray_address, [(n.name, a) for _, n, a in ray_calls], timeout_s),
                strict=True,
            ):
                out[i] = result
    return out  # type: ignore[return-value]

"""Short programs run on a node of the inventory, whichever way it is reached: version probes,
reading a model's config, reaping what a killed ppconf left behind.

    outputs = run_on_nodes(cluster, [(node, [node.python, "-c", CODE, arg])], timeout_s=60)

Each call gives a ``NodeOutput`` (status, stdout, stderr, or why the node could not run it). The
argv is a list on every path: run directly on this host, one ``shlex.quote``-d word each over
SSH, and from a task pinned to the node on Ray. With ``set_env`` the node's set_env script (CANN's)
is sourced first, as it is for a launch.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.plan.cluster import Cluster, Node
from runners import registry
from runners.errors import InfrastructureError
from runners.output import NodeOutput

_WITH_SET_ENV = 'source "$1" && shift && exec "$@"'


def _argv(node: Node, argv: Sequence[str], set_env: bool) -> list[str]:
    if set_env and node.set_env:
        return ["bash", "-c", _WITH_SET_ENV, "ppconf-probe", node.set_env, *argv]
    return list(argv)


def run_on_nodes(
    cluster: Cluster, calls: Sequence[tuple[Node, Sequence[str]]], timeout_s: float = 60.0, set_env: bool = False
) -> list[NodeOutput]:
    """Runs each ``(node, argv)``; one NodeOutput per call, in order. Never raises for a node
    that cannot be reached: its output says why. Each way of reaching nodes gets its calls at once."""
    by_reach: dict[str, list[int]] = {}
    for i, (node, _) in enumerate(calls):
        by_reach.setdefault(node.reach, []).append(i)
    out: dict[int, NodeOutput] = {}
    for reach, indices in by_reach.items():
        group = [(calls[i][0], _argv(calls[i][0], calls[i][1], set_env)) for i in indices]
        try:
            runner = registry.runner(reach, cluster)
        except InfrastructureError as err:
            out.update(
                {i: NodeOutput(node.name, None, error=str(err)) for i, (node, _) in zip(indices, group, strict=True)}
            )
            continue
        try:
            out.update(zip(indices, runner.run(group, timeout_s), strict=True))
        finally:
            runner.close()
    return [out[i] for i in range(len(calls))]

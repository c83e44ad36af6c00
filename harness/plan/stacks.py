"""A cluster on an engine stack (``harness.stacks``): each node's Python and vLLM command taken
from where that node has the stack (its inventory's ``stacks``, or, for a local node, ppconf's
stack cache). ``on_stack`` refuses a stack a node lacks, naming the node and what it has, so a run
over several stacks is refused before any launch; ``verify`` compares the declared stack with the
nodes' probe."""

from __future__ import annotations

from collections.abc import Mapping

from harness.plan.cluster import Cluster, Node
from harness.stacks import install
from harness.stacks.stack import INSTALLABLE, Stack, StackError

# vLLM's CLI as a module (its `vllm` script's entry point), for a stack the inventory names
# without a command
_CLI_MODULE = "vllm.entrypoints.cli.main"


def _node_on(node: Node, stack: Stack, cluster: str) -> Node:
    named = node.stacks.get(str(stack))
    if named is not None:
        if named.vllm:
            vllm = list(named.vllm)
        elif stack.engine in INSTALLABLE:
            vllm = [named.python, "-m", install.LAUNCHER]
        else:
            vllm = [named.python, "-m", _CLI_MODULE]
        return node.model_copy(update={"python": named.python, "vllm": vllm})
    if node.reach == "local" and stack.engine in INSTALLABLE and install.installed(stack) is not None:
        vllm = install.launcher(stack)
        return node.model_copy(update={"python": vllm[0], "vllm": vllm})
    has = ", ".join(node.stacks) or "none"
    how = (
        f"; on this host: `ppconf stack install {stack}`"
        if node.reach == "local" and stack.engine in INSTALLABLE
        else ""
    )
    raise StackError(
        f"node {node.name} of cluster {cluster} does not have stack {stack} (its inventory names: {has}){how}"
    )


def on_stack(cluster: Cluster, stack: Stack) -> Cluster:
    """``cluster`` with every node running ``stack``; StackError naming each node that lacks it."""
    nodes, missing = [], []
    for node in cluster.nodes:
        try:
            nodes.append(_node_on(node, stack, cluster.name))
        except StackError as err:
            missing.append(str(err))
    if missing:
        raise StackError("; ".join(missing))
    return cluster.model_copy(update={"nodes": nodes})


def verify(stack: Stack, probed: Mapping[str, Mapping[str, object]]) -> list[str]:
    """What the probe says against the declared stack: one line per node that is not on it."""
    return [
        f"node {node} is not on stack {stack}: {why}"
        for node, v in sorted(probed.items())
        if (why := stack.mismatch(v))
    ]

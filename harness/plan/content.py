"""What a deployment computes, apart from where it runs: its launches with the names, hosts,
addresses and interfaces of its nodes, its device ids, its model path and the command that starts
vLLM on each node replaced by what they stand for. Two launches with the same content compute the
same outputs on the same stack, whichever nodes, runner, test or run directory they came from
(the reference cache's key, ``harness.check.references.goldens.cache_key``)."""

from __future__ import annotations

import re
from typing import Any

from harness.launch import Deployment
from harness.plan.cluster import Cluster

_NUMBER = re.compile(r"\d+")


def _devices(value: str, devices: set[int]) -> str:
    """A device variable's value with each id replaced by its position among the launch's own
    devices ("8,9" and "0,1" are the same two devices of a node; "1" is its first core)."""
    index = {str(d): str(i) for i, d in enumerate(sorted(devices))}
    return _NUMBER.sub(lambda mt: index.get(mt.group(), mt.group()), value)


def launch_content(d: Deployment, cluster: Cluster, device_env: str) -> list[Any]:
    """Each launch as (role, node rank, argv, env), node-specific words replaced by placeholders:
    the node's name, host, address, interface and bind address by ``<nodeI>`` (one mark: on one
    host they are often one value, on another several), its vLLM command by ``<vllm>``, its
    Python by ``<python>``, the model path by ``<model>`` (its identity is the caller's to add),
    and the ids in ``device_env`` by their positions among the node's devices. Ports are the
    plan's own (a reference's key is taken from its plan, never from the ports a launch got)."""
    nodes = {n.name: n for n in cluster.nodes}
    ranks = list(dict.fromkeys(s.node for s in d.launches))
    placed: dict[str, set[int]] = {}  # a node's devices in this deployment (ranks packed on one host too)
    for name, devices in d.placement.nodes if d.placement is not None else ():
        placed.setdefault(name, set()).update(devices)
    words: list[tuple[str, str]] = []
    for rank, name in enumerate(ranks):
        node = nodes.get(name)
        fields = {"name": name}
        if node is not None:
            fields |= {"host": node.host, "address": node.address, "nic": node.nic, "bind": node.bind or ""}
        words += [(value, f"<node{rank}>") for value in fields.values() if value]
    if d.model:
        words.append((d.model, "<model>"))
    marks = dict(sorted(reversed(words), key=lambda w: -len(w[0])))  # the longest first, the first rank's
    # a whole word only ("local" in --data-parallel-size-local is no node), inside a URL or JSON too
    found = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(w) for w in marks) + r")(?![\w-])" if marks else r"(?!x)x")

    def plain(text: str) -> str:
        return found.sub(lambda mt: marks[mt.group(1)], text)

    out: list[Any] = []
    for s in d.launches:
        node = nodes.get(s.node)
        argv = list(s.argv)
        for command, mark in ((list(node.vllm), "<vllm>"), ([node.python], "<python>")) if node else ():
            if command and argv[: len(command)] == command:
                argv = [mark, *argv[len(command) :]]
                break
        env = [(k, _devices(v, placed.get(s.node, set())) if k == device_env else plain(v)) for k, v in s.env]
        out.append([s.role, ranks.index(s.node), [plain(w) for w in argv], sorted(env)])
    return out

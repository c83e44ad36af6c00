"""What the cluster's nodes hold, asked on the nodes themselves through their runners: each node's
software stack (``probe_versions``), and a checkpoint's hidden-layer count from its config.json on
the first node (``layer_counts``), for the models the driver cannot read itself.

The scripts and their parsing are the target's (``harness.target.versions``,
``harness.target.model_config``); reaching the nodes is this module's part.
"""

from __future__ import annotations

import json

from harness.plan.cluster import Cluster
from harness.target import model_config, versions
from runners.nodes import run_on_nodes


def probe_versions(
    cluster: Cluster, timeout_s: float = 120.0, models: tuple[str, ...] = ()
) -> dict[str, dict[str, str]]:
    """{node name: {distribution: version}} for every node of ``cluster``, with the identity of
    each of ``models`` (checkpoint directories) as that node holds it; a node that cannot be
    probed gets {"error": why}."""
    out_: dict[str, dict[str, str]] = {}
    calls = [(n, [n.python, "-c", versions.SCRIPT, *models]) for n in cluster.nodes]
    for (node, _), out in zip(calls, run_on_nodes(cluster, calls, timeout_s, set_env=True), strict=True):
        if not out.ok:
            why = out.error or (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
            out_[node.name] = {"error": f"version probe failed on {node.name}: {why}"}
            continue
        try:
            out_[node.name] = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out_[node.name] = {"error": f"version probe on {node.name} printed no versions"}
    return out_


def layer_counts(cluster: Cluster | None, timeout_s: float = 60.0) -> model_config.LayerCounts:
    """Layer counts read here first, then on ``cluster``'s first node (unless it is this host);
    the cluster's link type goes with them to case expansion."""
    if cluster is None:
        return model_config.LayerCounts()
    node = cluster.nodes[0] if cluster.nodes else None
    if node is None or node.reach == "local":
        return model_config.LayerCounts(network=cluster.network)

    def ask(model: str) -> tuple[int | None, str, bool]:
        (out,) = run_on_nodes(cluster, [(node, [node.python, *model_config.node_script(model)])], timeout_s)
        if not out.ok:
            why = out.error or out.stderr.strip()[-200:] or f"exit status {out.returncode}"
            return None, why, out.returncode is None  # no answer at all (unreachable, timed out)
        return model_config.parse_node_reply(out.stdout), "", False

    return model_config.LayerCounts(ask, network=cluster.network, node=node.name)

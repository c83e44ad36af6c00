"""The ports a plan gives its processes, where a deployment's node ranks are placed, and
deployments of identical launches merged. The types a plan is made of are ``harness.launch``'s."""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.launch import Deployment, Placement, PlanError
from harness.plan.cluster import Cluster

API_PORT = 8000
MASTER_PORT = 29501
RAY_PORT = 6379
KV_PORT = 30000
PD_PORTS = (8100, 8200)  # prefill, decode API ports behind the proxy
DP_RPC_PORT = 29550  # vLLM's --data-parallel-rpc-port default


@dataclass(frozen=True)
class Ports:
    api: int = API_PORT
    master: int = MASTER_PORT
    ray: int = RAY_PORT
    kv: int = KV_PORT
    prefill: int = PD_PORTS[0]
    decode: int = PD_PORTS[1]
    dp_rpc: int = DP_RPC_PORT


def default_placement(cluster: Cluster, devices_per_node: int, nnodes: int) -> Placement:
    """First fit: node ranks on distinct cluster nodes when there are enough, else packed onto
    the nodes in turn (the local host plays several nodes on disjoint cores)."""
    slots: list[tuple[str, tuple[int, ...]]] = []
    for node in cluster.nodes:
        free = list(node.devices)
        while len(free) >= devices_per_node and len(slots) < nnodes:
            slots.append((node.name, tuple(free[:devices_per_node])))
            free = free[devices_per_node:]
            if len(cluster.nodes) >= nnodes:
                break
    if len(slots) < nnodes:
        raise PlanError(f"cluster '{cluster.name}' cannot hold {nnodes} node(s) of {devices_per_node} device(s)")
    return Placement(tuple(slots))


def group_deployments(deployments: list[Deployment]) -> list[Deployment]:
    """Merge deployments with identical launches into one that serves all their cases."""
    merged: dict[str, Deployment] = {}
    for d in deployments:
        if d.key in merged:
            prev = merged[d.key]
            merged[d.key] = replace(prev, case_ids=prev.case_ids + d.case_ids)
        else:
            merged[d.key] = d
    return list(merged.values())

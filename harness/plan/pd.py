"""Prefill/decode disaggregation: the two instances of a P/D pair, the KV-transfer config each
side needs (Mooncake's, vLLM's ExampleConnector's shared store on the CPU target, or a feature's
own connector for that side), and the proxy in front, bound to the address ppconf's client uses."""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.cases.merge import Merged, json_args
from harness.launch import Deployment, LaunchSpec, Placement, PlanError
from harness.matrix.schema import Instance, Platform, Topology
from harness.plan.cluster import Cluster
from harness.plan.instance import InstancePlanner
from harness.plan.launch import default_placement


def kv_parallel_config(topo: Topology, partition: str | None) -> dict:
    """The prefill/decode topology both sides of a Mooncake P/D pair must describe identically;
    ``partition``: the prefill's custom split of the layers, if it has one."""
    assert topo.decode is not None
    prefill: dict[str, int | str] = {"dp_size": topo.dp, "tp_size": topo.tp, "pp_size": topo.pp}
    if partition is not None:
        prefill["pp_layer_partition"] = partition
    return {
        "prefill": prefill,
        "decode": {"dp_size": topo.decode.dp, "tp_size": topo.decode.tp, "pp_size": topo.decode.pp},
    }


PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"

# The two serving instances of a P/D pair, by the role (and log name) of each launch.
PD_ROLES = ("prefill", "decode")

# The live check every P/D case gets (harness.check.features.kv_transfer): KV really moved to the
# decode side.
KV_TRANSFER_CHECK = "kv-transferred"

# vLLM's ExampleConnector writes each prompt's KV as files under one directory and the decode side
# reads them back: both sides share one store on one host, fresh per launch (named after its KV port).
SHARED_STORE_CONNECTOR = "ExampleConnector"
SHARED_STORE = "/tmp/ppconf-kv-{port}"


def shared_stores(d: Deployment) -> dict[str, str]:
    """The shared KV store each P/D launch of ``d`` writes, by node (removed once it stopped)."""
    out = {}
    for spec in d.launches:
        if spec.role == "prefill" and "--kv-transfer-config" in spec.argv:
            kv = json.loads(spec.argv[spec.argv.index("--kv-transfer-config") + 1])
            path = (kv.get("kv_connector_extra_config") or {}).get("shared_storage_path")
            if kv.get("kv_connector") == SHARED_STORE_CONNECTOR and path:
                out[spec.node] = path
    return out


def connector_extra_config(connector: str, topo: Topology, partition: str | None, kv_port: int) -> dict:
    """What the topology's connector needs in ``kv_connector_extra_config`` on both sides."""
    if connector == SHARED_STORE_CONNECTOR:
        return {"shared_storage_path": SHARED_STORE.format(port=kv_port)}
    return kv_parallel_config(topo, partition)


# The kv ports of a pair: prefill's from the base, decode's 100 past it, each one per device.
KV_BLOCK = 200


def clear_of_reserved(port: int, platform: Platform, cluster: Cluster) -> int:
    """The pair's kv port base: ``port``, or past the end of a range the platform's transports
    pick ports from at random on the cluster's largest node (its facts) where the pair's block
    would fall in it (vllm-ascend's Mooncake guide: kv_port 36000 or above on 16-NPU nodes)."""
    for reserved in platform.facts.reserved_ports if platform.facts else ():
        top = max(reserved.span(len(n.devices)).stop for n in cluster.nodes)
        if port < top and port + KV_BLOCK > reserved.first:
            port = top
    return port


@dataclass(frozen=True)
class _Side:
    """One instance of a P/D pair as planned: its merged launch parts, its DP layout and ports."""

    role: str
    inst: Topology | Instance
    port: int  # its API port (DP rank r of an external side: port + r)
    mg: Merged
    per_rank: int  # vLLM's world of one DP rank: TP x PP x PCP

    @property
    def external(self) -> bool:
        return self.inst.dp_mode == "external"

    @property
    def slots(self) -> tuple[int, ...]:
        """Devices per node it uses: its DP ranks spread evenly over its nodes."""
        return (self.per_rank * self.inst.dp // self.inst.nnodes,) * self.inst.nnodes


def plan_pd(p: InstancePlanner) -> Deployment:
    """The prefill instance, the decode instance and the proxy of one P/D case; ``merged`` and the
    other parts are the planner's, so both sides get one merge with one precedence. A side with
    external DP is a server per DP rank (its own port and devices), the proxy over all of them."""
    case, cluster, topo, placement, ports, model = p.case, p.cluster, p.topo, p.placement, p.ports, p.model
    merged, own_kv = p.merged, p.own_kv
    decode = topo.decode
    assert decode is not None, "a P/D topology has a decode instance"
    connector = topo.connector or "MooncakeConnectorV1"
    kv_base = clear_of_reserved(ports.kv, p.platform, cluster)
    # the prefill's split: the case's partition, or one its flags' layers set in the env (an
    # imported config gives it so)
    partition = case.partition if case.partition != "auto" else None
    partition = partition or merged(topo, None, "prefill").vllm_env.get(PARTITION_ENV)
    extra_config = connector_extra_config(connector, topo, partition, kv_base)
    sides: list[_Side] = []
    kv_ports = []
    for role, kv_role, inst, port, index in (
        ("prefill", "kv_producer", topo, ports.prefill, 0),
        ("decode", "kv_consumer", decode, ports.decode, 1),
    ):
        # each instance uses kv_port .. kv_port + its device count: keep the ranges apart (the DP
        # ranks of a side share its kv_port: the connector offsets each rank's by its DP rank)
        kv_port = str(kv_base + index * 100)
        kv_ports.append(kv_port)
        own = own_kv(role)
        kv = (
            {}
            if own
            else {
                "kv-transfer-config": {
                    "kv_connector": connector,
                    "kv_role": kv_role,
                    "kv_port": kv_port,
                    "engine_id": str(index),
                    "kv_connector_extra_config": extra_config,
                }
            }
        )
        mg = merged(inst, kv, role)
        if own and "kv_port" in own:  # the feature's own connector: the plan assigns only its port
            mg.configs["kv-transfer-config"] = {**mg.configs["kv-transfer-config"], "kv_port": kv_port}
        # vLLM's world of each DP rank: TP x PP x PCP
        sides.append(_Side(role, inst, port, mg, inst.tp * inst.pp * mg.pcp))
    placement = placement or _default_placement(cluster, sides)
    rows = iter(placement.nodes)
    placed = [[next(rows) for _ in side.slots] for side in sides]
    hosts = [cluster.node(name).host for name, _ in placement.nodes]
    if connector == SHARED_STORE_CONNECTOR and len(set(hosts)) > 1:
        raise PlanError(
            f"{case.id}: {connector} shares its KV store through one host's files; the prefill instance "
            f"is placed on {placed[0][0][0]} ({hosts[0]}), the decode instance on "
            f"{placed[1][0][0]} ({cluster.node(placed[1][0][0]).host})"
        )
    launches = []
    rpc_hosts: set[str] = set()
    for side, nodes in zip(sides, placed, strict=True):
        if not side.external:
            launches.append(_instance_launch(p, side, nodes[0]))
            continue
        side_head = cluster.node(nodes[0][0])
        # the DP coordinator of each side listens on its head node: two heads on one host apart
        rpc = ports.dp_rpc + (1 if side_head.host in rpc_hosts else 0)
        rpc_hosts.add(side_head.host)
        local = side.inst.dp // side.inst.nnodes
        for j, (node_name, devices) in enumerate(nodes):
            for k in range(local):
                rank = j * local + k
                mine = devices[k * side.per_rank : (k + 1) * side.per_rank]
                dp: tuple[str, ...] = ("--data-parallel-rank", str(rank), "--data-parallel-address")
                dp += (side_head.address, "--data-parallel-rpc-port", str(rpc))
                launches.append(_instance_launch(p, side, (node_name, mine), rank, dp))
    head = cluster.node(placement.nodes[0][0])
    served = {role: [l for l in launches if l.role == role] for role in PD_ROLES}
    proxy = [*cluster.pd_proxy, "--host", head.client_address, "--port", str(ports.api)]
    for flag, role in (("prefiller", "prefill"), ("decoder", "decode")):
        proxy += [f"--{flag}-hosts", *(cluster.node(l.node).address for l in served[role])]
        proxy += [f"--{flag}-ports", *(str(l.port) for l in served[role])]
    launches.append(LaunchSpec("proxy", "proxy", head.name, head.host, tuple(proxy), (), ports.api, head.set_env))
    return Deployment((case.id,), tuple(launches), "proxy", model, model, placement)


def _instance_launch(
    p: InstancePlanner,
    side: _Side,
    slot: tuple[str, tuple[int, ...]],
    rank: int | None = None,
    dp: tuple[str, ...] = (),
) -> LaunchSpec:
    """One `vllm serve` of a side: the whole instance, or DP rank ``rank`` of an external side."""
    node_name, devices = slot
    node = p.cluster.node(node_name)
    port = side.port + (rank or 0)
    extra = [*dp, *(["--host", node.bind] if node.bind else []), "--port", str(port)]
    mg = side.mg
    argv = [*node.vllm, "serve", p.model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs)]
    world = side.per_rank if rank is not None else side.per_rank * side.inst.dp
    return LaunchSpec(
        side.role if rank is None else f"{side.role}-dp{rank}",
        side.role,
        node.name,
        node.host,
        tuple(argv),
        p.node_env(mg, node, devices, world, side.role == "prefill"),
        port,
        node.set_env,
        p.origins(mg, extra),
        p.env_origins(mg),
    )


def _default_placement(cluster: Cluster, sides: list[_Side]) -> Placement:
    """Where the sides go when no lease says: the prefill's node(s) first, then the decode's; on
    distinct nodes where the cluster has them (prefill on the first that fits, decode on the next
    nodes), else packed onto the one host in turn."""
    slots = [n for side in sides for n in side.slots]
    p_slots = sides[0].slots
    if len(cluster.nodes) >= 2:
        first = default_placement(cluster, p_slots[0], 1).nodes[0]
        start = next(i for i, n in enumerate(cluster.nodes) if n.name == first[0])
        rest = [n for n in cluster.nodes[start + 1 :] + cluster.nodes[:start]][: len(slots) - 1]
        if len(rest) == len(slots) - 1:
            out = [first]
            for node, need in zip(rest, slots[1:], strict=True):
                if len(node.devices) < need:
                    role = "prefill" if len(out) < len(p_slots) else "decode"
                    raise PlanError(
                        f"cluster '{cluster.name}' cannot hold the {role} instance: node {node.name} "
                        f"has {len(node.devices)} device(s), {need} needed"
                    )
                out.append((node.name, tuple(node.devices[:need])))
            return Placement(tuple(out))
    both = default_placement(cluster, sum(slots), 1).nodes[0]
    out, at = [], 0
    for need in slots:
        out.append((both[0], both[1][at : at + need]))
        at += need
    return Placement(tuple(out))

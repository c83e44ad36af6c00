"""Prefill/decode disaggregation: the two instances of a P/D pair, the KV-transfer config each
side needs (Mooncake's, vLLM's ExampleConnector's shared store on the CPU target, or a feature's
own connector for that side), and the proxy in front, bound to the address ppconf's client uses."""

from __future__ import annotations

import json

from harness.cases.merge import json_args
from harness.launch import Deployment, LaunchSpec, Placement, PlanError
from harness.matrix.schema import Platform, Topology
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


def plan_pd(p: InstancePlanner) -> Deployment:
    """The prefill instance, the decode instance and the proxy of one P/D case; ``merged`` and the
    other parts are the planner's, so both sides get one merge with one precedence."""
    case, cluster, topo, placement, ports, model = p.case, p.cluster, p.topo, p.placement, p.ports, p.model
    merged, node_env, origins, env_origins, own_kv = p.merged, p.node_env, p.origins, p.env_origins, p.own_kv
    decode = topo.decode
    assert decode is not None, "a P/D topology has a decode instance"
    connector = topo.connector or "MooncakeConnectorV1"
    kv_base = clear_of_reserved(ports.kv, p.platform, cluster)
    # the prefill's split: the case's partition, or one its flags' layers set in the env (an
    # imported config gives it so)
    partition = case.partition if case.partition != "auto" else None
    partition = partition or merged(topo, None, "prefill").vllm_env.get(PARTITION_ENV)
    extra_config = connector_extra_config(connector, topo, partition, kv_base)
    sides = (("prefill", "kv_producer", topo, ports.prefill, 0), ("decode", "kv_consumer", decode, ports.decode, 1))
    merged_sides = []
    for role, kv_role, inst, _port, index in sides:
        # each instance uses kv_port .. kv_port + its device count: keep the ranges apart
        kv_port = str(kv_base + index * 100)
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
        # vLLM's world of each instance: TP x PP x PCP per DP rank
        merged_sides.append((mg, inst.tp * inst.pp * mg.pcp * inst.dp))
    p_devices, d_devices = merged_sides[0][1], merged_sides[1][1]
    if placement is None:
        if len(cluster.nodes) >= 2:
            second = cluster.nodes[1]
            if len(second.devices) < d_devices:
                raise PlanError(
                    f"cluster '{cluster.name}' cannot hold the decode instance: node {second.name} "
                    f"has {len(second.devices)} device(s), {d_devices} needed"
                )
            placement = Placement(
                (default_placement(cluster, p_devices, 1).nodes[0], (second.name, tuple(second.devices[:d_devices])))
            )
        else:
            both = default_placement(cluster, p_devices + d_devices, 1).nodes[0]
            placement = Placement(((both[0], both[1][:p_devices]), (both[0], both[1][p_devices:])))
    hosts = [cluster.node(name).host for name, _ in placement.nodes]
    if connector == SHARED_STORE_CONNECTOR and hosts[0] != hosts[1]:
        raise PlanError(
            f"{case.id}: {connector} shares its KV store through one host's files; the prefill instance "
            f"is placed on {placement.nodes[0][0]} ({hosts[0]}), the decode instance on "
            f"{placement.nodes[1][0]} ({hosts[1]})"
        )
    launches = []
    for (role, _kv_role, _inst, port, index), (mg, world) in zip(sides, merged_sides, strict=True):
        node_name, devices = placement.nodes[index]
        node = cluster.node(node_name)
        extra = ["--host", node.bind] if node.bind else []
        extra += ["--port", str(port)]
        argv = [*node.vllm, "serve", model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs)]
        launches.append(
            LaunchSpec(
                role,
                role,
                node.name,
                node.host,
                tuple(argv),
                node_env(mg, node, devices, world, role == "prefill"),
                port,
                node.set_env,
                origins(mg, extra),
                env_origins(mg),
            )
        )
    head = cluster.node(placement.nodes[0][0])
    p_node = cluster.node(placement.nodes[0][0])
    d_node = cluster.node(placement.nodes[1][0])
    proxy = [
        *cluster.pd_proxy,
        "--host",
        head.client_address,
        "--port",
        str(ports.api),
        "--prefiller-hosts",
        p_node.address,
        "--prefiller-ports",
        str(ports.prefill),
        "--decoder-hosts",
        d_node.address,
        "--decoder-ports",
        str(ports.decode),
    ]
    launches.append(LaunchSpec("proxy", "proxy", head.name, head.host, tuple(proxy), (), ports.api, head.set_env))
    return Deployment((case.id,), tuple(launches), "proxy", model, model, placement)

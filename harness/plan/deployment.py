"""Launch plans: the exact processes one case needs, per node — argv lists and environment.

Pure: a plan depends only on the matrix, the case, the cluster inventory, where the case is
placed and which ports it uses. Plans print and diff with no devices and no vLLM installed.
Flags follow the order of the vllm-ascend guide's examples, and default values (port 8000,
vLLM's own executor choice) are left out, so a plan for the guide's layouts reads as the guide.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.cases.case import Case
from harness.cases.merge import Merged, instance_features, json_args, matrix_layers, merge, topology_layer
from harness.launch import Deployment, LaunchSpec, Placement, PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import Topology
from harness.plan.cluster import Cluster, Node
from harness.plan.launch import API_PORT, Ports, default_placement
from harness.plan.pd import plan_pd


def _device_value(fmt: str, devices: tuple[int, ...], ranks: int) -> str:
    if fmt == "comma-list":
        return ",".join(str(d) for d in devices)
    # cpu-bind: one core range per local rank, "0|1" or "0-1|2-3"
    per = max(1, len(devices) // max(1, ranks))
    groups = [devices[i * per : (i + 1) * per] for i in range(ranks)]
    return "|".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups)


ModelResolver = Callable[[str], str]


def resolve_model_default(ref: str) -> str:
    if ref.startswith("zoo:"):
        from harness.target.zoo import default_cache_root, model_dir

        return str(model_dir(ref[4:], default_cache_root()))
    return ref


class MergeError(PlanError):
    """The case's layers disagree (harness.cases.merge); every message names its origins."""

    def __init__(self, case_id: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"case {case_id}: " + "; ".join(errors))


PLANNER = "planned by ppconf for this node"


def plan(
    m: Matrix,
    case: Case,
    cluster: Cluster,
    placement: Placement | None = None,
    ports: Ports | None = None,
    resolve_model: ModelResolver = resolve_model_default,
    topology: Topology | None = None,
) -> Deployment:
    """``topology`` stands in for the case's named one (a reference's layout, derived from the case's);
    without ``ports``, the defaults the guide's examples use."""
    ports = ports or Ports()
    topo = topology or m.topologies[case.topology]
    variant = m.variant(case.family, case.variant)
    platform = m.platforms[case.platform]
    model = resolve_model(variant.model)
    where = str(m.where.get(("topologies", case.topology), ""))

    def merged(inst, extra_configs: dict | None = None, role: str | None = None) -> Merged:
        """The launch's flags, env and JSON configs on one instance (``role``: a P/D side, or None)."""
        layers = matrix_layers(
            m,
            case.platform,
            case.family,
            case.variant,
            case.features,
            case.suite,
            case.group,
            case.expectation.rule,
            topo.backend,
            role,
        )
        head: list[str] = []
        if topo.backend:
            head += ["--distributed-executor-backend", topo.backend]
        head += ["--tensor-parallel-size", str(inst.tp), "--pipeline-parallel-size", str(inst.pp)]
        if inst.dp > 1:
            head += ["--data-parallel-size", str(inst.dp)]
        mg = merge([*layers, topology_layer(case.topology, head, extra_configs, where)])
        if mg.errors:
            raise MergeError(case.id, mg.errors)
        spec = mg.configs.get("speculative-config")
        if spec and spec.get("method") in variant.drafters and "model" not in spec:
            mg.configs["speculative-config"] = {**spec, "model": resolve_model(variant.drafters[spec["method"]])}
            mg.config_origins["speculative-config"].append(
                f"{m.at('families', case.family, 'variants', case.variant, 'drafters', spec['method'])} "
                f"(drafter of {case.family}/{case.variant})"
            )
        return mg

    custom = case.partition != "auto"

    def node_env(
        mg: Merged, node: Node, devices: tuple[int, ...], ranks: int, partition: bool, vllm: bool = True
    ) -> tuple[tuple[str, str], ...]:
        e = dict(mg.vllm_env if vllm else mg.env)
        for var, attr in platform.node_env.items():
            e[var] = getattr(node, attr)
        e[platform.device_env] = _device_value(platform.device_format, devices, ranks)
        if topo.backend == "ray":
            e.update(platform.ray_env)
        if partition and custom:
            e["VLLM_PP_LAYER_PARTITION"] = case.partition
        e.update(node.env)
        return tuple(sorted(e.items()))

    def origins(mg: Merged, extra: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        out = {k: tuple(v) for k, v in mg.flag_origins.items()}
        out.update({f"--{k}": tuple(v) for k, v in mg.config_origins.items()})
        for token in extra:
            if token.startswith("--"):
                out[token] = (*out.get(token, ()), PLANNER)
        return tuple(out.items())

    def env_origins(mg: Merged) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((k, tuple(v)) for k, v in mg.env_origins.items())

    if topo.decode is not None:

        def own_kv(role: str) -> dict:
            """The kv-transfer-config a feature brings for one P/D side (the layerwise / sparse KV
            offload), which then stands in for the topology's connector there; else {}."""
            return next(
                (
                    dict(m.features[f].side(role).configs["kv-transfer-config"])
                    for f in instance_features(m, case.features, case.suite, case.group, role)
                    if "kv-transfer-config" in m.features[f].side(role).configs
                ),
                {},
            )

        return plan_pd(case, cluster, topo, placement, ports, model, merged, node_env, origins, env_origins, own_kv)

    mg = merged(topo)
    # what the case (and a run's lease) was sized for: the layers before the rule
    sized = merge(matrix_layers(m, case.platform, case.family, case.variant, case.features, case.suite, case.group)).pcp
    if mg.pcp != sized:  # a rule's flags changed it
        raise MergeError(
            case.id,
            [
                f"vLLM's world size is {topo.tp * topo.pp * mg.pcp * topo.dp} "
                f"(TP {topo.tp} x PP {topo.pp} x PCP {mg.pcp} x DP {topo.dp}) "
                f"but the case is planned on {topo.world * sized} device(s) "
                f"({topo.world * sized // topo.nnodes} per node over {topo.nnodes} node(s), PCP {sized}); "
                f"the PCP size comes from {', '.join(mg.flag_origins.get('--prefill-context-parallel-size', ['?']))}: "
                f"give it in a feature, suite or group instead of a rule"
            ],
        )
    per_rank = topo.tp * topo.pp * mg.pcp  # vLLM's world size of one DP rank
    if topo.dp_mode is not None:
        return _plan_dp(case, cluster, topo, placement, ports, model, mg, per_rank, node_env, origins, env_origins)
    nnodes = topo.nnodes
    world = per_rank * topo.dp
    if world % nnodes:
        raise PlanError(
            f"case {case.id}: a world of {world} (TP {topo.tp} x PP {topo.pp} x PCP {mg.pcp} x "
            f"DP {topo.dp}) does not split over {nnodes} nodes"
        )
    per_node = world // nnodes
    placement = placement or default_placement(cluster, per_node, nnodes)
    head = cluster.node(placement.nodes[0][0])
    launches: list[LaunchSpec] = []

    def serve(node: Node, extra: list[str], api: bool, rank: int = 0) -> tuple[tuple[str, ...], tuple]:
        net = []
        if api and node.bind:
            net += ["--host", node.bind]
        if api and ports.api != API_PORT:
            net += ["--port", str(ports.api)]
        configs = _kv_port_apart(mg.configs, placement, rank, per_node)
        argv = (*node.vllm, "serve", model, *mg.args("head"), *extra, *net, *mg.args("tail"), *json_args(configs))
        return argv, origins(mg, extra + net)

    if topo.backend == "ray" and nnodes > 1:
        for rank, (node_name, devices) in enumerate(placement.nodes):
            node = cluster.node(node_name)
            start = ["ray", "start", "--block", "--node-ip-address", node.address]
            start += ["--head", "--port", str(ports.ray)] if rank == 0 else ["--address", f"{head.address}:{ports.ray}"]
            launches.append(
                LaunchSpec(
                    f"node{rank}-{'ray-head' if rank == 0 else 'ray-worker'}",
                    "ray-head" if rank == 0 else "ray-worker",
                    node.name,
                    node.host,
                    tuple(start),
                    node_env(mg, node, devices, per_node, True, vllm=False),
                    set_env=node.set_env,
                    env_origins=env_origins(mg),
                )
            )
        node_name, devices = placement.nodes[0]
        argv, why = serve(head, [], True)
        launches.append(
            LaunchSpec(
                "node0-api",
                "api",
                head.name,
                head.host,
                argv,
                node_env(mg, head, devices, per_node, True),
                ports.api,
                head.set_env,
                why,
                env_origins(mg),
            )
        )
    else:
        for rank, (node_name, devices) in enumerate(placement.nodes):
            node = cluster.node(node_name)
            extra: list[str] = []
            if nnodes > 1:
                extra = [
                    "--nnodes",
                    str(nnodes),
                    "--node-rank",
                    str(rank),
                    "--master-addr",
                    head.address,
                    "--master-port",
                    str(ports.master),
                ]
                if rank > 0:
                    extra.append("--headless")
            role = "api" if rank == 0 else "headless"
            argv, why = serve(node, extra, rank == 0, rank)
            launches.append(
                LaunchSpec(
                    f"node{rank}-{role}",
                    role,
                    node.name,
                    node.host,
                    argv,
                    node_env(mg, node, devices, per_node, True),
                    ports.api if rank == 0 else None,
                    node.set_env,
                    why,
                    env_origins(mg),
                )
            )
    return Deployment((case.id,), tuple(launches), "node0-api", model, model, placement)


def _kv_port_apart(configs: dict, placement: Placement, rank: int, per_node: int) -> dict:
    """Node ranks packed onto one host (the local host playing two nodes) each bind a KV port
    per device from kv_port up: later ranks on the same host start past the earlier ones'."""
    kv = configs.get("kv-transfer-config")
    if not kv or "kv_port" not in kv:
        return configs
    host = placement.nodes[rank][0]
    before = sum(1 for name, _ in placement.nodes[:rank] if name == host)
    if not before:
        return configs
    port = int(kv["kv_port"]) + before * per_node
    return {**configs, "kv-transfer-config": {**kv, "kv_port": str(port) if isinstance(kv["kv_port"], str) else port}}


def _plan_dp(case, cluster, topo, placement, ports, model, mg, per_rank, node_env, origins, env_origins) -> Deployment:
    """DP across nodes, each DP rank holding TP x PP (x PCP): internal (one `vllm serve` per node
    running its local DP ranks, headless off the head) or external (one engine per DP rank)."""
    local = topo.dp // topo.nnodes
    placement = placement or default_placement(cluster, local * per_rank, topo.nnodes)
    head = cluster.node(placement.nodes[0][0])
    dp_net = ["--data-parallel-address", head.address, "--data-parallel-rpc-port", str(ports.dp_rpc)]
    launches: list[LaunchSpec] = []
    for index, (node_name, devices) in enumerate(placement.nodes):
        node = cluster.node(node_name)
        if topo.dp_mode == "internal":
            extra = ["--data-parallel-size-local", str(local), *dp_net]
            if index > 0:
                extra += ["--data-parallel-start-rank", str(index * local), "--headless"]
            elif node.bind:
                extra += ["--host", node.bind]
            if index == 0 and ports.api != API_PORT:
                extra += ["--port", str(ports.api)]
            role = "api" if index == 0 else "headless"
            argv = (*node.vllm, "serve", model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs))
            launches.append(
                LaunchSpec(
                    f"node{index}-{role}",
                    role,
                    node.name,
                    node.host,
                    argv,
                    node_env(mg, node, devices, local * per_rank, True),
                    ports.api if index == 0 else None,
                    node.set_env,
                    origins(mg, extra),
                    env_origins(mg),
                )
            )
            continue
        for slot in range(local):
            rank = index * local + slot
            port = ports.api + rank
            extra = ["--data-parallel-rank", str(rank), *dp_net]
            if node.bind:
                extra += ["--host", node.bind]
            if port != API_PORT:
                extra += ["--port", str(port)]
            argv = (*node.vllm, "serve", model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs))
            mine = devices[slot * per_rank : (slot + 1) * per_rank]
            launches.append(
                LaunchSpec(
                    f"dp{rank}",
                    "api" if rank == 0 else "dp-rank",
                    node.name,
                    node.host,
                    argv,
                    node_env(mg, node, mine, per_rank, True),
                    port,
                    node.set_env,
                    origins(mg, extra),
                    env_origins(mg),
                )
            )
    api = launches[0].name
    return Deployment((case.id,), tuple(launches), api, model, model, placement)

"""Launch plans: the exact processes one case needs, per node — argv lists and environment.

Pure: a plan depends only on the matrix, the case, the cluster inventory, where the case is
placed and which ports it uses. Plans print and diff with no devices and no vLLM installed.
Flags follow the order of the vllm-ascend guide's examples, and default values (port 8000,
vLLM's own executor choice) are left out, so a plan for the guide's layouts reads as the guide.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.cases.case import Case
from harness.matrix.load import Matrix
from harness.matrix.schema import Topology
from harness.plan.cluster import Cluster, Node
from harness.plan.merge import Merged, json_args, matrix_layers, merge, topology_layer
from harness.results import redact

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


@dataclass(frozen=True)
class Placement:
    """Which cluster node and which of its devices each node rank of the deployment uses."""

    nodes: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class LaunchSpec:
    name: str  # unique within the deployment, e.g. "node0-api"
    role: str  # api | headless | ray-head | ray-worker | prefill | decode | proxy
    node: str  # cluster node name
    host: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # set on top of the node's environment
    port: int | None = None  # HTTP port when this process serves the OpenAI API
    set_env: str | None = None  # script sourced first on the node
    # flag -> the matrix entries (file:line:col) that gave it, for messages about the plan
    origins: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    env_origins: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shell(self) -> str:
        """A command a person can paste on the node."""
        lines = []
        if self.set_env:
            lines.append(f"source {shlex.quote(self.set_env)}")
        lines += [export(k, v) for k, v in self.env]
        lines.append(" \\\n    ".join(_shell_words(self.argv)))
        return "\n".join(lines)

    def to_json(self) -> dict:
        """For results and reports: secret-looking variables and flags are masked, and so is
        any of their values wherever else it appears (inside a JSON config, another flag)."""
        scrub = redact.Redactor().learn(self).scrub
        return {
            "name": self.name,
            "role": self.role,
            "node": self.node,
            "host": self.host,
            "argv": scrub(redact.argv(self.argv)),
            "env": scrub(redact.env(dict(self.env))),
            "port": self.port,
            "set_env": self.set_env,
        }


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def export(name: str, value: str) -> str:
    """``export NAME=VALUE`` for a shell; a name that is not a shell identifier is refused, since
    it cannot be quoted (``A=1; touch X; B`` would run ``touch X``)."""
    if not ENV_NAME.fullmatch(name):
        raise PlanError(f"environment variable name {name!r} is not a valid identifier")
    return f"export {name}={shlex.quote(value)}"


def _shell_words(argv: tuple[str, ...]) -> list[str]:
    """Quoted argv, a flag and its value on one line as the guide writes them."""
    words: list[str] = []
    i = 0
    while i < len(argv):
        word = shlex.quote(argv[i])
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            word += " " + shlex.quote(argv[i + 1])
            i += 1
        words.append(word)
        i += 1
    # the command, its subcommand and the model stay on the first line
    n = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return [" ".join(words[:n])] + words[n:]


@dataclass(frozen=True)
class Deployment:
    case_ids: tuple[str, ...]
    launches: tuple[LaunchSpec, ...]
    api: str  # name of the launch that answers requests
    model: str = ""
    model_name: str = ""  # the name requests use (vLLM's served model name)
    placement: Placement | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """Identical launches (ports aside) make one deployment, whatever cases need it."""
        body = json.dumps([(l.role, l.node, l.argv, l.env) for l in self.launches], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def launch(self, name: str) -> LaunchSpec:
        return next(l for l in self.launches if l.name == name)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "cases": list(self.case_ids),
            "api": self.api,
            "model": self.model,
            "launches": [l.to_json() for l in self.launches],
        }


class PlanError(ValueError):
    pass


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
    """The case's layers disagree (harness.plan.merge); every message names its origins."""

    def __init__(self, case_id: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"case {case_id}: " + "; ".join(errors))


PLANNER = "planned by ppconf for this node"


def plan(
    m: Matrix,
    case: Case,
    cluster: Cluster,
    placement: Placement | None = None,
    ports: Ports = Ports(),
    resolve_model: ModelResolver = resolve_model_default,
    topology: Topology | None = None,
) -> Deployment:
    """``topology`` stands in for the case's named one (a reference's layout, derived from the case's)."""
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
                    for f in case.features
                    if "kv-transfer-config" in m.features[f].side(role).configs
                ),
                {},
            )

        return _plan_pd(case, cluster, topo, placement, ports, model, merged, node_env, origins, env_origins, own_kv)

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


def kv_parallel_config(topo: Topology, case: Case) -> dict:
    """The prefill/decode topology both sides of a Mooncake P/D pair must describe identically."""
    assert topo.decode is not None
    prefill: dict[str, int | str] = {"dp_size": topo.dp, "tp_size": topo.tp, "pp_size": topo.pp}
    if case.partition != "auto":
        prefill["pp_layer_partition"] = case.partition
    return {
        "prefill": prefill,
        "decode": {"dp_size": topo.decode.dp, "tp_size": topo.decode.tp, "pp_size": topo.decode.pp},
    }


def _plan_pd(
    case, cluster, topo, placement, ports, model, merged, node_env, origins, env_origins, own_kv
) -> Deployment:
    decode = topo.decode
    extra_config = kv_parallel_config(topo, case)
    connector = topo.connector or "MooncakeConnectorV1"
    sides = (("prefill", "kv_producer", topo, ports.prefill, 0), ("decode", "kv_consumer", decode, ports.decode, 1))
    merged_sides = []
    for role, kv_role, inst, _port, index in sides:
        # each instance uses kv_port .. kv_port + its device count: keep the ranges apart
        kv_port = str(ports.kv + index * 100)
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
    if head.bind:
        proxy[len(cluster.pd_proxy) : len(cluster.pd_proxy)] = ["--host", head.bind]
    launches.append(LaunchSpec("proxy", "proxy", head.name, head.host, tuple(proxy), (), ports.api, head.set_env))
    return Deployment((case.id,), tuple(launches), "proxy", model, model, placement)


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

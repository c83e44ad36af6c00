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

from harness.results import redact
from harness.cases.case import Case
from harness.plan.cluster import Cluster, Node
from harness.matrix.load import Matrix
from harness.matrix.schema import JSON_FLAGS, Topology

API_PORT = 8000
MASTER_PORT = 29501
RAY_PORT = 6379
KV_PORT = 30000
PD_PORTS = (8100, 8200)  # prefill, decode API ports behind the proxy


@dataclass(frozen=True)
class Ports:
    api: int = API_PORT
    master: int = MASTER_PORT
    ray: int = RAY_PORT
    kv: int = KV_PORT
    prefill: int = PD_PORTS[0]
    decode: int = PD_PORTS[1]


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
        return {"name": self.name, "role": self.role, "node": self.node, "host": self.host,
                "argv": scrub(redact.argv(self.argv)), "env": scrub(redact.env(dict(self.env))),
                "port": self.port, "set_env": self.set_env}


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
        return {"key": self.key, "cases": list(self.case_ids), "api": self.api, "model": self.model,
                "launches": [l.to_json() for l in self.launches]}


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
    groups = [devices[i * per:(i + 1) * per] for i in range(ranks)]
    return "|".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups)


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


ModelResolver = Callable[[str], str]


def resolve_model_default(ref: str) -> str:
    if ref.startswith("zoo:"):
        from harness.target.zoo import default_cache_root, model_dir

        return str(model_dir(ref[4:], default_cache_root()))
    return ref


def plan(m: Matrix, case: Case, cluster: Cluster, placement: Placement | None = None,
         ports: Ports = Ports(), resolve_model: ModelResolver = resolve_model_default,
         topology: Topology | None = None) -> Deployment:
    """``topology`` stands in for the case's named one (a reference's layout, derived from the case's)."""
    topo = topology or m.topologies[case.topology]
    variant = m.variant(case.family, case.variant)
    platform = m.platforms[case.platform]
    model = resolve_model(variant.model)
    features = [m.features[f] for f in case.features]

    def expression(role: str | None) -> tuple[list[str], dict[str, str], dict[str, dict]]:
        """The stacked features' args, env and JSON-config fragments on one instance (``role``:
        a P/D side, or None)."""
        args: list[str] = []
        env: dict[str, str] = dict(platform.env)
        env.update(variant.env)
        configs: dict[str, dict] = {}
        for f in features:
            side = f.side(role)
            args += side.args
            env.update(side.env)
            for flag, fragment in side.configs.items():
                configs[flag] = _merge(configs.get(flag, {}), fragment)
        spec = configs.get("speculative-config")
        if spec and spec.get("method") in variant.drafters and "model" not in spec:
            configs["speculative-config"] = {**spec, "model": resolve_model(variant.drafters[spec["method"]])}
        return args, env, configs

    args, env, configs = expression(None)
    custom = case.partition != "auto"

    def node_env(node: Node, devices: tuple[int, ...], ranks: int, partition: bool,
                 role: str | None = None) -> dict[str, str]:
        e = dict(expression(role)[1] if role else env)
        for var, attr in platform.node_env.items():
            e[var] = getattr(node, attr)
        e[platform.device_env] = _device_value(platform.device_format, devices, ranks)
        if topo.backend == "ray":
            e.update(platform.ray_env)
        if partition and custom:
            e["VLLM_PP_LAYER_PARTITION"] = case.partition
        e.update(node.env)
        return e

    def json_args(extra: dict[str, dict] | None = None, role: str | None = None,
                  replace: dict[str, dict] | None = None) -> list[str]:
        """``extra`` is merged under the features' fragments; ``replace`` stands in for them."""
        merged = dict(expression(role)[2] if role else configs)
        for flag, value in (extra or {}).items():
            merged[flag] = _merge(value, merged.get(flag, {}))
        merged.update(replace or {})
        out: list[str] = []
        for flag in JSON_FLAGS:
            if flag in merged:
                out += [f"--{flag}", _json(merged[flag])]
        return out

    tail = [*variant.serve_args, *platform.serve_args, *args]
    if topo.decode is not None:
        def side(role: str) -> tuple[list[str], dict]:
            """A P/D side's flags, and the kv-transfer-config its features bring (else {})."""
            side_args, _, side_configs = expression(role)
            return [*variant.serve_args, *platform.serve_args, *side_args], side_configs.get("kv-transfer-config", {})

        return _plan_pd(m, case, cluster, topo, placement, ports, model, side, node_env, json_args)

    nnodes = topo.nnodes
    per_node = topo.world // nnodes
    placement = placement or default_placement(cluster, per_node, nnodes)
    head = cluster.node(placement.nodes[0][0])
    launches: list[LaunchSpec] = []
    base = [model]
    if topo.backend:
        base += ["--distributed-executor-backend", topo.backend]
    base += ["--tensor-parallel-size", str(topo.tp), "--pipeline-parallel-size", str(topo.pp)]
    if topo.dp > 1:
        base += ["--data-parallel-size", str(topo.dp)]

    def serve(node: Node, extra: list[str], api: bool) -> tuple[str, ...]:
        net = []
        if api and node.bind:
            net += ["--host", node.bind]
        if api and ports.api != API_PORT:
            net += ["--port", str(ports.api)]
        return (*node.vllm, "serve", *base, *extra, *net, *tail, *json_args())

    if topo.backend == "ray" and nnodes > 1:
        for rank, (node_name, devices) in enumerate(placement.nodes):
            node = cluster.node(node_name)
            start = ["ray", "start", "--block", "--node-ip-address", node.address]
            start += ["--head", "--port", str(ports.ray)] if rank == 0 else ["--address", f"{head.address}:{ports.ray}"]
            launches.append(LaunchSpec(f"node{rank}-{'ray-head' if rank == 0 else 'ray-worker'}",
                                       "ray-head" if rank == 0 else "ray-worker", node.name, node.host,
                                       tuple(start), tuple(sorted(node_env(node, devices, per_node, True).items())),
                                       set_env=node.set_env))
        node_name, devices = placement.nodes[0]
        launches.append(LaunchSpec("node0-api", "api", head.name, head.host, serve(head, [], True),
                                   tuple(sorted(node_env(head, devices, per_node, True).items())),
                                   ports.api, head.set_env))
        api = "node0-api"
    else:
        for rank, (node_name, devices) in enumerate(placement.nodes):
            node = cluster.node(node_name)
            extra: list[str] = []
            if nnodes > 1:
                extra = ["--nnodes", str(nnodes), "--node-rank", str(rank),
                         "--master-addr", head.address, "--master-port", str(ports.master)]
                if rank > 0:
                    extra.append("--headless")
            role = "api" if rank == 0 else "headless"
            launches.append(LaunchSpec(f"node{rank}-{role}", role, node.name, node.host,
                                       serve(node, extra, rank == 0),
                                       tuple(sorted(node_env(node, devices, per_node, True).items())),
                                       ports.api if rank == 0 else None, node.set_env))
        api = "node0-api"
    return Deployment((case.id,), tuple(launches), api, model, model, placement)


def kv_parallel_config(topo: Topology, case: Case) -> dict:
    """The prefill/decode topology both sides of a Mooncake P/D pair must describe identically."""
    assert topo.decode is not None
    prefill = {"dp_size": topo.dp, "tp_size": topo.tp, "pp_size": topo.pp}
    if case.partition != "auto":
        prefill["pp_layer_partition"] = case.partition
    return {"prefill": prefill, "decode": {"dp_size": topo.decode.dp, "tp_size": topo.decode.tp, "pp_size": topo.decode.pp}}


def _plan_pd(m, case, cluster, topo, placement, ports, model, side, node_env, json_args) -> Deployment:
    decode = topo.decode
    p_devices = topo.world
    d_devices = decode.tp * decode.pp * decode.dp
    if placement is None:
        if len(cluster.nodes) >= 2:
            second = cluster.nodes[1]
            if len(second.devices) < d_devices:
                raise PlanError(f"cluster '{cluster.name}' cannot hold the decode instance: node {second.name} "
                                f"has {len(second.devices)} device(s), {d_devices} needed")
            placement = Placement((default_placement(cluster, p_devices, 1).nodes[0],
                                   (second.name, tuple(second.devices[:d_devices]))))
        else:
            both = default_placement(cluster, p_devices + d_devices, 1).nodes[0]
            placement = Placement(((both[0], both[1][:p_devices]), (both[0], both[1][p_devices:])))
    extra_config = kv_parallel_config(topo, case)
    connector = topo.connector or "MooncakeConnectorV1"
    launches = []
    sides = (("prefill", "kv_producer", topo, ports.prefill, 0), ("decode", "kv_consumer", decode, ports.decode, 1))
    for role, kv_role, inst, port, index in sides:
        node_name, devices = placement.nodes[index]
        node = cluster.node(node_name)
        world = inst.tp * inst.pp * inst.dp
        tail, own_kv = side(role)
        # each instance uses kv_port .. kv_port + its device count: keep the ranges apart
        kv_port = str(ports.kv + index * 100)
        if own_kv:
            # a feature that brings its own connector for this side (the layerwise / sparse KV
            # offload) replaces the topology's Mooncake config there; the plan only assigns the port
            kv = {"kv-transfer-config": {**own_kv, **({"kv_port": kv_port} if "kv_port" in own_kv else {})}}
        else:
            kv = {"kv-transfer-config": {
                "kv_connector": connector, "kv_role": kv_role, "kv_port": kv_port, "engine_id": str(index),
                "kv_connector_extra_config": extra_config,
            }}
        argv = [*node.vllm, "serve", model, "--tensor-parallel-size", str(inst.tp),
                "--pipeline-parallel-size", str(inst.pp)]
        if inst.dp > 1:
            argv += ["--data-parallel-size", str(inst.dp)]
        if node.bind:
            argv += ["--host", node.bind]
        argv += ["--port", str(port), *tail, *(json_args(replace=kv, role=role) if own_kv else json_args(kv, role))]
        launches.append(LaunchSpec(role, role, node.name, node.host, tuple(argv),
                                   tuple(sorted(node_env(node, devices, world, role == "prefill", role).items())),
                                   port, node.set_env))
    head = cluster.node(placement.nodes[0][0])
    p_node = cluster.node(placement.nodes[0][0])
    d_node = cluster.node(placement.nodes[1][0])
    proxy = [*cluster.pd_proxy, "--port", str(ports.api),
             "--prefiller-hosts", p_node.address, "--prefiller-ports", str(ports.prefill),
             "--decoder-hosts", d_node.address, "--decoder-ports", str(ports.decode)]
    if head.bind:
        proxy[len(cluster.pd_proxy):len(cluster.pd_proxy)] = ["--host", head.bind]
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

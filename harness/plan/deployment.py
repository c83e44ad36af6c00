"""Launch plans: the exact processes one case needs, per node — argv lists and environment.

Pure: a plan depends only on the matrix, the case, the cluster inventory, where the case is
placed and which ports it uses. Plans print and diff with no devices and no vLLM installed.
Flags follow the order of the vllm-ascend guide's examples, and default values (port 8000,
vLLM's own executor choice) are left out, so a plan for the guide's layouts reads as the guide.

One ``DeploymentPlanner`` per plan: a P/D pair is planned by ``harness.plan.pd``, DP across
nodes by ``dp``, every other layout (one node, mp across nodes, a Ray cluster) by ``nodes``.
"""

from __future__ import annotations

from harness.cases.case import Case
from harness.cases.merge import Merged, json_args
from harness.launch import Deployment, LaunchSpec, Placement, PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import Topology
from harness.plan.cluster import Cluster, Node
from harness.plan.instance import InstancePlanner, MergeError, ModelResolver, Origins, resolve_model_default
from harness.plan.launch import API_PORT, Ports, default_placement
from harness.plan.pd import plan_pd


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
    return DeploymentPlanner(m, case, cluster, placement, ports or Ports(), resolve_model, topology).plan()


class DeploymentPlanner(InstancePlanner):
    """The launches of one case: the layout its topology names, on the placement given or the
    cluster's first fit."""

    def plan(self) -> Deployment:
        if self.topo.decode is not None:
            return plan_pd(self)
        mg = self.merged(self.topo)
        self.check_sized(mg)
        if self.topo.dp_mode is not None:
            return self.dp(mg)
        return self.nodes(mg)

    def check_sized(self, mg: Merged) -> None:
        """vLLM's world size must be the one the case was sized (and a run's lease taken) for."""
        topo = self.topo
        sized = self.sized_pcp()
        if mg.pcp != sized:  # a rule's flags changed it
            origin = ", ".join(mg.flag_origins.get("--prefill-context-parallel-size", ["?"]))
            raise MergeError(
                self.case.id,
                [
                    f"vLLM's world size is {topo.tp * topo.pp * mg.pcp * topo.dp} "
                    f"(TP {topo.tp} x PP {topo.pp} x PCP {mg.pcp} x DP {topo.dp}) "
                    f"but the case is planned on {topo.world * sized} device(s) "
                    f"({topo.world * sized // topo.nnodes} per node over {topo.nnodes} node(s), PCP {sized}); "
                    f"the PCP size comes from {origin}: "
                    f"give it in a feature, suite or group instead of a rule"
                ],
            )

    def nodes(self, mg: Merged) -> Deployment:
        """One `vllm serve` per node (headless off the head), or a Ray cluster with the API on its head."""
        topo = self.topo
        nnodes = topo.nnodes
        world = topo.tp * topo.pp * mg.pcp * topo.dp
        if world % nnodes:
            raise PlanError(
                f"case {self.case.id}: a world of {world} (TP {topo.tp} x PP {topo.pp} x PCP {mg.pcp} x "
                f"DP {topo.dp}) does not split over {nnodes} nodes"
            )
        per_node = world // nnodes
        placement = self.placement or default_placement(self.cluster, per_node, nnodes)
        if topo.backend == "ray" and nnodes > 1:
            launches = self.ray(mg, placement, per_node)
        else:
            launches = [self.node_launch(mg, placement, per_node, rank) for rank in range(nnodes)]
        return Deployment((self.case.id,), tuple(launches), "node0-api", self.model, self.model, placement)

    def serve(
        self, mg: Merged, node: Node, extra: list[str], api: bool, placement: Placement, per_node: int, rank: int = 0
    ) -> tuple[tuple[str, ...], Origins]:
        """A node's `vllm serve` argv, and where each of its flags came from."""
        net = []
        if api and node.bind:
            net += ["--host", node.bind]
        if api and self.ports.api != API_PORT:
            net += ["--port", str(self.ports.api)]
        configs = _kv_port_apart(mg.configs, placement, rank, per_node)
        argv = (*node.vllm, "serve", self.model, *mg.args("head"), *extra, *net, *mg.args("tail"), *json_args(configs))
        return argv, self.origins(mg, extra + net)

    def node_launch(self, mg: Merged, placement: Placement, per_node: int, rank: int) -> LaunchSpec:
        """Node rank ``rank`` of an mp deployment: the API server on rank 0, headless engines elsewhere."""
        nnodes = self.topo.nnodes
        node_name, devices = placement.nodes[rank]
        node = self.cluster.node(node_name)
        head = self.cluster.node(placement.nodes[0][0])
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
                str(self.ports.master),
            ]
            if rank > 0:
                extra.append("--headless")
        role = "api" if rank == 0 else "headless"
        argv, why = self.serve(mg, node, extra, rank == 0, placement, per_node, rank)
        return LaunchSpec(
            f"node{rank}-{role}",
            role,
            node.name,
            node.host,
            argv,
            self.node_env(mg, node, devices, per_node, True),
            self.ports.api if rank == 0 else None,
            node.set_env,
            why,
            self.env_origins(mg),
        )

    def ray(self, mg: Merged, placement: Placement, per_node: int) -> list[LaunchSpec]:
        """A Ray head and workers, one per node, then the API server on the head."""
        ports = self.ports
        head = self.cluster.node(placement.nodes[0][0])
        launches: list[LaunchSpec] = []
        for rank, (node_name, devices) in enumerate(placement.nodes):
            node = self.cluster.node(node_name)
            start = ["ray", "start", "--block", "--node-ip-address", node.address]
            start += ["--head", "--port", str(ports.ray)] if rank == 0 else ["--address", f"{head.address}:{ports.ray}"]
            launches.append(
                LaunchSpec(
                    f"node{rank}-{'ray-head' if rank == 0 else 'ray-worker'}",
                    "ray-head" if rank == 0 else "ray-worker",
                    node.name,
                    node.host,
                    tuple(start),
                    self.node_env(mg, node, devices, per_node, True, vllm=False),
                    set_env=node.set_env,
                    env_origins=self.env_origins(mg),
                )
            )
        _, devices = placement.nodes[0]
        argv, why = self.serve(mg, head, [], True, placement, per_node)
        launches.append(
            LaunchSpec(
                "node0-api",
                "api",
                head.name,
                head.host,
                argv,
                self.node_env(mg, head, devices, per_node, True),
                ports.api,
                head.set_env,
                why,
                self.env_origins(mg),
            )
        )
        return launches

    def dp(self, mg: Merged) -> Deployment:
        """DP across nodes, each DP rank holding TP x PP (x PCP): internal (one `vllm serve` per node
        running its local DP ranks, headless off the head) or external (one engine per DP rank)."""
        topo = self.topo
        per_rank = topo.tp * topo.pp * mg.pcp  # vLLM's world size of one DP rank
        local = topo.dp // topo.nnodes
        placement = self.placement or default_placement(self.cluster, local * per_rank, topo.nnodes)
        head = self.cluster.node(placement.nodes[0][0])
        dp_net = ["--data-parallel-address", head.address, "--data-parallel-rpc-port", str(self.ports.dp_rpc)]
        launches: list[LaunchSpec] = []
        for index, (node_name, devices) in enumerate(placement.nodes):
            node = self.cluster.node(node_name)
            if topo.dp_mode == "internal":
                launches.append(self.dp_node(mg, node, devices, index, local * per_rank, dp_net))
            else:
                for slot in range(local):
                    launches.append(self.dp_rank(mg, node, devices, index * local + slot, slot, per_rank, dp_net))
        if topo.dp_mode == "internal":
            return Deployment((self.case.id,), tuple(launches), launches[0].name, self.model, self.model, placement)
        # external: the cluster's DP proxy over every rank's API server, where the client connects
        proxy = [*self.cluster.dp_proxy, "--host", head.client_address, "--port", str(self.ports.api)]
        proxy += ["--dp-hosts", *(self.cluster.node(l.node).address for l in launches)]
        proxy += ["--dp-ports", *(str(l.port) for l in launches)]
        launches.append(
            LaunchSpec("proxy", "proxy", head.name, head.host, tuple(proxy), (), self.ports.api, head.set_env)
        )
        return Deployment((self.case.id,), tuple(launches), "proxy", self.model, self.model, placement)

    def dp_node(
        self, mg: Merged, node: Node, devices: tuple[int, ...], index: int, ranks: int, dp_net: list[str]
    ) -> LaunchSpec:
        """Internal DP: node ``index`` runs its local DP ranks in one `vllm serve`."""
        local = self.topo.dp // self.topo.nnodes
        extra = ["--data-parallel-size-local", str(local), *dp_net]
        if index > 0:
            extra += ["--data-parallel-start-rank", str(index * local), "--headless"]
        elif node.bind:
            extra += ["--host", node.bind]
        if index == 0 and self.ports.api != API_PORT:
            extra += ["--port", str(self.ports.api)]
        role = "api" if index == 0 else "headless"
        argv = (*node.vllm, "serve", self.model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs))
        return LaunchSpec(
            f"node{index}-{role}",
            role,
            node.name,
            node.host,
            argv,
            self.node_env(mg, node, devices, ranks, True),
            self.ports.api if index == 0 else None,
            node.set_env,
            self.origins(mg, extra),
            self.env_origins(mg),
        )

    def dp_rank(
        self, mg: Merged, node: Node, devices: tuple[int, ...], rank: int, slot: int, per_rank: int, dp_net: list[str]
    ) -> LaunchSpec:
        """External DP: one engine (and API server) per DP rank, on its slot of the node's devices;
        the DP proxy takes the API port, the ranks the ports after it."""
        port = self.ports.api + 1 + rank
        extra = ["--data-parallel-rank", str(rank), *dp_net]
        if node.bind:
            extra += ["--host", node.bind]
        extra += ["--port", str(port)]
        argv = (*node.vllm, "serve", self.model, *mg.args("head"), *extra, *mg.args("tail"), *json_args(mg.configs))
        mine = devices[slot * per_rank : (slot + 1) * per_rank]
        return LaunchSpec(
            f"dp{rank}",
            "dp-rank",
            node.name,
            node.host,
            argv,
            self.node_env(mg, node, mine, per_rank, True),
            port,
            node.set_env,
            self.origins(mg, extra),
            self.env_origins(mg),
        )


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

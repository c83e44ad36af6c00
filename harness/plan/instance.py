"""What every vLLM instance of one case is launched with: its merged flags, env and JSON configs,
each node's environment, and where each flag and variable came from.

An ``InstancePlanner`` holds one case's facts on one cluster (its topology, model, platform,
ports and placement, if given); the deployment planners (``harness.plan.deployment``, and
``harness.plan.pd`` for a P/D pair) ask it for each launch's parts, so every instance of a case
gets one merge with one precedence.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.cases.case import Case
from harness.cases.merge import Merged, instance_features, matrix_layers, merge, topology_layer
from harness.launch import Placement, PlanError
from harness.matrix.load import Matrix
from harness.matrix.schema import Instance, Topology
from harness.plan import adapters
from harness.plan.cluster import Cluster, Node
from harness.plan.launch import Ports

ModelResolver = Callable[[str], str]
Origins = tuple[tuple[str, tuple[str, ...]], ...]

PLANNER = "planned by ppconf for this node"


def resolve_model_default(ref: str) -> str:
    lora = adapters.split_zoo_ref(ref)
    if lora is not None:
        from harness.target.zoo_lora import adapter_dir

        return str(adapter_dir(*lora))
    if ref.startswith("zoo:"):
        from harness.target.zoo import default_cache_root, model_dir

        return str(model_dir(ref[4:], default_cache_root()))
    return ref


class MergeError(PlanError):
    """The case's layers disagree (harness.cases.merge); every message names its origins."""

    def __init__(self, case_id: str, errors: list[str]):
        self.errors = errors
        super().__init__(f"case {case_id}: " + "; ".join(errors))


def device_value(fmt: str, devices: tuple[int, ...], ranks: int) -> str:
    if fmt == "comma-list":
        return ",".join(str(d) for d in devices)
    # cpu-bind: one core range per local rank, "0|1" or "0-1|2-3"
    per = max(1, len(devices) // max(1, ranks))
    groups = [devices[i * per : (i + 1) * per] for i in range(ranks)]
    return "|".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups)


class InstancePlanner:
    """One case on one cluster: ``topology`` stands in for the case's named one (a reference's
    layout, derived from the case's); ``placement`` None lets the deployment planner place it."""

    def __init__(
        self,
        m: Matrix,
        case: Case,
        cluster: Cluster,
        placement: Placement | None,
        ports: Ports,
        resolve_model: ModelResolver,
        topology: Topology | None = None,
    ):
        self.m = m
        self.case = case
        self.cluster = cluster
        self.placement = placement
        self.ports = ports
        self.resolve_model = resolve_model
        self.topo = topology or m.topologies[case.topology]
        self.variant = m.variant(case.family, case.variant)
        self.platform = m.platforms[case.platform]
        self.model = resolve_model(self.variant.model)
        self.where = str(m.where.get(("topologies", case.topology), ""))

    def merged(self, inst: Topology | Instance, extra_configs: dict | None = None, role: str | None = None) -> Merged:
        """The launch's flags, env and JSON configs on one instance (``role``: a P/D side, or None)."""
        case, topo = self.case, self.topo
        layers = matrix_layers(
            self.m,
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
        mg = merge([*layers, topology_layer(case.topology, head, extra_configs, self.where)])
        if mg.errors:
            raise MergeError(case.id, mg.errors)
        self._drafter(mg)
        adapters.resolve(mg, self.variant, self.resolve_model, f"case {case.id}")
        return mg

    def _drafter(self, mg: Merged) -> None:
        """A speculative config naming a drafter method of the variant gets that drafter's model."""
        case = self.case
        spec = mg.configs.get("speculative-config")
        if spec and spec.get("method") in self.variant.drafters and "model" not in spec:
            mg.configs["speculative-config"] = {
                **spec,
                "model": self.resolve_model(self.variant.drafters[spec["method"]]),
            }
            mg.config_origins["speculative-config"].append(
                f"{self.m.at('families', case.family, 'variants', case.variant, 'drafters', spec['method'])} "
                f"(drafter of {case.family}/{case.variant})"
            )

    def sized_pcp(self) -> int:
        """The PCP size the case (and a run's lease) was sized for: the layers before the rule."""
        case = self.case
        layers = matrix_layers(self.m, case.platform, case.family, case.variant, case.features, case.suite, case.group)
        return merge(layers).pcp

    def node_env(
        self, mg: Merged, node: Node, devices: tuple[int, ...], ranks: int, partition: bool, vllm: bool = True
    ) -> tuple[tuple[str, str], ...]:
        platform = self.platform
        e = dict(mg.vllm_env if vllm else mg.env)
        for var, attr in platform.node_env.items():
            e[var] = getattr(node, attr)
        e[platform.device_env] = device_value(platform.device_format, devices, ranks)
        if self.topo.backend == "ray":
            e.update(platform.ray_env)
        if partition and self.case.partition != "auto":
            e["VLLM_PP_LAYER_PARTITION"] = self.case.partition
        e.update(node.env)
        return tuple(sorted(e.items()))

    def origins(self, mg: Merged, extra: list[str]) -> Origins:
        out = {k: tuple(v) for k, v in mg.flag_origins.items()}
        out.update({f"--{k}": tuple(v) for k, v in mg.config_origins.items()})
        for token in extra:
            if token.startswith("--"):
                out[token] = (*out.get(token, ()), PLANNER)
        return tuple(out.items())

    def env_origins(self, mg: Merged) -> Origins:
        return tuple((k, tuple(v)) for k, v in mg.env_origins.items())

    def own_kv(self, role: str) -> dict:
        """The kv-transfer-config a feature brings for one P/D side (the layerwise / sparse KV
        offload), which then stands in for the topology's connector there; else {}."""
        m, case = self.m, self.case
        return next(
            (
                dict(m.features[f].side(role).configs["kv-transfer-config"])
                for f in instance_features(m, case.features, case.suite, case.group, role)
                if "kv-transfer-config" in m.features[f].side(role).configs
            ),
            {},
        )

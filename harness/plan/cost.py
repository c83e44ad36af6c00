"""What a deployment costs in time before any run has timed it: an estimate from the facts the
matrix and the inventory state.

A launch reads the checkpoint (its size over the read bandwidth of the nodes that read it: each
node of an instance reads the layers of its own stages), initialises the engine (more for every
node that must join the group), captures graphs when graph mode is on, then sends the traffic
its cases are judged on (their phases, from the sizes of their requests). A claimed rejection
stops where it is claimed to: a config-phase refusal before any weight is read, a startup
refusal once the engine is built (one the matrix marks ``before_weights`` when the model is
built, before any weight is read), a first-request refusal after one request. A refusal after
the weights is launched with dummy weights first (``harness.plan.weights``): it reads none.
(Should the claim be wrong, the launch is made again with the real weights: the estimate
assumes the claims hold.)

The figures below are planning figures: they order and size a first schedule; the durations
an earlier run recorded replace them (``schedule.duration_of``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.cases.case import Case
from harness.matrix.load import Matrix
from harness.matrix.schema import CHECKPOINT_DTYPES, Phase, Variant
from harness.plan.cluster import Cluster

# Reading model files when the inventory does not say how fast its nodes do it.
DEFAULT_READ_GB_S = 1.0
# Process start, imports and the engine's configuration: what a config-phase refusal costs.
CONFIG_S = 30.0
# Building the model and the distributed groups, profiling memory and sizing the KV cache (one
# node); every further node joining the group adds its own start.
INIT_S = 90.0
INIT_PER_EXTRA_NODE_S = 30.0
# Building the model's modules (no weights read yet): what a refusal while the model is built
# costs beyond the configuration.
BUILD_S = 30.0
# Capturing the decode graphs (ACL graph / CUDA graph), when graph mode is on.
GRAPH_CAPTURE_S = 120.0
# Traffic: each phase's fixed cost (connections, metrics read before and after), and the time of
# one prompt token and one generated token of a request running alone.
PHASE_S = 5.0
PREFILL_TOKEN_S = 0.0005
DECODE_TOKEN_S = 0.05
# Stopping every process of the deployment and waiting for the devices to be free.
TEARDOWN_S = 10.0
# Reading a checkpoint of unknown size (no declared size, no readable config.json).
UNKNOWN_WEIGHTS_S = 300.0


@dataclass(frozen=True)
class Cost:
    """An estimate's parts, in seconds. ``stops``: where a claimed rejection stops ("" for a
    served deployment)."""

    weights_s: float = 0.0
    init_s: float = 0.0
    graph_s: float = 0.0
    traffic_s: float = 0.0
    teardown_s: float = TEARDOWN_S
    stops: str = ""
    sized: bool = True  # the checkpoint's size was known (declared or read from its config)

    @property
    def total(self) -> float:
        return self.weights_s + self.init_s + self.graph_s + self.traffic_s + self.teardown_s

    def parts(self) -> str:
        weights = f"{self.weights_s:.0f}" if self.sized else f"{self.weights_s:.0f}?"
        text = f"w{weights}+i{self.init_s:.0f}+g{self.graph_s:.0f}+t{self.traffic_s:.0f}"
        return f"{text} (stops at {self.stops})" if self.stops else text

    def to_json(self) -> dict[str, object]:
        return {
            "weights_s": self.weights_s,
            "init_s": self.init_s,
            "graph_s": self.graph_s,
            "traffic_s": self.traffic_s,
            "teardown_s": self.teardown_s,
            "stops": self.stops or None,
            "sized": self.sized,
        }


def shared(costs: Iterable[Cost]) -> Cost:
    """The cost of one launch serving several cases: it starts once (as far as the furthest of
    them goes) and sends the traffic of each."""
    costs = list(costs)
    if not costs:
        return Cost()
    served = [c for c in costs if not c.stops]
    furthest = served[0] if served else max(costs, key=lambda c: c.total)
    return Cost(
        furthest.weights_s,
        furthest.init_s,
        furthest.graph_s,
        sum(c.traffic_s for c in costs),
        furthest.teardown_s,
        "" if served else furthest.stops,
        furthest.sized,
    )


def checkpoint_bytes(variant: Variant) -> float | None:
    """The checkpoint's size: declared in the matrix, else from the parameter count and dtype of
    the tiny model's spec or of a config.json on this host; None when nothing says."""
    if variant.checkpoint is not None:
        return variant.checkpoint.size
    return _config_bytes(variant.model)


def _config_bytes(model: str) -> float | None:
    from harness.target.hf_config import params_in

    if model.startswith("zoo:"):
        from harness.target.zoo import ZooError, spec_of

        try:
            spec = spec_of(model[4:])
        except ZooError:
            return None
        params = params_in(spec.config_json())
        return params * CHECKPOINT_DTYPES.get(spec.dtype, 4.0) if params else None
    path = Path(model).expanduser() / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    params = params_in(config) if isinstance(config, dict) else None
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return params * CHECKPOINT_DTYPES.get(dtype, 2.0) if params else None


def read_gb_s(cluster: Cluster) -> tuple[float, bool]:
    """(GB/s, declared): the slowest node's read bandwidth — a gang waits for its slowest
    loader — or the default when no node declares one."""
    declared = [n.read_gb_s for n in cluster.nodes if n.read_gb_s]
    return (min(declared), True) if declared else (DEFAULT_READ_GB_S, False)


def graph_mode(case: Case) -> bool:
    """Whether the launch captures graphs: vLLM does unless eager mode is asked for, on every
    platform but the CPU."""
    return case.platform != "cpu" and "enforce-eager" not in case.features


# what planning a phase gave (its waves, its longest output, its prompts' token ids), by the phase's
# content and PP size: the cases of a suite share a handful of phases, and planning one builds
# every token id of its prompts
_PLANNED: dict[tuple[str, int], tuple[int, int, int]] = {}
_PLANNED_MAX = 4096


def planned_sizes(phase: Phase, pp: int) -> tuple[int, int, int]:
    """(waves of requests in flight, the longest request's max_tokens, token ids in all its
    prompts) of the phase's plan at ``pp``; a plan is a function of the phase and ``pp`` alone."""
    from harness.cases.workload import plan_phase

    key = (phase.model_dump_json(), pp)
    sizes = _PLANNED.get(key)
    if sizes is None:
        plan = plan_phase(phase, pp)
        requests = [*plan.warmup, *plan.requests, *plan.after]
        waves = math.ceil(len(plan.requests) / max(1, plan.in_flight)) + len(plan.warmup) + len(plan.after)
        longest = max((r.max_tokens for r in requests), default=0)
        sizes = (waves, longest, sum(len(r.prompt) for r in requests))
        if len(_PLANNED) >= _PLANNED_MAX:
            _PLANNED.clear()
        _PLANNED[key] = sizes
    return sizes


def traffic_s(m: Matrix, case: Case) -> float:
    """The traffic a case is judged on: each phase's requests, in waves of those in flight."""
    from harness.cases.workload import kind_of, workload_of

    pp = m.topologies[case.topology].pp
    seconds = 0.0
    for phase in workload_of(m, case):
        seconds += PHASE_S
        if not kind_of(phase).planned:  # the sequential phase: the suite's accuracy prompts, one at a time
            acc = m.suite(case.suite).accuracy
            seconds += (len(acc.prompts) + acc.streamed) * acc.max_tokens * DECODE_TOKEN_S
            continue
        waves, longest, prompt_ids = planned_sizes(phase, pp)
        seconds += waves * longest * DECODE_TOKEN_S + prompt_ids * PREFILL_TOKEN_S
    return seconds


def cost_of(
    m: Matrix,
    case: Case,
    cluster: Cluster,
    served: bool = False,
    nodes: int | None = None,
    dummy_weights: bool = True,
) -> Cost:
    """The estimate's parts for one case's launch on ``cluster``; ``served``: as if it were
    served whatever its claim, on ``nodes`` nodes instead of its topology's (the launch of its
    reference); ``dummy_weights``: a refusal after the weights is launched without them."""
    from harness.plan.weights import without_weights_first

    topo = m.topologies[case.topology]
    variant = m.families[case.family].variants[case.variant]
    size = checkpoint_bytes(variant)
    gb_s, _ = read_gb_s(cluster)
    # every instance reads the whole checkpoint, each of its nodes the layers of its own stages
    readers = min(topo.nnodes, topo.decode.nnodes) if topo.decode is not None else topo.nnodes
    if nodes is None:
        nodes = topo.nnodes + (topo.decode.nnodes if topo.decode is not None else 0)
    else:
        readers = nodes
    weights = size / readers / (gb_s * 1e9) if size is not None else UNKNOWN_WEIGHTS_S
    init = INIT_S + INIT_PER_EXTRA_NODE_S * (nodes - 1)
    graph = GRAPH_CAPTURE_S if graph_mode(case) else 0.0
    sized = size is not None
    exp = case.expectation
    if exp.kind != "rejected" or served:
        return Cost(weights, init, graph, traffic_s(m, case), sized=sized)
    if exp.phase == "config":
        return Cost(0.0, CONFIG_S, stops="config")
    if exp.phase == "startup" and exp.before_weights:
        return Cost(0.0, CONFIG_S + BUILD_S + INIT_PER_EXTRA_NODE_S * (nodes - 1), stops="startup, before the weights")
    if dummy_weights and without_weights_first(exp):
        weights = 0.0
    if exp.phase == "startup":
        return Cost(weights, init, graph, 0.0, stops="startup", sized=sized)
    return Cost(weights, init, graph, PHASE_S + DECODE_TOKEN_S, stops=exp.phase or "first-request", sized=sized)

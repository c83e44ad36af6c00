"""A deployment as Kubernetes runs it: one LeaderWorkerSet (kubernetes-sigs/lws), the way
vllm-ascend's own multi-node nightly runs its cases, and a Service in front of the leader's API.

A LeaderWorkerSet is a group of pods, one per node rank of the plan: the leader (node rank 0,
which serves the API) and ``size - 1`` workers (the headless or Ray-worker nodes), all workers
made from one template. LWS sets in every pod of the group the leader's DNS name
(``LWS_LEADER_ADDRESS``) and the pod's index (``LWS_WORKER_INDEX``, which is the node rank); a
pod's own IP comes from the downward API. So the case is planned on a stand-in cluster whose
node addresses are markers, and each marker is then replaced by what the pod can know: its own
address by its IP, the leader's by its DNS name, another worker's (a P/D pair's decode pod) by
the name vllm-ascend's nightly derives from the leader's: ``NAME-0.NAME.NS`` gives worker ``i``
``NAME-0-i.NAME.NS``, the pod LWS names ``NAME-0-i`` in the subdomain ``NAME``. Values reach
vLLM through Kubernetes' own ``$(VAR)`` expansion of command and env, never through a shell
parsing them (a script that runs several launches only counts and substitutes words).

Secrets are not written into the manifest, masked or not: a secret-looking variable, flag value,
JSON config key or URL password (``harness.redact``'s rule) is read from the Secret
``ppconf-secrets``, each under a key of its own.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from typing import Any

import yaml

from harness import redact
from harness.launch import Deployment, LaunchSpec, PlanError
from harness.matrix.schema import Platform
from harness.outcomes import Kind
from harness.plan.cluster import Cluster, Kubernetes

API_VERSION = "leaderworkerset.x-k8s.io/v1"
LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
WORKER_INDEX = "LWS_WORKER_INDEX"
POD_IP = "PPCONF_POD_IP"
SECRET = "ppconf-secrets"
# the pod labels of vllm-ascend's LWS template, so its Service selector reads the same
ROLE = "role"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
PART_OF = {"app.kubernetes.io/part-of": "ppconf"}
# kubernetes-sigs/lws#410: no worker pod is created for a name above 51 characters. The workers'
# StatefulSet of group 0 is NAME-0, and the StatefulSet controller labels its pods
# controller-revision-hash=NAME-0-HASH, a label value of at most 63 characters, where HASH is a
# 32-bit hash in decimal: up to 10 characters, so NAME may have 50.
MAX_NAME = 50
# A node's address in the stand-in cluster; `.invalid` names never resolve (RFC 2606), so a
# marker that escaped replacement fails loudly instead of reaching a real host.
_MARK = re.compile(r"ppconf-node-(\d+)\.invalid")
_SECRET_TOKEN = re.compile(r"@@ppconf-secret:([A-Za-z_][A-Za-z0-9_]*)@@")

Planner = Callable[[Cluster], Deployment]


class LwsError(PlanError):
    """The deployment cannot be expressed as one LeaderWorkerSet."""


def _mark(rank: int) -> str:
    return f"ppconf-node-{rank}.invalid"


def stand_in(cluster: Cluster, nodes: int) -> Cluster:
    """``nodes`` copies of the cluster's first node, one per node rank, each with a marker for an
    address. In a pod the API listens on every interface (the Service routes to it) and vLLM is
    the image's `vllm`, not a path on the inventory's hosts."""
    first = cluster.nodes[0]
    return cluster.model_copy(
        update={
            "nodes": [
                first.model_copy(
                    update={
                        "name": f"node{r}",
                        "host": f"node{r}",
                        "address": _mark(r),
                        "bind": None,
                        "vllm": ["vllm"],
                        "reach": "local",
                    }
                )
                for r in range(nodes)
            ]
        }
    )


def _literal(text: str) -> str:
    """Text Kubernetes passes on as it is: its expansion turns `$$` into `$`, so every `$` is doubled
    (a `$(NAME)` in a plan is not a reference to the pod's environment)."""
    return text.replace("$", "$$")


def _ref(name: str) -> str:
    return f"$({name})"


def _addresses(text: str, rank: int, peers: set[int]) -> str:
    """Node addresses as a pod knows them: its own IP, the leader's DNS name; another worker's
    marker stays for the container's script to replace (its rank added to ``peers``)."""

    def replace(m: re.Match[str]) -> str:
        other = int(m[1])
        if other == rank:
            return _ref(POD_IP)
        if other == 0:
            return _ref(LEADER_ADDRESS)
        peers.add(other)
        return m[0]

    return _MARK.sub(replace, text)


def _value(text: str, rank: int, peers: set[int]) -> str:
    """A plan's string as the manifest writes it: literal, with node addresses as references."""
    return _addresses(_literal(text), rank, peers)


def _argv(
    words: tuple[str, ...], rank: int, peers: set[int], secrets: redact.Secrets, used: dict[str, str]
) -> list[str]:
    """argv with its secrets (as ``redact.split_argv`` finds them) read from the Secret, each
    through the pod's variable of its key (added to ``used``)."""
    out = []
    for word in redact.split_argv(words, secrets):
        used.update((p.name, p.name) for p in word if isinstance(p, redact.Hidden))
        out.append("".join(_ref(p.name) if isinstance(p, redact.Hidden) else _value(p, rank, peers) for p in word))
    return out


# The Ray nodes `ray status` counts: its "Node status" section lists "COUNT NODE_TYPE" lines
# (Active/Idle/Healthy) before "Pending:"; the resource lines come after it.
_RAY_NODES = "awk '/^Pending:/{p=1} !p && /^ +[0-9]+ /{n+=$1} END{print n+0}'"


def _script(
    argvs: list[list[str]], launches: list[LaunchSpec], set_env: str | None, peers: set[int], once: bool
) -> list[str]:
    """The steps of a container that cannot just exec one argv. The words go as arguments,
    never through the shell's parser; the script only counts them, replaces another worker's
    marker by that worker's DNS name, and (``once``) keeps the pod after its launch exits."""
    steps = [f"sourced() {{ . {shlex.quote(set_env)}; }}; sourced || exit 1"] if set_env else []
    if peers:
        steps.append(f"lws=${LEADER_ADDRESS}")
    for peer in sorted(peers):
        # NAME-0.NAME.NS -> NAME-0-i.NAME.NS, as vllm-ascend's get_cluster_dns_list derives it
        steps.append(f'set -- "${{@//{_mark(peer)}/"${{lws%%.*}}-{peer}.${{lws#*.}}"}}"')
    for argv, launch in zip(argvs[:-1], launches[:-1], strict=True):
        steps.append(f'"${{@:1:{len(argv)}}}" & shift {len(argv)}')
        if launch.role == "ray-head" and launches[-1].role == "api":
            # vLLM places its workers on the Ray nodes it finds when it starts: wait for the group
            ray = shlex.quote(launch.argv[0])
            steps += [
                'echo "ppconf: waiting for $LWS_GROUP_SIZE Ray nodes"',
                f'until [ "$({ray} status 2>/dev/null | {_RAY_NODES})" -ge "$LWS_GROUP_SIZE" ]; do sleep 1; done',
            ]
    if once:
        # a LeaderWorkerSet's pods always restart a container that ends: this one does not end,
        # so the launch runs once; deleting the pod (SIGTERM) stops the launch and the script
        name = shlex.quote(launches[-1].name)
        steps += [
            "trap 'kill -TERM $! 2>/dev/null; exit 143' TERM",
            '"$@" & wait $!',
            f'echo "ppconf: "{name}" exited with status $?; this pod stays for its logs until it is deleted"',
            "sleep infinity & wait $!",
        ]
    else:
        steps.append('exec "$@"')
    return ["/bin/bash", "-c", _literal("; ".join(steps)), "ppconf", *(w for a in argvs for w in a)]


def _container(
    launches: list[LaunchSpec],
    rank: int,
    devices: int,
    platform: Platform,
    image: str,
    secrets: redact.Secrets | None = None,
    settings: Kubernetes | None = None,
    once: bool = False,
) -> dict:
    """The one container of a node rank's pod: its launches, all but the last in the background.
    ``secrets``: the keys of the manifest's Secret so far (one Secret serves every pod);
    ``once``: the launch runs once and the pod stays (an expected rejection)."""
    secrets = secrets or redact.Secrets()
    settings = settings or Kubernetes()
    peers: set[int] = set()
    envs = []
    from_secret: dict[str, str] = {}  # the pod's variable -> the Secret's key
    for launch in launches:
        env = {}
        for k, v in launch.env:
            if platform.k8s_resource and k == platform.device_env:
                continue  # the device plugin hands the pod its devices; inside it they are all its own
            hidden = secrets.env(k, v)
            if hidden:
                from_secret[k] = hidden.name
            else:
                env[k] = _value(v, rank, peers)
        envs.append(env)
    # a value with another worker's address is set by the script, which knows that address
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:]) and not _MARK.search(v)}
    argvs = []
    for launch, env in zip(launches, envs, strict=True):
        own = [f"{k}={v}" for k, v in env.items() if k not in common]
        argv = _argv(launch.argv, rank, peers, secrets, from_secret)
        argvs.append(["env", *own, *argv] if own else argv)
    set_env = launches[0].set_env
    if len(argvs) == 1 and not (set_env or peers or once):
        command = argvs[0]
    else:
        command = _script(argvs, launches, set_env, peers, once)
    env_list: list[dict[str, Any]] = [{"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env_list += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": key}}} for k, key in from_secret.items()
    ]
    env_list += [{"name": k, "value": v} for k, v in common.items()]
    container: dict[str, Any] = {"name": "vllm", "image": image, "command": command, "env": env_list}
    ports = [launch.port for launch in launches if launch.port]
    if ports:
        container["ports"] = [{"containerPort": p} for p in ports]
    resources = _resources(settings, platform, devices)
    if resources:
        container["resources"] = resources
    # vLLM's processes exchange tensors through shared memory; a container's default /dev/shm is 64 MiB
    container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if settings.model_volume:
        container["volumeMounts"].append({"name": "model", "mountPath": settings.model_volume.mount_path})
    return container


def _resources(settings: Kubernetes, platform: Platform, devices: int) -> dict[str, dict[str, str]]:
    """The inventory's requests and limits, and the node rank's devices as the platform's resource."""
    requests, limits = dict(settings.requests), dict(settings.limits)
    if platform.k8s_resource:
        taken = [k for k in (*requests, *limits) if k == platform.k8s_resource]
        if taken:
            raise LwsError(
                f"the inventory's kubernetes requests or limits name {taken[0]}, the platform's device "
                f"resource: the plan requests {devices} per pod itself"
            )
        requests[platform.k8s_resource] = limits[platform.k8s_resource] = str(devices)
    return {k: v for k, v in (("limits", limits), ("requests", requests)) if v}


def _ray_port(launch: LaunchSpec) -> int:
    return int(launch.argv[launch.argv.index("--port") + 1])


def _pod(container: dict, role: str, settings: Kubernetes) -> dict:
    dshm: dict[str, Any] = {"medium": "Memory"}
    if settings.shm_size:
        dshm["sizeLimit"] = settings.shm_size
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": dshm}]
    volume = settings.model_volume
    if volume:
        source = (
            {"persistentVolumeClaim": {"claimName": volume.claim}}
            if volume.claim
            else {"hostPath": {"path": volume.host_path, "type": "Directory"}}
        )
        volumes.append({"name": "model", **source})
    return {
        "metadata": {"labels": {ROLE: role, **PART_OF}},
        "spec": {"containers": [container], "volumes": volumes},
    }


def _one_template(workers: list[dict]) -> dict:
    """The workers' shared template: their containers may differ only where each holds its own node
    rank, which becomes ``$(LWS_WORKER_INDEX)``."""

    def merge(values: list[Any], path: str) -> Any:
        first = values[0]
        if all(v == first for v in values):
            return first
        if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
            return {k: merge([v[k] for v in values], f"{path}.{k}") for k in first}
        if all(isinstance(v, list) for v in values) and all(len(v) == len(first) for v in values):
            return [merge([v[i] for v in values], f"{path}[{i}]") for i in range(len(first))]
        if all(v == str(rank) for rank, v in enumerate(values, 1)):
            return _ref(WORKER_INDEX)
        raise LwsError(
            f"the worker pods differ at {path} beyond their node rank ({', '.join(map(str, values))}); "
            f"a LeaderWorkerSet makes every worker from one template"
        )

    return merge(workers, "container")


def resource_name(case_id: str) -> str:
    """A DNS-1035 label for the case of at most ``MAX_NAME`` characters: readable, and unique by a
    hash of the whole id (the slug loses case and punctuation, and is cut to fit)."""
    digest = hashlib.sha256(case_id.encode()).hexdigest()[:6]
    room = MAX_NAME - len("ppconf--") - len(digest)
    slug = re.sub(r"[^a-z0-9]+", "-", case_id.lower()).strip("-")[:room].strip("-")
    return f"ppconf-{slug}-{digest}" if slug else f"ppconf-{digest}"


def manifests(
    planner: Planner, cluster: Cluster, platform: Platform, image: str, expect: Kind = Kind.SUPPORTED
) -> list[dict]:
    """The LeaderWorkerSet and the leader's API Service of the deployment ``planner`` makes;
    ``expect``: the case's claim (an expected rejection runs once instead of restarting)."""
    first = planner(cluster)
    assert first.placement is not None  # plan() always places a deployment
    nodes = len(first.placement.nodes)
    d = planner(stand_in(cluster, nodes))
    assert d.placement is not None
    by_rank: list[list[LaunchSpec]] = [[] for _ in range(nodes)]
    for launch in d.launches:
        by_rank[int(launch.node.removeprefix("node"))].append(launch)
    api = d.launch(d.api)
    if api.node != "node0" or api.port is None:
        raise LwsError(
            f"{d.api} serves the API from node rank {api.node.removeprefix('node')}; a LeaderWorkerSet's "
            f"leader is node rank 0"
        )
    settings = cluster.kubernetes
    once = expect is Kind.REJECTED
    secrets = redact.Secrets()
    containers = [
        _container(launches, rank, len(d.placement.nodes[rank][1]), platform, image, secrets, settings, once)
        for rank, launches in enumerate(by_rank)
    ]
    name = resource_name(d.case_ids[0])
    # an expected rejection ends once: a pod's restart must not bring the group back to run it again
    group: dict[str, Any] = {"size": nodes, "restartPolicy": "None" if once else "RecreateGroupOnPodRestart"}
    spec: dict[str, Any] = {"replicas": 1, "leaderWorkerTemplate": group}
    head = next((launch for launch in by_rank[0] if launch.role == "ray-head"), None)
    if head and nodes > 1:
        # the workers' `ray start --address` must find the head: they are created once the leader
        # is Ready, which is when the head's GCS port answers
        containers[0]["startupProbe"] = {
            "tcpSocket": {"port": _ray_port(head)},
            "periodSeconds": 5,
            "failureThreshold": 120,
        }
        spec["startupPolicy"] = "LeaderReady"
    if nodes == 1:
        group["workerTemplate"] = _pod(containers[0], "leader", settings)  # a group of one: the leader alone
    else:
        group["leaderTemplate"] = _pod(containers[0], "leader", settings)
        group["workerTemplate"] = _pod(_one_template(containers[1:]), "worker", settings)
    meta: dict[str, Any] = {"name": name, "labels": dict(PART_OF)}
    if settings.namespace:
        meta["namespace"] = settings.namespace
    lws = {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {**meta, "annotations": {"ppconf/case": d.case_ids[0]}},
        "spec": spec,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**meta, "name": f"{name}-api", "labels": dict(PART_OF)},
        "spec": {
            "selector": {LWS_NAME_LABEL: name, ROLE: "leader"},
            "ports": [{"name": "http", "port": api.port, "targetPort": api.port}],
        },
    }
    return [lws, service]


def secrets_needed(docs: list[dict]) -> list[str]:
    keys = []
    for doc in docs:
        group = doc.get("spec", {}).get("leaderWorkerTemplate", {})
        for template in (group.get("leaderTemplate"), group.get("workerTemplate")):
            for c in (template or {}).get("spec", {}).get("containers", []):
                keys += [
                    e["valueFrom"]["secretKeyRef"]["key"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})
                ]
    return list(dict.fromkeys(keys))


def _model_volume(docs: list[dict]) -> dict | None:
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    return next((v for v in group["workerTemplate"]["spec"].get("volumes", []) if v["name"] == "model"), None)


def render(docs: list[dict], model: str) -> str:
    """The manifests as YAML, after a comment that says how to apply them."""
    lws = docs[0]
    group = lws["spec"]["leaderWorkerTemplate"]
    namespace = lws["metadata"].get("namespace")
    head = [
        f"ppconf: {lws['metadata']['annotations']['ppconf/case']} as a LeaderWorkerSet of {group['size']} pod(s), "
        f"one per node (the leader serves the API through the Service {docs[1]['metadata']['name']})",
        "Needs the LeaderWorkerSet controller (https://lws.sigs.k8s.io). Apply: kubectl apply -f THIS_FILE",
    ]
    volume = _model_volume(docs)
    if volume:
        source = (
            volume["persistentVolumeClaim"]["claimName"]
            if "persistentVolumeClaim" in volume
            else volume["hostPath"]["path"]
        )
        mount = group["workerTemplate"]["spec"]["containers"][0]["volumeMounts"][-1]["mountPath"]
        head.append(
            f"The model ({model}) must be at that path in every pod: the volume {source} is mounted at {mount}."
        )
    else:
        head.append(f"The model ({model}) must be at that path in every pod: mount it, or bake it into the image.")
    if group.get("restartPolicy") == "None":
        head.append(
            "An expected rejection: each pod runs its launch once and stays for its logs, which end with the "
            "exit status; kubectl delete -f THIS_FILE ends it."
        )
    keys = secrets_needed(docs)
    if keys:
        head.append(
            f"First: kubectl create secret generic {SECRET} "
            + (f"-n {namespace} " if namespace else "")
            + " ".join(f"--from-literal={k}=..." for k in keys)
        )
    # each line one comment, whatever a value in it holds: a line break would end the comment
    text = "".join("# " + " ".join(line.splitlines()) + "\n" for line in head)
    return text + yaml.safe_dump_all(docs, sort_keys=False, width=2**31 - 1)

"""`ppconf plan --format lws`: a deployment as a LeaderWorkerSet, checked against the LWS CRD's
schema and Kubernetes' own object models, and run (its container command) with stand-in programs."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes.client import ApiClient

from harness.cases.expand import expand, select
from harness.cli import main
from harness.export import lws
from harness.launch import LaunchSpec, PlanError
from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError
from harness.plan.cluster import Kubernetes, load_cluster
from harness.plan.deployment import plan

SCHEMA = json.loads((Path(__file__).parent / "data" / "lws_crd_v1.json").read_text())
GUIDE_MP = "guide-61-layer/tp8-pp2-2node-mp/32,29/none"
RAY = "deepseek-v4/text/tp8-pp2-2node-ray/auto/none"
PD = "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none"


def expand_k8s(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command and env values: `$$` is `$`, `$(NAME)` a defined variable's
    value (left as written when undefined)."""

    def one(m: re.Match) -> str:
        if m[0] == "$$":
            return "$"
        return env.get(m[1], m[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def pod_env(container: dict, lws_env: dict[str, str], ip: str = "10.1.0.7") -> dict[str, str]:
    """The environment of a running container: LWS's variables first (its webhook puts them there),
    then the container's list in order, each value expanded against those before it."""
    env = dict(lws_env)
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = expand_k8s(e["value"], env)
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = {"status.podIP": ip}[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = f"secret:{e['valueFrom']['secretKeyRef']['key']}"
    return env


DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_KEY = re.compile(
    r"(?:([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)"
)


def check_names(docs: list[dict]) -> None:
    """Names and labels as the API server validates them, with the labels LWS's StatefulSets give
    the pods: the workers' StatefulSet NAME-0 labels them controller-revision-hash=NAME-0-HASH (a
    32-bit hash in decimal, up to 10 characters), which must be a label value (lws#410)."""
    group, service = docs
    name = group["metadata"]["name"]
    assert DNS_1035.fullmatch(name) and len(name) <= 51, f"LeaderWorkerSet name {name!r} ({len(name)} characters)"
    assert DNS_1035.fullmatch(service["metadata"]["name"]) and len(service["metadata"]["name"]) <= 63
    templates = group["spec"]["leaderWorkerTemplate"]
    size = templates["size"]
    derived = {
        "leaderworkerset.sigs.k8s.io/name": name,
        "controller-revision-hash": f"{name}-0-{'0' * 10}",  # the workers' StatefulSet NAME-0
        "statefulset.kubernetes.io/pod-name": f"{name}-0-{size - 1}" if size > 1 else f"{name}-0",
    }
    label_sets = [group["metadata"].get("labels", {}), service["metadata"].get("labels", {})]
    label_sets += [service["spec"]["selector"], derived]
    label_sets += [t["metadata"]["labels"] for k, t in templates.items() if k.endswith("Template")]
    for labels in label_sets:
        for key, value in labels.items():
            m = LABEL_KEY.fullmatch(key)
            assert m and len(m[5]) <= 63 and len(m[1] or "") <= 253, f"label key {key!r}"
            assert isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.fullmatch(value), (
                f"label {key}={value!r}"
            )


def check_objects(docs: list[dict]) -> None:
    """The LeaderWorkerSet against the CRD's schema, its pod templates and the Service against the
    kubernetes client's models: required fields present, and nothing the models do not know;
    names and labels within Kubernetes' and LWS's limits."""
    group, service = docs
    assert group["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and group["kind"] == "LeaderWorkerSet"
    jsonschema.validate(group, SCHEMA)
    api = ApiClient()
    templates = group["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in templates:
            obj = api._ApiClient__deserialize(templates[key], "V1PodTemplateSpec")
            assert api.sanitize_for_serialization(obj) == templates[key]  # no field the model dropped
    assert api.sanitize_for_serialization(api._ApiClient__deserialize(service, "V1Service")) == service
    check_names(docs)


def docs_of(text: str) -> list[dict]:
    return list(yaml.safe_load_all(text))


@pytest.fixture(scope="module")
def shipped_m():
    from harness.matrix.load import DEFAULT_MATRICES

    return load_matrix([DEFAULT_MATRICES])


def render(m, suite: str, case_id: str, cluster, image: str = "registry.example/vllm-ascend:test"):
    case = select(expand(m, suite).cases, ids=[case_id])[0]
    docs = lws.manifests(lambda c: plan(m, case, c), cluster, m.platforms[case.platform], image, case.expectation.kind)
    return case, docs


def test_the_guides_two_node_layout_is_a_leader_and_a_worker(shipped_m):
    _, docs = render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster("a3-2node"))
    check_objects(docs)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    # a case that should serve restarts as a group; workers need no Ray head to wait for
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart" and "startupPolicy" not in docs[0]["spec"]
    leader, worker = (group[k]["spec"]["containers"][0] for k in ("leaderTemplate", "workerTemplate"))
    for c in (leader, worker):
        assert c["resources"]["limits"] == {"huawei.com/ascend-1980": "8"} == c["resources"]["requests"]
        names = [e["name"] for e in c["env"]]
        assert "ASCEND_RT_VISIBLE_DEVICES" not in names  # the device plugin chooses the NPUs
        assert names.index("PPCONF_POD_IP") < names.index("HCCL_IF_IP")  # defined before it refers to it
    lws_env = {"LWS_LEADER_ADDRESS": "g-0.g.default", "LWS_GROUP_SIZE": "2"}
    argv = {}
    for role, c in (("leader", leader), ("worker", worker)):
        env = pod_env(c, {**lws_env, "LWS_WORKER_INDEX": "0" if role == "leader" else "1"})
        assert env["HCCL_IF_IP"] == "10.1.0.7" and env["VLLM_PP_LAYER_PARTITION"] == "32,29"
        argv[role] = [expand_k8s(w, env) for w in c["command"]]
    # the node rank 0 binds its own address; the other reaches it by the leader's DNS name
    assert argv["leader"][argv["leader"].index("--master-addr") + 1] == "10.1.0.7"
    assert argv["worker"][argv["worker"].index("--master-addr") + 1] == "g-0.g.default"
    assert "--headless" in argv["worker"] and "--headless" not in argv["leader"]
    assert argv["worker"][argv["worker"].index("--node-rank") + 1] == "1"
    assert [c.get("ports") for c in (leader, worker)] == [[{"containerPort": 8000}], None]
    assert docs[1]["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": docs[0]["metadata"]["name"],
        "role": "leader",
    }


RAY_STATUS = """======== Autoscaler status: 2026-12-01 00:00:00 ========
Node status
---------------------------------------------------------------
Active:
{active}Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/32.0 NPU
"""


def stubs(tmp_path: Path, progs: tuple[str, ...] = ("ray", "vllm", "python3")) -> Path:
    """Stand-in programs that record their argv in $OUT/PROG.json; `ray status` answers with one
    node first and two from its second call on, and a program started after it records how many
    calls it had seen (PROG.status)."""
    root = tmp_path / "stubs"
    root.mkdir()
    for prog in progs:
        (root / prog).write_text(
            f"#!{sys.executable}\nimport json, os, sys\n"
            f'out = os.environ["OUT"]\n'
            f'count = os.path.join(out, "status.count")\n'
            f'if sys.argv[1:2] == ["status"]:\n'
            f"    n = int(open(count).read()) + 1 if os.path.exists(count) else 1\n"
            f'    open(count, "w").write(str(n))\n'
            f"    print({RAY_STATUS!r}.format(active=' 1 node_a\\n' + (' 1 node_b\\n' if n >= 2 else '')))\n"
            f"    sys.exit(0)\n"
            f"if os.path.exists(count):\n"
            f'    open(os.path.join(out, "{prog}.status"), "w").write(open(count).read())\n'
            f'path = os.path.join(out, "{prog}.json")\n'
            f'open(path + ".tmp", "w").write(json.dumps(sys.argv[1:]))\n'
            f"os.replace(path + '.tmp', path)\n"
        )
        (root / prog).chmod(0o755)
    return root


def recorded(out: Path, prog: str) -> list[str]:
    for _ in range(50):  # a background launch may still be writing
        if (out / f"{prog}.json").exists():
            break
        subprocess.run(["sleep", "0.1"])
    return json.loads((out / f"{prog}.json").read_text())


def run_pod(c: dict, lws_env: dict[str, str], stub_dir: Path, out: Path, ip: str = "10.1.0.7") -> None:
    """A pod's container command, expanded as Kubernetes expands it, with the stand-in programs."""
    out.mkdir()
    env = pod_env(c, lws_env, ip)
    command = [expand_k8s(w, env) for w in c["command"]]
    subprocess.run(command, env={**os.environ, **env, "STUBS": str(stub_dir), "OUT": str(out)}, check=True, timeout=30)


def test_the_pods_commands_run_what_the_plan_runs(shipped_m, tmp_path):
    """The Ray layout's leader runs `ray start --head` in the background, waits until `ray status`
    counts the group's LWS_GROUP_SIZE nodes, and then `vllm serve`; the worker `ray start --address
    LEADER:6379`, each after sourcing the node's set_env: run those commands with stand-in `ray`
    and `vllm` that record their argv, and compare with the plan."""
    stub_dir = stubs(tmp_path, ("ray", "vllm"))
    base = load_cluster("a3-2node")
    cluster = with_set_env(tmp_path, base)
    case, docs = render(shipped_m, "nightly-ascend", RAY, cluster)
    check_objects(docs)
    # the workers are created once the leader is Ready: when the Ray head's port answers
    assert docs[0]["spec"]["startupPolicy"] == "LeaderReady"
    real = plan(shipped_m, case, base)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    assert leader["startupProbe"]["tcpSocket"] == {"port": 6379}
    assert "startupProbe" not in group["workerTemplate"]["spec"]["containers"][0]
    for key, rank in (("leaderTemplate", 0), ("workerTemplate", 1)):
        c = group[key]["spec"]["containers"][0]
        out = tmp_path / key
        lws_env = {"LWS_LEADER_ADDRESS": "g-0.g.default", "LWS_WORKER_INDEX": str(rank), "LWS_GROUP_SIZE": "2"}
        run_pod(c, lws_env, stub_dir, out)
        own = real.placement.nodes[rank][0]
        for launch in (l for l in real.launches if l.node == own):
            mine, leader_ip = base.node(own).address, base.node(real.placement.nodes[0][0]).address
            want = [w.replace(mine, "10.1.0.7").replace(leader_ip, "g-0.g.default") for w in launch.argv[1:]]
            assert recorded(out, launch.argv[0]) == want, launch.name
    # vllm serve started only after `ray status` had shown both nodes (its second answer)
    assert (tmp_path / "leaderTemplate" / "vllm.status").read_text() == "2"


def test_secrets_come_from_a_secret_never_from_the_manifest():
    secret_values = ["sk-flag-value-1", "hf-eq-value-2", "tok-json-value-3", "hf_env_value_4"]
    launch = LaunchSpec(
        "node0-api",
        "api",
        "node0",
        "node0",
        (
            "vllm",
            "serve",
            "m",
            "--api-key",
            "sk-flag-value-1",
            "--hf-token=hf-eq-value-2",
            "--max-num-batched-tokens",
            "2048",
            "--kv-transfer-config",
            '{"kv_connector":"X","extra":{"auth_token":"tok-json-value-3"}}',
        ),
        (("HF_TOKEN", "hf_env_value_4"), ("HCCL_IF_IP", lws._mark(0))),
        8000,
    )
    from harness.matrix.schema import Platform

    platform = Platform(title="p", device_env="ASCEND_RT_VISIBLE_DEVICES", device_format="comma-list")
    c = lws._container([launch], 0, 8, platform, "img")
    text = json.dumps(c)
    assert not any(v in text for v in secret_values)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    # the HF_TOKEN variable and the different --hf-token value each have a key of their own
    want = ("HF_TOKEN", "API_KEY", "HF_TOKEN_2", "AUTH_TOKEN")
    assert refs == {k: {"name": "ppconf-secrets", "key": k} for k in want}
    env = pod_env(c, {})
    argv = [expand_k8s(w, env) for w in c["command"]]
    assert argv[3:7] == ["--api-key", "secret:API_KEY", "--hf-token=secret:HF_TOKEN_2", "--max-num-batched-tokens"]
    assert json.loads(argv[-1])["extra"]["auth_token"] == "secret:AUTH_TOKEN"
    assert env["HF_TOKEN"] == "secret:HF_TOKEN" and env["HCCL_IF_IP"] == "10.1.0.7"
    assert "--from-literal=HF_TOKEN=..." in lws.render(
        [
            {
                "apiVersion": "x",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": "n", "annotations": {"ppconf/case": "c"}},
                "spec": {"leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": {"containers": [c]}}}},
            },
            {"metadata": {"name": "n-api"}},
        ],
        "m",
    )


def test_a_dollar_in_a_plan_reaches_the_process_as_written():
    launch = LaunchSpec(
        "node0-api",
        "api",
        "node0",
        "node0",
        ("vllm", "serve", "m", "--x", "$(HOME)$$y"),
        (("A", "$(PPCONF_POD_IP)"),),
        8000,
    )
    from harness.matrix.schema import Platform

    c = lws._container([launch], 0, 1, Platform(title="p", device_env="D", device_format="comma-list"), "img")
    env = pod_env(c, {"HOME": "/root"})
    assert expand_k8s(c["command"][-1], env) == "$(HOME)$$y" and env["A"] == "$(PPCONF_POD_IP)"


def test_one_node_is_a_group_of_one_on_the_cpu_platform(shipped_m):
    _, docs = render(shipped_m, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none", load_cluster(None))
    check_objects(docs)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 1 and "leaderTemplate" not in group
    c = group["workerTemplate"]["spec"]["containers"][0]
    assert "resources" not in c  # the cpu platform declares no device resource
    assert c["command"][:3] == ["vllm", "serve", c["command"][2]] and "--host" not in c["command"]
    assert {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "0|1"} in c["env"]


def test_workers_share_one_template_with_their_index():
    def worker(rank: int, extra: str = "x") -> dict:
        return {"command": ["vllm", "--node-rank", str(rank), "--other", extra]}

    merged = lws._one_template([worker(1), worker(2), worker(3)])
    assert merged["command"] == ["vllm", "--node-rank", "$(LWS_WORKER_INDEX)", "--other", "x"]
    with pytest.raises(lws.LwsError, match=r"container.command\[4\] beyond their node rank \(a, b\)"):
        lws._one_template([worker(1, "a"), worker(2, "b")])


def with_set_env(tmp_path: Path, cluster):
    """The inventory with a set_env that puts the stand-in programs first on PATH."""
    set_env = tmp_path / "set_env.sh"
    set_env.write_text('export PATH="$STUBS:$PATH"\n')
    return cluster.model_copy(update={"nodes": [n.model_copy(update={"set_env": str(set_env)}) for n in cluster.nodes]})


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_pd_pair_is_a_group_whose_instances_find_each_other(shipped_m, tmp_path):
    """The prefill instance and the proxy on the leader, the decode instance on the worker: the
    proxy reaches the decode pod by the DNS name derived from LWS_LEADER_ADDRESS, as vllm-ascend's
    nightly derives it. Run both pods' commands with stand-ins, resolve the addresses the proxy got
    by LWS's own naming (pod NAME-0-i in the subdomain NAME of the namespace), and find each instance
    there on its own port."""
    ns = "vllm-project"
    base = load_cluster("a3-pd")
    cluster = with_set_env(tmp_path, base).model_copy(update={"kubernetes": Kubernetes(namespace=ns)})
    case, docs = render(shipped_m, "nightly-ascend", PD, cluster)
    check_objects(docs)
    name = docs[0]["metadata"]["name"]
    assert [d["metadata"]["namespace"] for d in docs] == [ns, ns]
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    # the pods as LWS creates them: the leader NAME-0 and worker NAME-0-1, in the subdomain NAME
    ips = {f"{name}-0.{name}.{ns}": "10.1.0.7", f"{name}-0-1.{name}.{ns}": "10.1.0.8"}
    lws_env = {"LWS_LEADER_ADDRESS": f"{name}-0.{name}.{ns}", "LWS_GROUP_SIZE": "2"}
    stub_dir = stubs(tmp_path)
    pods = {}
    for key, rank, ip in (("leaderTemplate", 0, "10.1.0.7"), ("workerTemplate", 1, "10.1.0.8")):
        c = group[key]["spec"]["containers"][0]
        run_pod(c, {**lws_env, "LWS_WORKER_INDEX": str(rank)}, stub_dir, tmp_path / key, ip)
        pods[ip] = c
    prefill, proxy = recorded(tmp_path / "leaderTemplate", "vllm"), recorded(tmp_path / "leaderTemplate", "python3")
    decode = recorded(tmp_path / "workerTemplate", "vllm")
    # each address the proxy was given resolves to the pod whose instance listens on the port given
    for side, argv in (("prefiller", prefill), ("decoder", decode)):
        host = flag(proxy, f"--{side}-hosts")
        ip = ips.get(host, host)  # an IP stands for itself
        assert ip in pods, f"{side} host {host} is no pod of the group"
        port = int(flag(proxy, f"--{side}-ports"))
        assert int(flag(argv, "--port")) == port and {"containerPort": port} in pods[ip]["ports"]
    assert flag(proxy, "--decoder-hosts") == f"{name}-0-1.{name}.{ns}"
    assert pods["10.1.0.8"]["ports"] == [{"containerPort": 8200}]
    p_kv, d_kv = (json.loads(flag(a, "--kv-transfer-config")) for a in (prefill, decode))
    assert (p_kv["kv_role"], d_kv["kv_role"]) == ("kv_producer", "kv_consumer")
    assert p_kv["kv_connector_extra_config"] == d_kv["kv_connector_extra_config"]
    real = plan(shipped_m, case, base)
    assert docs[1]["spec"]["ports"][0]["port"] == real.launch("proxy").port == int(flag(proxy, "--port"))
    assert group["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/ascend-1980": str(len(real.placement.nodes[1][1]))
    }


def test_cli_lws_case_and_reference(capsys):
    common = [
        "plan",
        "--suite",
        "nightly-ascend",
        "--case",
        "deepseek-v4/text/tp8-pp2-2node-mp/auto/none",
        "--cluster",
        "a3-2node",
        "--format",
        "lws",
    ]
    assert main(common) == 2
    assert "--format lws needs --image IMAGE" in capsys.readouterr().err
    assert main([*common, "--image", "img"]) == 0
    case_docs = docs_of(capsys.readouterr().out)
    assert main([*common, "--image", "img", "--reference"]) == 0
    ref_docs = docs_of(capsys.readouterr().out)
    for docs in (case_docs, ref_docs):
        check_objects(docs)
    ref_leader = ref_docs[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["command"]
    assert ref_leader[ref_leader.index("--tensor-parallel-size") + 1] == "16"  # TP x PP folded into TP
    assert (
        "--pipeline-parallel-size" not in ref_leader
        or ref_leader[ref_leader.index("--pipeline-parallel-size") + 1] == "1"
    )
    assert ref_docs[0]["metadata"]["name"] != case_docs[0]["metadata"]["name"]


def test_a_platforms_k8s_resource_is_checked_at_load(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        platforms:
          npu2:
            title: x
            device_env: X_DEVICES
            device_format: comma-list
            k8s_resource: "ascend 1980"
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix([matrix_dir.root])
    message = str(err.value.errors[0])
    assert "extra.yaml:6:19: platforms.npu2.k8s_resource" in message and "'ascend 1980'" in message


def test_the_checks_refuse_what_kubernetes_would(shipped_m):
    """check_objects is the oracle of the tests above: it must reject a broken manifest."""
    import copy

    _, docs = render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster("a3-2node"))
    breaks = {
        "no worker template": lambda d: d[0]["spec"]["leaderWorkerTemplate"].pop("workerTemplate"),
        "size as a string": lambda d: d[0]["spec"]["leaderWorkerTemplate"].update(size="2"),
        "unknown restart policy": lambda d: d[0]["spec"]["leaderWorkerTemplate"].update(restartPolicy="Always"),
        "a field LWS does not have": lambda d: d[0]["spec"].update(leaderWorkerTemplates={}),
        "a container without a name": lambda d: d[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"][
            "containers"
        ][0].pop("name"),
        "a misspelt container field": lambda d: d[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
            "containers"
        ][0].update(envFrom_=[]),
        "a Service port without its port": lambda d: d[1]["spec"]["ports"][0].pop("port"),
        # lws#410: the workers' controller-revision-hash label NAME-0-HASH would pass 63 characters
        "a name of 52 characters": lambda d: d[0]["metadata"].update(name="p" * 52),
        "a name of 51 characters": lambda d: d[0]["metadata"].update(name="p" * 51),
        "a name that is no DNS label": lambda d: d[0]["metadata"].update(name="ppconf_case"),
        "a label value of 64 characters": lambda d: d[0]["metadata"]["labels"].update(x="v" * 64),
        "a label value with a slash": lambda d: d[1]["spec"]["selector"].update(role="lead/er"),
        "a label key with a space": lambda d: d[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"][
            "labels"
        ].update({"my role": "x"}),
    }
    check_objects(copy.deepcopy(docs))
    for what, breaking in breaks.items():
        broken = copy.deepcopy(docs)
        breaking(broken)
        with pytest.raises((jsonschema.ValidationError, ValueError, AssertionError)):
            check_objects(broken)
            pytest.fail(f"accepted: {what}")


REJECTED_MP = "deepseek-v4/text/tp8-pp2-2node-mp/auto/pcp"


def test_an_expected_rejection_runs_once_and_stays_for_its_logs(shipped_m, tmp_path):
    """A LeaderWorkerSet's pods restart every container that ends, and RecreateGroupOnPodRestart
    would bring the whole group back: an expected rejection gets restartPolicy None and a command
    that runs the launch once, logs its exit status and waits until the pod is deleted."""
    case, docs = render(shipped_m, "nightly-ascend", REJECTED_MP, with_set_env(tmp_path, load_cluster("a3-pd")))
    assert f"{case.expectation.kind}" == "rejected"
    check_objects(docs)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    assert group["restartPolicy"] == "None"
    assert "runs its launch once" in lws.render(docs, "m")
    stub_dir = tmp_path / "stubs"
    stub_dir.mkdir()
    (stub_dir / "vllm").write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        f'open(os.path.join(os.environ["OUT"], "runs"), "a").write("run\\n")\n'
        f'print("ValueError: pipeline parallelism is not supported with pcp", file=sys.stderr)\n'
        f"sys.exit(3)\n"
    )
    (stub_dir / "vllm").chmod(0o755)
    for key in ("leaderTemplate", "workerTemplate"):
        c = group[key]["spec"]["containers"][0]
        env = pod_env(c, {"LWS_LEADER_ADDRESS": "g-0.g.default", "LWS_WORKER_INDEX": "0", "LWS_GROUP_SIZE": "2"})
        command = [expand_k8s(w, env) for w in c["command"]]
        out = tmp_path / key
        out.mkdir()
        proc = subprocess.Popen(
            command,
            env={**os.environ, **env, "STUBS": str(stub_dir), "OUT": str(out)},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            line = proc.stdout.readline()
            assert "exited with status 3; this pod stays for its logs" in line, line
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)  # the container does not end, so it is not restarted
            assert (out / "runs").read_text() == "run\n"
            proc.send_signal(signal.SIGTERM)  # what deleting the pod does
            assert proc.wait(timeout=5) == 143
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.parametrize(
    "suite",
    ["nightly-ascend", pytest.param("release-ascend", marks=pytest.mark.slow)],  # 707 cases: seconds
)
@pytest.mark.parametrize("inventory", ["a3-pd", "a3-2node", "a3-16npu"])
def test_every_manifest_of_the_ascend_suites_has_names_kubernetes_accepts(shipped_m, suite, inventory):
    """Every case that fits a shipped inventory renders (P/D pairs included), with names and
    labels within the limits; a3-pd holds the suites as a whole, so there every case renders."""
    cluster = load_cluster(inventory)
    cases = expand(shipped_m, suite).cases
    rendered = set()
    for case in cases:
        planner = lambda c, case=case: plan(shipped_m, case, c)  # noqa: E731
        try:
            docs = lws.manifests(planner, cluster, shipped_m.platforms[case.platform], "img", case.expectation.kind)
        except lws.LwsError:
            raise
        except PlanError:
            continue  # the case does not fit this inventory (the plan's own refusal)
        check_names(docs)
        assert len(docs[0]["metadata"]["name"]) <= 51
        rendered.add(docs[0]["metadata"]["name"])
    assert len(rendered) == len(cases) if inventory == "a3-pd" else len(rendered) > len(cases) / 2
    assert any(shipped_m.topologies[c.topology].decode for c in cases)


def test_a_long_case_id_has_a_short_name_with_a_stable_hash():
    long_id = (
        "deepseek-v4.1/multimodal/tp8-pp2-2node-ray/auto/dcp+eagle3+graph-mode+prefix-caching+sequence-parallelism"
    )
    name = lws.resource_name(long_id)
    assert len(name) == lws.MAX_NAME <= 51 and name.startswith("ppconf-deepseek-v4-1-multimodal-tp8-pp2")
    assert lws.resource_name(long_id) == name  # the same case, the same name, in every run
    # ids that differ only past the cut, or only in what the slug drops, still differ
    assert lws.resource_name(long_id[:-1] + "x") != name
    assert lws.resource_name("a/b") != lws.resource_name("a-b")
    assert lws.resource_name("A/B").startswith("ppconf-a-b-")


KUBERNETES = """\
kubernetes:
  namespace: vllm-project
  model_volume: {claim: nv-action-vllm-benchmarks-v2, mount_path: /root/.cache}
  shm_size: 512Gi
  requests: {cpu: 125, ephemeral-storage: 100Gi}
  limits: {memory: 512Gi}
"""


def inventory(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "k8s.yaml"
    path.write_text((Path(__file__).parents[1] / "clusters" / "a3-2node.yaml").read_text() + extra)
    return path


def test_the_inventorys_kubernetes_settings_reach_every_pod(shipped_m, tmp_path):
    """vllm-ascend's nightly template as settings: its namespace, the model's volume, a sized
    /dev/shm and the pods' requests and limits besides the devices."""
    _, docs = render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster(inventory(tmp_path, KUBERNETES)))
    check_objects(docs)
    assert [d["metadata"]["namespace"] for d in docs] == ["vllm-project"] * 2
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        pod = group[key]["spec"]
        assert pod["volumes"] == [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Gi"}},
            {"name": "model", "persistentVolumeClaim": {"claimName": "nv-action-vllm-benchmarks-v2"}},
        ]
        c = pod["containers"][0]
        assert {"name": "model", "mountPath": "/root/.cache"} in c["volumeMounts"]
        assert c["resources"] == {
            "limits": {"memory": "512Gi", "huawei.com/ascend-1980": "8"},
            "requests": {"cpu": "125", "ephemeral-storage": "100Gi", "huawei.com/ascend-1980": "8"},
        }
    header = lws.render(docs, "/root/.cache/models/m")
    assert "the volume nv-action-vllm-benchmarks-v2 is mounted at /root/.cache" in header
    host = KUBERNETES.replace("{claim: nv-action-vllm-benchmarks-v2,", "{host_path: /mnt/share,")
    _, docs = render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster(inventory(tmp_path, host)))
    check_objects(docs)
    volumes = docs[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    assert volumes[1] == {"name": "model", "hostPath": {"path": "/mnt/share", "type": "Directory"}}


@pytest.mark.parametrize(
    ("old", "new", "where", "says"),
    [
        (
            "  namespace: vllm-project",
            "  namespce: vllm-project",
            "2:3",
            "unknown key 'namespce' (did you mean 'namespace'?)",
        ),
        ("  namespace: vllm-project", "  namespace: vllm_project", "2:14", "'vllm_project'"),
        ("shm_size: 512Gi", "shm_size: 512 GB", "4:13", "'512 GB'"),
        ("{cpu: 125,", "{cpu: 12x,", "5:19", "'12x'"),
        ("claim: nv-action-vllm-benchmarks-v2,", "claim: pvc, host_path: /mnt,", "3:17", "give one of claim"),
        ("mount_path: /root/.cache", "mount_path: root/.cache", "3:67", "'root/.cache'"),
    ],
)
def test_kubernetes_settings_are_checked_at_load_with_their_position(tmp_path, old, new, where, says):
    """``where``: line:column within the kubernetes section, which follows the inventory's lines."""
    path = inventory(tmp_path, KUBERNETES.replace(old, new))
    before = len((Path(__file__).parents[1] / "clusters" / "a3-2node.yaml").read_text().splitlines())
    line, column = map(int, where.split(":"))
    with pytest.raises(MatrixError) as err:
        load_cluster(path)
    message = str(err.value.errors[0])
    assert f"{path}:{before + line}:{column}:" in message and says in message, message


def test_the_device_resource_is_the_plans_not_the_inventorys(shipped_m, tmp_path):
    extra = "kubernetes:\n  requests: {huawei.com/ascend-1980: 16}\n"
    with pytest.raises(lws.LwsError, match="name huawei.com/ascend-1980, the platform's device resource"):
        render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster(inventory(tmp_path, extra)))


def test_cli_lws_runs_an_expected_rejection_once(capsys):
    args = ["plan", "--suite", "nightly-ascend", "--case", REJECTED_MP, "--cluster", "a3-pd", "--format", "lws"]
    assert main([*args, "--image", "img"]) == 0
    docs = docs_of(capsys.readouterr().out)
    check_objects(docs)
    assert docs[0]["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "None"

"""`ppconf plan --format lws`: a deployment as a LeaderWorkerSet, checked against the LWS CRD's
schema and Kubernetes' own object models, and run (its container command) with stand-in programs."""

import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes.client import ApiClient

from harness.cases.expand import expand, select
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError
from harness.plan import lws
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.launch import LaunchSpec

SCHEMA = json.loads((Path(__file__).parent / "data" / "lws_crd_v1.json").read_text())
GUIDE_MP = "guide-61-layer/tp8-pp2-2node-mp/32,29/none"
RAY = "deepseek-v4/text/tp8-pp2-2node-ray/auto/none"


def expand_k8s(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command and env values: `$$` is `$`, `$(NAME)` a defined variable's
    value (left as written when undefined)."""

    def one(m: re.Match) -> str:
        if m[0] == "$$":
            return "$"
        return env.get(m[1], m[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def pod_env(container: dict, lws_env: dict[str, str]) -> dict[str, str]:
    """The environment of a running container: LWS's variables first (its webhook puts them there),
    then the container's list in order, each value expanded against those before it."""
    env = dict(lws_env)
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = expand_k8s(e["value"], env)
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = {"status.podIP": "10.1.0.7"}[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = f"secret:{e['valueFrom']['secretKeyRef']['key']}"
    return env


def check_objects(docs: list[dict]) -> None:
    """The LeaderWorkerSet against the CRD's schema, its pod templates and the Service against the
    kubernetes client's models: required fields present, and nothing the models do not know."""
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


def docs_of(text: str) -> list[dict]:
    return list(yaml.safe_load_all(text))


@pytest.fixture(scope="module")
def shipped_m():
    from harness.matrix.load import DEFAULT_MATRICES

    return load_matrix([DEFAULT_MATRICES])


def render(m, suite: str, case_id: str, cluster, image: str = "registry.example/vllm-ascend:test"):
    case = select(expand(m, suite).cases, ids=[case_id])[0]
    docs = lws.manifests(lambda c: plan(m, case, c), cluster, m.platforms[case.platform], image)
    return case, docs


def test_the_guides_two_node_layout_is_a_leader_and_a_worker(shipped_m):
    _, docs = render(shipped_m, "nightly-ascend", GUIDE_MP, load_cluster("a3-2node"))
    check_objects(docs)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
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


def test_the_pods_commands_run_what_the_plan_runs(shipped_m, tmp_path):
    """The Ray layout's leader runs `ray start --head` in the background and then `vllm serve`, the
    worker `ray start --address LEADER:6379`, each after sourcing the node's set_env: run those
    commands with stand-in `ray` and `vllm` that record their argv, and compare with the plan."""
    set_env = tmp_path / "set_env.sh"
    set_env.write_text('export PATH="$STUBS:$PATH"\n')
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for prog in ("ray", "vllm"):
        (stubs / prog).write_text(
            f"#!/usr/bin/env python3\nimport json, os, sys\n"
            f'out = os.path.join(os.environ["OUT"], "{prog}.json")\n'
            f'open(out + ".tmp", "w").write(json.dumps(sys.argv[1:]))\n'
            f'os.replace(out + ".tmp", out)\n'
        )
        (stubs / prog).chmod(0o755)
    base = load_cluster("a3-2node")
    cluster = base.model_copy(update={"nodes": [n.model_copy(update={"set_env": str(set_env)}) for n in base.nodes]})
    case, docs = render(shipped_m, "nightly-ascend", RAY, cluster)
    check_objects(docs)
    real = plan(shipped_m, case, base)
    group = docs[0]["spec"]["leaderWorkerTemplate"]
    for key, rank in (("leaderTemplate", 0), ("workerTemplate", 1)):
        c = group[key]["spec"]["containers"][0]
        out = tmp_path / key
        out.mkdir()
        env = pod_env(c, {"LWS_LEADER_ADDRESS": "g-0.g.default", "LWS_WORKER_INDEX": str(rank)})
        command = [expand_k8s(w, env) for w in c["command"]]
        subprocess.run(command, env={**os.environ, **env, "STUBS": str(stubs), "OUT": str(out)}, check=True, timeout=30)
        own = real.placement.nodes[rank][0]
        for launch in (l for l in real.launches if l.node == own):
            prog = launch.argv[0]
            for _ in range(50):  # a background launch may still be writing
                if (out / f"{prog}.json").exists():
                    break
                subprocess.run(["sleep", "0.1"])
            got = json.loads((out / f"{prog}.json").read_text())
            mine, leader = base.node(own).address, base.node(real.placement.nodes[0][0]).address
            want = [w.replace(mine, "10.1.0.7").replace(leader, "g-0.g.default") for w in launch.argv[1:]]
            assert got == want, launch.name


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


def test_a_pd_pair_is_refused_with_the_reason(shipped_m):
    with pytest.raises(lws.LwsError, match="proxy on node rank 0 needs the address of node rank 1"):
        render(shipped_m, "nightly-ascend", "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none", load_cluster("a3-pd"))


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
    }
    check_objects(copy.deepcopy(docs))
    for what, breaking in breaks.items():
        broken = copy.deepcopy(docs)
        breaking(broken)
        with pytest.raises((jsonschema.ValidationError, ValueError, AssertionError)):
            check_objects(broken)
            pytest.fail(f"accepted: {what}")

import json

import pytest

from harness.cases.expand import expand, select
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.launch import Ports, group_deployments


def case(m, suite, cid):
    return select(expand(m, suite).cases, ids=[cid])[0]


def guide_words(text):
    return text.replace("\\\n", " ").split()


GUIDE_MP_HEAD = """vllm serve /path/to/model \\
    --distributed-executor-backend mp \\
    --tensor-parallel-size 8 \\
    --pipeline-parallel-size 2 \\
    --nnodes 2 \\
    --node-rank 0 \\
    --master-addr <HEAD_NODE_IP> \\
    --master-port <MASTER_PORT> \\
    --trust-remote-code"""

GUIDE_MP_WORKER = """vllm serve /path/to/model \\
    --distributed-executor-backend mp \\
    --tensor-parallel-size 8 \\
    --pipeline-parallel-size 2 \\
    --nnodes 2 \\
    --node-rank 1 \\
    --master-addr <HEAD_NODE_IP> \\
    --master-port <MASTER_PORT> \\
    --headless \\
    --trust-remote-code"""


def test_two_node_mp_is_the_guides_example(shipped):
    cluster = load_cluster("a3-2node")
    d = plan(shipped, case(shipped, "nightly-ascend", "guide-61-layer/tp8-pp2-2node-mp/auto/none"), cluster)
    head, worker = d.launches
    subst = {"<HEAD_NODE_IP>": cluster.nodes[0].address, "<MASTER_PORT>": "29501"}
    for launch, text in ((head, GUIDE_MP_HEAD), (worker, GUIDE_MP_WORKER)):
        words = [subst.get(w, w) for w in guide_words(text)]
        assert list(launch.argv) == words
    assert (head.role, worker.role) == ("api", "headless")
    for launch, node in zip(d.launches, cluster.nodes, strict=True):
        env = launch.env_dict()
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert env["HCCL_IF_IP"] == node.address
        assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == env["HCCL_SOCKET_IFNAME"] == node.nic
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
        assert "VLLM_PP_LAYER_PARTITION" not in env
        assert launch.set_env == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
    shell = head.shell()
    assert shell.startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh\n")
    assert "    --master-port 29501 \\\n" in shell


def test_custom_partition_exported_on_every_node(shipped):
    d = plan(
        shipped, case(shipped, "nightly-ascend", "guide-61-layer/tp8-pp2-2node-mp/32,29/none"), load_cluster("a3-2node")
    )
    assert [l.env_dict()["VLLM_PP_LAYER_PARTITION"] for l in d.launches] == ["32,29", "32,29"]


def test_pd_is_the_guides_example(shipped):
    d = plan(
        shipped, case(shipped, "nightly-ascend", "guide-61-layer/pd-p-tp8pp2-d-tp1/32,29/none"), load_cluster("a3-pd")
    )
    prefill, decode, proxy = d.launches
    assert (prefill.role, decode.role, proxy.role) == ("prefill", "decode", "proxy")
    expected_topology = {
        "prefill": {"dp_size": 1, "tp_size": 8, "pp_size": 2, "pp_layer_partition": "32,29"},
        "decode": {"dp_size": 1, "tp_size": 1, "pp_size": 1},
    }
    configs = []
    for launch in (prefill, decode):
        argv = list(launch.argv)
        cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert cfg["kv_connector_extra_config"] == expected_topology  # mirrored on both sides
        configs.append(cfg)
    assert [c["kv_role"] for c in configs] == ["kv_producer", "kv_consumer"]
    assert configs[0]["engine_id"] != configs[1]["engine_id"]
    assert configs[0]["kv_port"] != configs[1]["kv_port"]
    assert prefill.env_dict()["VLLM_PP_LAYER_PARTITION"] == "32,29"
    assert "VLLM_PP_LAYER_PARTITION" not in decode.env_dict()
    assert prefill.argv[prefill.argv.index("--pipeline-parallel-size") + 1] == "2"
    assert decode.argv[decode.argv.index("--pipeline-parallel-size") + 1] == "1"
    assert d.api == "proxy"


def test_pd_auto_partition_omits_pp_layer_partition(shipped):
    d = plan(
        shipped, case(shipped, "nightly-ascend", "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none"), load_cluster("a3-pd")
    )
    for launch in d.launches[:2]:
        argv = list(launch.argv)
        cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert "pp_layer_partition" not in cfg["kv_connector_extra_config"]["prefill"]


def test_ray_multi_node_starts_ray_with_env_then_serves_on_the_head(shipped):
    c = next(c for c in expand(shipped, "nightly-ascend").cases if c.topology == "tp8-pp2-2node-ray")
    d = plan(shipped, c, load_cluster("a3-2node"))
    roles = [l.role for l in d.launches]
    assert roles == ["ray-head", "ray-worker", "api"]
    head, worker, api = d.launches
    assert head.argv[:3] == ("ray", "start", "--block") and "--head" in head.argv
    assert f"{load_cluster('a3-2node').nodes[0].address}:6379" in worker.argv
    for l in d.launches:
        assert l.env_dict()["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert api.argv[api.argv.index("--distributed-executor-backend") + 1] == "ray"
    assert "--nnodes" not in api.argv


def test_cpu_two_node_on_one_host_binds_disjoint_cores(shipped):
    d = plan(
        shipped,
        case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-2node-mp/auto/none"),
        load_cluster(None),
        ports=Ports(api=18000, master=18001),
    )
    head, worker = d.launches
    assert head.env_dict()["VLLM_CPU_OMP_THREADS_BIND"] != worker.env_dict()["VLLM_CPU_OMP_THREADS_BIND"]
    assert head.env_dict()["VLLM_HOST_IP"] == "127.0.0.1"
    assert head.argv[head.argv.index("--port") + 1] == "18000"
    assert worker.argv[worker.argv.index("--master-port") + 1] == "18001"
    assert "--headless" in worker.argv and "--port" not in worker.argv


def test_cpu_single_node_binds_one_core_per_rank(shipped):
    d = plan(shipped, case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none"), load_cluster(None))
    (api,) = d.launches
    env = api.env_dict()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert env["VLLM_PP_LAYER_PARTITION"] == "1,4"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_feature_json_fragments_and_drafter(matrix_dir):
    from harness.matrix.load import load_matrix

    matrix_dir(
        "ascend/extra.yaml",
        """\
        suites:
          stack:
            title: x
            platform: ascend
            groups:
              - families: [deepseek-v4]
                topologies: [tp8-pp2-2node-mp]
                features: [mtp+graph-mode]
        """,
    )
    m = load_matrix(matrix_dir.root)
    c = case(m, "stack", "deepseek-v4/text/tp8-pp2-2node-mp/auto/graph-mode+mtp")
    d = plan(m, c, load_cluster("a3-2node"))
    argv = list(d.launches[-1].argv)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 1, "model": "/models/DeepSeek-V4"}
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_identical_launches_share_a_deployment(shipped):
    c = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    other = c.__class__(**{**c.__dict__, "id": "x/other"})
    ds = group_deployments([plan(shipped, c, load_cluster(None)), plan(shipped, other, load_cluster(None))])
    assert len(ds) == 1 and ds[0].case_ids == (c.id, "x/other")


def test_cluster_too_small_is_a_clear_error(shipped):
    from harness.launch import PlanError

    with pytest.raises(PlanError, match="cannot hold"):
        plan(
            shipped,
            case(shipped, "nightly-ascend", "guide-61-layer/pd-p-tp8pp2-d-tp1/32,29/none"),
            load_cluster("a3-2node"),
        )

"""P/D on the CPU target: ppconf's proxy (a real process against stand-in instances), readiness
of a pair (each instance on its own, then the proxy's own path), the KV-transfer check, the plan."""

import json
import sys
from pathlib import Path

import httpx
import pytest

from harness.cases.expand import expand, select
from harness.check.features.kv_transfer import kv_transfer_check, prompt_sources
from harness.check.serving.live import LiveDeployment, free_port
from harness.launch import Deployment, LaunchSpec, Placement, PlanError
from harness.matrix.load import load_matrix
from harness.plan.cluster import Cluster, Node, load_cluster, local_cluster
from harness.plan.deployment import plan
from harness.plan.pd import KV_TRANSFER_CHECK
from harness.plan.resolved import resolve_case
from harness.registry import LIVE_CHECKS
from harness.target.pd_proxy import REMOTE_DECODE, decode_body, prefill_body

STUB = str(Path(__file__).with_name("pd_instance_stub.py"))
PD_CASE = "qwen3-tiny/pd-p-pp1-d-pp1/auto/none"


def test_prefill_leg_asks_one_token_unstreamed_and_the_kv_kept_for_a_remote_decode():
    body = {"model": "m", "prompt": [1, 2], "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}}
    first = prefill_body(body)
    assert first["max_tokens"] == 1 and first["stream"] is False and "stream_options" not in first
    assert first["kv_transfer_params"] == REMOTE_DECODE and first["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 12 and "kv_transfer_params" not in body  # the client's request is untouched
    assert prefill_body({"messages": [], "max_completion_tokens": 9})["max_completion_tokens"] == 1


def test_decode_leg_is_the_clients_request_with_the_prefill_sides_params():
    body = {"prompt": "p", "max_tokens": 12, "stream": True}
    assert decode_body(body, {"kv_transfer_params": {"remote_block_ids": [3]}}) == {
        **body,
        "kv_transfer_params": {"remote_block_ids": [3]},
    }
    assert decode_body(body, {"kv_transfer_params": None}) == body  # a shared-store connector has none


def _pair(decode_health: int = 200) -> Deployment:
    """Two stand-in instances and ppconf's proxy on fresh ports, as a P/D plan names them."""
    p, d, api = free_port(), free_port(), free_port()
    proxy = (
        sys.executable,
        "-m",
        "harness.target.pd_proxy",
        "--host",
        "127.0.0.1",
        "--port",
        str(api),
        "--prefiller-hosts",
        "127.0.0.1",
        "--prefiller-ports",
        str(p),
        "--decoder-hosts",
        "127.0.0.1",
        "--decoder-ports",
        str(d),
    )
    return Deployment(
        ("c",),
        (
            LaunchSpec("prefill", "prefill", "local", "localhost", (sys.executable, STUB, str(p)), (), p),
            LaunchSpec(
                "decode", "decode", "local", "localhost", (sys.executable, STUB, str(d), str(decode_health)), (), d
            ),
            LaunchSpec("proxy", "proxy", "local", "localhost", proxy, (), api),
        ),
        "proxy",
    )


@pytest.fixture
def cluster() -> Cluster:
    return local_cluster()


def test_a_pair_is_ready_through_the_proxys_own_path_and_the_proxy_hands_off(tmp_path, cluster):
    live = LiveDeployment(_pair(), tmp_path, {}, 10, cluster)
    live.start()
    try:
        state, _ = live.wait_ready(deadline_s=30)
        assert state == "ready", (tmp_path / "proxy.log").read_text() if (tmp_path / "proxy.log").exists() else ""
        assert live.ready_path == "/healthcheck" and set(live.instances) == {"prefill", "decode"}
        assert live.stage_client is live.instances["prefill"] and live.metrics_client is live.instances["decode"]
        assert live.model_name == f"stub-{live.deployment.launch('decode').port}"
        http = httpx.Client(trust_env=False, timeout=10)
        # vLLM's /health is not the proxy's: it answers its own path only
        assert http.get(f"{live.client.base}/health").status_code == 404
        r = http.post(f"{live.client.base}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 7})
        forwarded = json.loads(r.json()["choices"][0]["text"])
        assert forwarded["max_tokens"] == 7
        prefill_port = live.deployment.launch("prefill").port
        assert forwarded["kv_transfer_params"]["remote_port"] == prefill_port  # the prefill side's answer went on
        assert forwarded["kv_transfer_params"]["seen"]["max_tokens"] == 1
        with http.stream(
            "POST", f"{live.client.base}/v1/completions", json={"model": "m", "prompt": "hi", "stream": True}
        ) as s:
            events = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and json.loads(events[0][6:])["got"]["kv_transfer_params"]
        # the tokenizer's endpoint goes to a decode instance as it is
        decode_port = live.deployment.launch("decode").port
        assert http.post(f"{live.client.base}/tokenize", json={"prompt": "hi"}).json()["tokens"] == [decode_port]
        # a refused request's body is read all the same: the next one on the connection is whole
        assert http.post(f"{live.client.base}/v1/embeddings", json={"input": "x" * 50}).status_code == 404
        again = http.post(f"{live.client.base}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 3})
        assert again.status_code == 200, again.text
        http.close()
    finally:
        live.stop()


def test_a_pair_whose_decode_instance_is_unhealthy_is_not_ready_though_the_proxy_answers(tmp_path, cluster):
    live = LiveDeployment(_pair(decode_health=503), tmp_path, {}, 10, cluster)
    live.start()
    try:
        state, _ = live.wait_ready(deadline_s=5)
        assert state == "timeout"
        assert httpx.get(f"{live.client.base}/healthcheck", trust_env=False).status_code == 200
    finally:
        live.stop()


class _Instance:
    def __init__(self, sources: list[dict[str, float]]):
        self.answers = iter(sources)

    def metrics(self) -> str:
        s = next(self.answers)
        return "\n".join(
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="{k}"}} {v}' for k, v in s.items()
        )


class _Client:
    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    def complete(self, model: str, prompt: list[int], max_tokens: int) -> None:
        self.prompts.append(prompt)


class _Live:
    def __init__(self, decode_after: dict[str, float]):
        zero = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
        self.sides = {
            "decode": [_Instance([zero, decode_after])],
            "prefill": [_Instance([zero, {**zero, "local_compute": 200.0}])],
        }
        self.client = _Client()
        self.model_name = "m"


def test_kv_transfer_passes_only_when_the_decode_side_received_a_block():
    moved = _Live({"local_compute": 72.0, "local_cache_hit": 0.0, "external_kv_transfer": 128.0})
    got = kv_transfer_check(moved)  # type: ignore[arg-type]
    assert got["ok"] and "128 prompt tokens received over the KV connector, 72 computed" in got["detail"]
    assert len(moved.client.prompts[0]) > 128  # longer than one KV block, or nothing can move
    recomputed = kv_transfer_check(_Live({"local_compute": 200.0, "external_kv_transfer": 0.0}))  # type: ignore[arg-type]
    assert (
        not recomputed["ok"] and "0 prompt tokens received over the KV connector, 200 computed" in recomputed["detail"]
    )
    assert LIVE_CHECKS[KV_TRANSFER_CHECK] is kv_transfer_check


def test_prompt_sources_sum_engines_and_ignore_other_metrics():
    text = "\n".join(
        [
            'vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} 128.0',
            'vllm:prompt_tokens_by_source_total{engine="1",source="external_kv_transfer"} 256.0',
            'vllm:prompt_tokens_cached_by_source_total{engine="0",source="p2p"} 999.0',
            "vllm:prompt_tokens_total 7.0",
        ]
    )

    class C:
        def metrics(self) -> str:
            return text

    assert prompt_sources(C())["external_kv_transfer"] == 384.0  # type: ignore[arg-type]


def _pd_case():
    m = load_matrix()
    (case,) = select(expand(m, "features-cpu").cases, [PD_CASE])
    return m, case


def test_the_cpu_pair_plans_the_shared_store_connector_and_a_proxy_bound_where_the_client_connects():
    m, case = _pd_case()
    cluster = local_cluster()
    d = plan(m, case, cluster)
    kv = {s.role: json.loads(s.argv[s.argv.index("--kv-transfer-config") + 1]) for s in d.launches[:2]}
    assert kv["prefill"]["kv_connector"] == kv["decode"]["kv_connector"] == "ExampleConnector"
    assert (kv["prefill"]["kv_role"], kv["decode"]["kv_role"]) == ("kv_producer", "kv_consumer")
    store = kv["prefill"]["kv_connector_extra_config"]["shared_storage_path"]
    assert store == kv["decode"]["kv_connector_extra_config"]["shared_storage_path"]
    proxy = d.launch(d.api)
    assert proxy.argv[:3] == (sys.executable, "-m", "harness.target.pd_proxy")
    assert proxy.argv[proxy.argv.index("--host") + 1] == cluster.nodes[0].client_address == "127.0.0.1"
    assert KV_TRANSFER_CHECK in resolve_case(m, case).checks


def test_the_ascend_proxy_is_bound_to_the_node_address_the_client_uses():
    m = load_matrix()
    cluster = load_cluster("a3-pd")
    (case,) = [c for c in expand(m, "nightly-ascend").cases if m.topologies[c.topology].decode is not None][:1]
    d = plan(m, case, cluster)
    proxy = d.launch(d.api)
    assert proxy.argv[: len(cluster.pd_proxy)] == tuple(cluster.pd_proxy)  # vllm-ascend's proxy, as the inventory says
    assert proxy.argv[proxy.argv.index("--host") + 1] == cluster.nodes[0].address


def test_a_shared_store_cannot_span_two_nodes():
    m, case = _pd_case()
    node = local_cluster().nodes[0]
    two = Cluster(
        name="two",
        platform="cpu",
        nodes=[node, Node(**{**node.model_dump(), "name": "other", "host": "h2", "address": "10.0.0.2"})],
    )
    with pytest.raises(PlanError, match="ExampleConnector shares its KV store through one host's files"):
        plan(m, case, two, placement=Placement((("local", (0,)), ("other", (1,)))))


def test_the_pp2_prefill_pair_plans_three_one_core_ranks_two_sharing_a_core():
    m = load_matrix()
    (case,) = select(expand(m, "pd-cpu").cases, ["qwen3-tiny/pd-p-pp2-d-pp1/auto/none"])
    d = plan(m, case, load_cluster(str(Path(__file__).parents[1] / "clusters" / "cpu-pd-shared-core.yaml")))
    bind = {s.role: s.env_dict().get("VLLM_CPU_OMP_THREADS_BIND") for s in d.launches}
    assert bind == {"prefill": "0|1", "decode": "1", "proxy": None}
    prefill = d.launch("prefill").argv
    assert prefill[prefill.index("--pipeline-parallel-size") + 1] == "2"


def test_the_shared_store_of_a_pair_is_named_for_its_clean_up():
    from harness.plan.pd import shared_stores

    m, case = _pd_case()
    d = plan(m, case, local_cluster())
    (store,) = shared_stores(d).values()
    assert (
        store.startswith("/tmp/ppconf-kv-")
        and shared_stores(
            plan(m, select(expand(m, "features-cpu").cases, ["qwen3-tiny/pp2-tp1-mp/auto/pooling"])[0], local_cluster())
        )
        == {}
    )

"""ppconf's DP proxy (the CPU target's stand-in for vllm-ascend's dp_load_balance_proxy_server.py):
requests pass whole to the DP ranks' servers in turn, answers (streams too) relayed as they come,
its own /healthcheck answers while it runs. The ranks here are two tiny HTTP servers that say who
they are: this tests the proxy's forwarding only. The P/D proxy shares its HTTP handling
(harness.target.proxy_http): its two legs are checked on the same stand-ins."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from harness.check.serving.client import Client, ServerGroup
from harness.check.serving.live import LiveDeployment, free_port
from harness.launch import Deployment, LaunchSpec
from harness.plan.cluster import local_cluster
from harness.target import dp_proxy, pd_proxy


class _Rank(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    name = ""

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self._answer(json.dumps({"rank": self.name, "path": self.path}).encode())

    def do_POST(self):  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw)
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (f'data: {{"rank": "{self.name}"}}\n\n', "data: [DONE]\n\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part.encode()))
            self.wfile.write(b"0\r\n\r\n")
            return
        self._answer(json.dumps({"rank": self.name, "path": self.path, "got": body}).encode())


@contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _ranks_and_proxy() -> Iterator[str]:
    handlers = [type(f"Rank{i}", (_Rank,), {"name": f"dp{i}"}) for i in range(2)]
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handlers[0])) as p0:
        with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handlers[1])) as p1:
            args = dp_proxy.parse(
                ["--port", "0", "--dp-hosts", "127.0.0.1", "127.0.0.1", "--dp-ports", str(p0), str(p1)]
            )
            with _serving(dp_proxy.serve(args)) as port:
                yield f"http://127.0.0.1:{port}"


def test_requests_go_to_the_ranks_in_turn_whole_and_streams_stay_streams():
    with _ranks_and_proxy() as url, httpx.Client(timeout=10) as http:
        health = http.get(f"{url}/healthcheck")
        assert health.status_code == 200 and health.json()["dp_instances"] == 2
        answers = [http.post(f"{url}/v1/completions", json={"prompt": [1, 2], "n": i}).json() for i in range(4)]
        assert [a["rank"] for a in answers] == ["dp0", "dp1", "dp0", "dp1"]
        assert all(
            a["path"] == "/v1/completions" and a["got"] == {"prompt": [1, 2], "n": i} for i, a in enumerate(answers)
        )
        # any path is passed on (the tokenizer, the models list, a control endpoint)
        assert http.get(f"{url}/v1/models").json()["path"] == "/v1/models"
        assert http.post(f"{url}/tokenize", json={"prompt": "a"}).json()["path"] == "/tokenize"
        with http.stream("POST", f"{url}/v1/completions", json={"stream": True}) as r:
            lines = [line for line in r.iter_lines() if line]
        assert lines[-1] == "data: [DONE]" and json.loads(lines[0][6:])["rank"] in ("dp0", "dp1")


def test_a_rank_that_does_not_answer_is_a_502_naming_it():
    args = dp_proxy.parse(["--port", "0", "--dp-hosts", "127.0.0.1", "--dp-ports", "9", "--timeout-s", "2"])
    with _serving(dp_proxy.serve(args)) as port, httpx.Client(timeout=10) as http:
        r = http.post(f"http://127.0.0.1:{port}/v1/completions", json={})
        assert r.status_code == 502 and "DP rank http://127.0.0.1:9/v1/completions" in r.json()["error"]["message"]


def test_the_pd_proxy_sends_a_prefill_leg_then_the_request_to_decode_and_relays_its_stream():
    handlers = [type(f"Side{i}", (_Rank,), {"name": side}) for i, side in enumerate(("prefill", "decode"))]
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handlers[0])) as p0:
        with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handlers[1])) as p1:
            args = pd_proxy.parse(
                ["--port", "0", "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(p0)]
                + ["--decoder-hosts", "127.0.0.1", "--decoder-ports", str(p1)]
            )
            with _serving(pd_proxy.serve(args)) as port, httpx.Client(timeout=10) as http:
                url = f"http://127.0.0.1:{port}"
                assert http.get(f"{url}/healthcheck").status_code == 200
                done = http.post(f"{url}/v1/completions", json={"prompt": [1, 2], "max_tokens": 8}).json()
                # the decode side answers the client's request as sent (the stand-in prefill returned
                # no kv_transfer_params, as a shared-storage connector does)
                assert done == {"rank": "decode", "path": "/v1/completions", "got": {"prompt": [1, 2], "max_tokens": 8}}
                with http.stream("POST", f"{url}/v1/chat/completions", json={"stream": True}) as r:
                    assert r.headers["transfer-encoding"] == "chunked"
                    lines = [line for line in r.iter_lines() if line]
                assert lines == ['data: {"rank": "decode"}', "data: [DONE]"]
                assert http.post(f"{url}/tokenize", json={"prompt": "a"}).json()["rank"] == "decode"
                assert http.get(f"{url}/v1/models").json() == {"rank": "decode", "path": "/v1/models"}
                assert http.post(f"{url}/v1/embeddings", json={}).status_code == 404
                bad = http.post(f"{url}/v1/completions", content=b"[1", headers={"Content-Type": "application/json"})
                assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]


def test_the_pd_proxy_gives_the_prefill_leg_one_token_and_the_kv_kept_for_a_remote_decode():
    seen: list[dict] = []

    class Prefill(_Rank):
        def do_POST(self):  # noqa: N802
            seen.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
            self._answer(json.dumps({"kv_transfer_params": {"remote_block_ids": [3]}}).encode())

    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), Prefill)) as p0:
        with _serving(ThreadingHTTPServer(("127.0.0.1", 0), type("D", (_Rank,), {"name": "decode"}))) as p1:
            args = pd_proxy.parse(
                ["--port", "0", "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(p0)]
                + ["--decoder-hosts", "127.0.0.1", "--decoder-ports", str(p1)]
            )
            with _serving(pd_proxy.serve(args)) as port, httpx.Client(timeout=10) as http:
                sent = {"prompt": "x", "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}
                with http.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=sent) as r:
                    r.read()
    assert seen == [{"prompt": "x", "max_tokens": 1, "stream": False, "kv_transfer_params": pd_proxy.REMOTE_DECODE}]


STUB = str(Path(__file__).with_name("pd_instance_stub.py"))


def _external_dp(rank1_health: int = 200) -> Deployment:
    """Two stand-in DP rank servers and ppconf's DP proxy on fresh ports, as an external-DP plan names them."""
    r0, r1, api = free_port(), free_port(), free_port()
    proxy = (sys.executable, "-m", "harness.target.dp_proxy", "--port", str(api))
    proxy += ("--dp-hosts", "127.0.0.1", "127.0.0.1", "--dp-ports", str(r0), str(r1))
    return Deployment(
        ("c",),
        (
            LaunchSpec("dp0", "dp-rank", "local", "localhost", (sys.executable, STUB, str(r0)), (), r0),
            LaunchSpec(
                "dp1", "dp-rank", "local", "localhost", (sys.executable, STUB, str(r1), str(rank1_health)), (), r1
            ),
            LaunchSpec("proxy", "proxy", "local", "localhost", proxy, (), api),
        ),
        "proxy",
    )


def test_external_dp_is_ready_when_every_rank_and_the_proxy_are_and_is_read_from_every_rank(tmp_path):
    live = LiveDeployment(_external_dp(), tmp_path, {}, 10, local_cluster())
    live.start()
    try:
        state, _ = live.wait_ready(deadline_s=30)
        assert state == "ready" and live.ready_path == "/healthcheck"
        assert live.model_name in {f"stub-{live.deployment.launch(n).port}" for n in ("dp0", "dp1")}
        # the stage probe and metrics go to every rank's own server, not through the proxy
        ranks = [f"http://127.0.0.1:{live.deployment.launch(n).port}" for n in ("dp0", "dp1")]
        probe_group = live.stage_client
        assert isinstance(probe_group, ServerGroup) and [c.base for c in probe_group.clients] == ranks
        group = live.metrics_client
        assert isinstance(group, ServerGroup) and [c.base for c in group.clients] == ranks
    finally:
        live.stop()


def test_external_dp_with_an_unhealthy_rank_is_not_ready_though_the_proxy_answers(tmp_path):
    live = LiveDeployment(_external_dp(rank1_health=503), tmp_path, {}, 10, local_cluster())
    live.start()
    try:
        state, _ = live.wait_ready(deadline_s=4)
        assert state == "timeout"
    finally:
        live.stop()


def test_a_group_of_servers_reads_as_one_their_counters_and_gauges_summed():
    pages = {
        "http://a": 'vllm:generation_tokens_total{engine="0"} 30.0\nvllm:num_requests_running 2.0\n',
        "http://b": 'vllm:generation_tokens_total{engine="0"} 12.0\nvllm:num_requests_running 1.0\n',
    }
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=pages[f"http://{request.url.host}"]))
    group = ServerGroup([Client(base, 5, transport=transport) for base in pages])
    from harness.check.traffic import metrics

    assert group.metric("vllm:generation_tokens_total") == 42.0
    parsed = metrics.parse(group.metrics())
    assert parsed["generation_tokens"] == 42.0 and parsed["num_requests_running"] == 3.0
    sibling = group.sibling(1)
    assert [c.base for c in sibling.clients] == list(pages)
    sibling.close()
    group.close()


def test_an_external_dp_prefill_side_has_every_rank_read_by_the_stage_probe(tmp_path):
    def server(name, role, port):
        return LaunchSpec(name, role, "local", "localhost", ("serve",), (), port)

    deployment = Deployment(
        ("c",),
        (
            server("prefill-dp0", "prefill", 8100),
            server("prefill-dp1", "prefill", 8101),
            server("decode", "decode", 8200),
            server("proxy", "proxy", 8000),
        ),
        "proxy",
    )
    live = LiveDeployment(deployment, tmp_path, {}, 10, local_cluster())  # built, never started
    group = live.stage_client
    assert isinstance(group, ServerGroup) and [c.base for c in group.clients] == [
        "http://127.0.0.1:8100",
        "http://127.0.0.1:8101",
    ]
    assert live.metrics_client is live.instances["decode"]
    assert live.instances["prefill"].base == "http://127.0.0.1:8100"  # its configuration from DP rank 0

"""The P/D proxy ppconf ships for the CPU target: one process in front of a prefill and a decode
instance, speaking the hand-off vLLM's KV connectors expect.

Each completion is sent first to a prefill instance with ``max_tokens`` 1, no streaming and
``kv_transfer_params`` asking it to keep the KV for a remote decode (``do_remote_decode``); the
``kv_transfer_params`` its answer carries (where the connector has any: NIXL's block ids and
engine; a shared-storage connector has none) go with the unchanged request to a decode instance,
whose answer, streamed or not, is the client's. ``/healthcheck`` answers 200 while the proxy
runs; the instances are checked on their own. ``/tokenize`` and ``/detokenize`` go to a decode
instance as they are. Several instances of a side are taken in turn.

    python -m harness.target.pd_proxy --host 127.0.0.1 --port 8000 \
        --prefiller-hosts 127.0.0.1 --prefiller-ports 8100 --decoder-hosts 127.0.0.1 --decoder-ports 8200
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from typing import Any

import httpx

from harness.target import proxy_http
from harness.target.proxy_http import HEALTH_PATH, JSON, Instances, ProxyHandler

FORWARDED = ("/v1/completions", "/v1/chat/completions")  # split into a prefill and a decode leg
TOKENIZER = ("/tokenize", "/detokenize")  # the same on every instance: passed to a decode instance
# what a prefill instance is asked to do with the KV it computes (vLLM's connectors read these keys)
REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request a prefill instance answers: one token, no stream, the KV kept for a decode side."""
    out = {k: v for k, v in body.items() if k != "stream_options"}
    out.update(stream=False, max_tokens=1, kv_transfer_params=dict(REMOTE_DECODE))
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return out


def decode_body(body: dict[str, Any], prefilled: dict[str, Any]) -> dict[str, Any]:
    """The client's request for a decode instance, with the prefill side's ``kv_transfer_params``."""
    params = prefilled.get("kv_transfer_params")
    return {**body, "kv_transfer_params": params} if params else dict(body)


class Proxy:
    def __init__(self, prefill: Instances, decode: Instances, timeout_s: float):
        self.prefill = prefill
        self.decode = decode
        self.http = httpx.Client(timeout=timeout_s, trust_env=False)


def _handler(proxy: Proxy) -> type[ProxyHandler]:
    class Handler(ProxyHandler):
        prog = "pd_proxy"

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            if self.path == HEALTH_PATH:
                self.send_body(200, b'{"status":"ok"}')
            elif self.path == "/v1/models":
                try:
                    r = proxy.http.get(f"{proxy.decode.pick()}/v1/models")
                except httpx.HTTPError as err:
                    self.send_error_json(502, f"decode instance: {type(err).__name__}: {err}")
                    return
                self.send_body(r.status_code, r.content, r.headers.get("content-type", JSON))
            else:
                self.send_error_json(404, f"pd_proxy serves {HEALTH_PATH}, /v1/models and {', '.join(FORWARDED)}")

        def do_POST(self) -> None:  # noqa: N802
            raw = self.read_body()
            if self.path in TOKENIZER:
                self._plain(raw)
                return
            if self.path not in FORWARDED:
                self.send_error_json(404, f"pd_proxy forwards {', '.join(FORWARDED + TOKENIZER)} only, not {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError as err:
                self.send_error_json(400, f"request body is not JSON: {err}")
                return
            if not isinstance(body, dict):
                self.send_error_json(400, "request body must be a JSON object")
                return
            try:
                first = proxy.http.post(f"{proxy.prefill.pick()}{self.path}", json=prefill_body(body))
            except httpx.HTTPError as err:
                self.send_error_json(502, f"prefill instance: {type(err).__name__}: {err}")
                return
            if first.status_code != 200:
                self.send_body(first.status_code, first.content, first.headers.get("content-type", JSON))
                return
            try:
                with proxy.http.stream(
                    "POST", f"{proxy.decode.pick()}{self.path}", json=decode_body(body, first.json())
                ) as r:
                    self.relay(r.status_code, r.headers.get("content-type", JSON), r.iter_raw())
            except (httpx.HTTPError, ValueError) as err:
                if not self.wfile.closed:
                    self.send_error_json(502, f"decode instance: {type(err).__name__}: {err}")

        def _plain(self, raw: bytes) -> None:
            """A request every instance answers alike (the model's tokenizer): a decode instance's answer."""
            try:
                r = proxy.http.post(f"{proxy.decode.pick()}{self.path}", content=raw, headers={"Content-Type": JSON})
            except httpx.HTTPError as err:
                self.send_error_json(502, f"decode instance: {type(err).__name__}: {err}")
                return
            self.send_body(r.status_code, r.content, r.headers.get("content-type", JSON))

    return Handler


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pd_proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="the address clients connect to")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prefiller-hosts", nargs="+", required=True)
    p.add_argument("--prefiller-ports", nargs="+", type=int, required=True)
    p.add_argument("--decoder-hosts", nargs="+", required=True)
    p.add_argument("--decoder-ports", nargs="+", type=int, required=True)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per request to an instance")
    return p.parse_args(argv)


def serve(args: argparse.Namespace) -> ThreadingHTTPServer:
    proxy = Proxy(
        Instances(args.prefiller_hosts, args.prefiller_ports, "prefill", prog="pd_proxy"),
        Instances(args.decoder_hosts, args.decoder_ports, "decode", prog="pd_proxy"),
        args.timeout_s,
    )
    return proxy_http.threading_server(args.host, args.port, _handler(proxy))


def main(argv: Sequence[str] | None = None) -> None:
    proxy_http.main("pd_proxy", parse, serve, argv)


if __name__ == "__main__":
    main()

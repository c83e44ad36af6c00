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
import itertools
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HEALTH_PATH = "/healthcheck"
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


class Instances:
    """The instances of one side, taken in turn."""

    def __init__(self, hosts: Sequence[str], ports: Sequence[int], side: str):
        if len(hosts) != len(ports) or not hosts:
            raise SystemExit(f"pd_proxy: {side}: {len(hosts)} host(s) for {len(ports)} port(s)")
        urls = [f"http://{h}:{p}" for h, p in zip(hosts, ports, strict=True)]
        self.urls = urls
        self._next = itertools.cycle(urls)
        self._lock = threading.Lock()

    def pick(self) -> str:
        with self._lock:
            return next(self._next)


class Proxy:
    def __init__(self, prefill: Instances, decode: Instances, timeout_s: float):
        self.prefill = prefill
        self.decode = decode
        self.http = httpx.Client(timeout=timeout_s, trust_env=False)


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
            sys.stderr.write(f"pd_proxy: {self.address_string()} {format % args}\n")

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str) -> None:
            self._send(status, json.dumps({"error": {"message": message, "code": status}}).encode())

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            if self.path == HEALTH_PATH:
                self._send(200, b'{"status":"ok"}')
            elif self.path == "/v1/models":
                try:
                    r = proxy.http.get(f"{proxy.decode.pick()}/v1/models")
                except httpx.HTTPError as err:
                    self._error(502, f"decode instance: {type(err).__name__}: {err}")
                    return
                self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))
            else:
                self._error(404, f"pd_proxy serves {HEALTH_PATH}, /v1/models and {', '.join(FORWARDED)}")

        def do_POST(self) -> None:  # noqa: N802
            # read first, whatever the path: a body left unread would be taken for the next
            # request on this keep-alive connection
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path in TOKENIZER:
                self._plain(raw)
                return
            if self.path not in FORWARDED:
                self._error(404, f"pd_proxy forwards {', '.join(FORWARDED + TOKENIZER)} only, not {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError as err:
                self._error(400, f"request body is not JSON: {err}")
                return
            if not isinstance(body, dict):
                self._error(400, "request body must be a JSON object")
                return
            try:
                first = proxy.http.post(f"{proxy.prefill.pick()}{self.path}", json=prefill_body(body))
            except httpx.HTTPError as err:
                self._error(502, f"prefill instance: {type(err).__name__}: {err}")
                return
            if first.status_code != 200:
                self._send(first.status_code, first.content, first.headers.get("content-type", "application/json"))
                return
            try:
                with proxy.http.stream(
                    "POST", f"{proxy.decode.pick()}{self.path}", json=decode_body(body, first.json())
                ) as r:
                    self._relay(r.status_code, r.headers.get("content-type", "application/json"), r.iter_raw())
            except (httpx.HTTPError, ValueError) as err:
                if not self.wfile.closed:
                    self._error(502, f"decode instance: {type(err).__name__}: {err}")

        def _plain(self, raw: bytes) -> None:
            """A request every instance answers alike (the model's tokenizer): a decode instance's answer."""
            try:
                r = proxy.http.post(
                    f"{proxy.decode.pick()}{self.path}", content=raw, headers={"Content-Type": "application/json"}
                )
            except httpx.HTTPError as err:
                self._error(502, f"decode instance: {type(err).__name__}: {err}")
                return
            self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))

        def _relay(self, status: int, ctype: str, chunks: Iterator[bytes]) -> None:
            """The decode instance's answer as it arrives, in HTTP/1.1 chunks (a stream stays a stream)."""
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

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
        Instances(args.prefiller_hosts, args.prefiller_ports, "prefill"),
        Instances(args.decoder_hosts, args.decoder_ports, "decode"),
        args.timeout_s,
    )
    server = ThreadingHTTPServer((args.host, args.port), _handler(proxy))
    server.daemon_threads = True
    return server


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    server = serve(args)
    sys.stderr.write(f"pd_proxy: serving on {args.host}:{args.port}\n")
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()

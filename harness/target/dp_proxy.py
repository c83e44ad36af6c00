"""The DP proxy ppconf ships for the CPU target: one process in front of the API servers of an
external-DP deployment (one per DP rank), taking them in turn, as vllm-ascend's
``dp_load_balance_proxy_server.py`` does on Ascend (same arguments). Every request is passed on
whole to the next rank, its answer relayed as it arrives (a stream stays a stream);
``/healthcheck`` answers 200 while the proxy runs (the ranks are checked on their own).

    python -m harness.target.dp_proxy --host 127.0.0.1 --port 8000 \
        --dp-hosts 127.0.0.1 127.0.0.1 --dp-ports 8001 8002
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from http.server import ThreadingHTTPServer

import httpx

from harness.target import proxy_http
from harness.target.proxy_http import HEALTH_PATH, JSON, Instances, ProxyHandler

PASSED_HEADERS = ("content-type", "authorization")


def _handler(ranks: Instances, http: httpx.Client) -> type[ProxyHandler]:
    class Handler(ProxyHandler):
        prog = "dp_proxy"

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            if self.path == HEALTH_PATH:
                self.send_body(200, json.dumps({"status": "ok", "dp_instances": len(ranks.urls)}).encode())
                return
            self._forward("GET", b"")

        def do_POST(self) -> None:  # noqa: N802
            self._forward("POST", self.read_body())

        def _forward(self, method: str, raw: bytes) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in PASSED_HEADERS}
            url = f"{ranks.pick()}{self.path}"
            try:
                with http.stream(method, url, content=raw or None, headers=headers) as r:
                    self.relay(r.status_code, r.headers.get("content-type", JSON), r.iter_raw())
            except httpx.HTTPError as err:
                if not self.wfile.closed:
                    self.send_error_json(502, f"DP rank {url}: {type(err).__name__}: {err}")

    return Handler


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dp_proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="the address clients connect to")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dp-hosts", nargs="+", required=True)
    p.add_argument("--dp-ports", nargs="+", type=int, required=True)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per request to a rank")
    return p.parse_args(argv)


def serve(args: argparse.Namespace) -> ThreadingHTTPServer:
    ranks = Instances(args.dp_hosts, args.dp_ports, "dp", prog="dp_proxy")
    http = httpx.Client(timeout=args.timeout_s, trust_env=False)
    return proxy_http.threading_server(args.host, args.port, _handler(ranks, http))


def main(argv: Sequence[str] | None = None) -> None:
    proxy_http.main("dp_proxy", parse, serve, argv)


if __name__ == "__main__":
    main()

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
import sys
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from harness.target.pd_proxy import HEALTH_PATH, Instances

PASSED_HEADERS = ("content-type", "authorization")


def _handler(ranks: Instances, http: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
            sys.stderr.write(f"dp_proxy: {self.address_string()} {format % args}\n")

        def _error(self, status: int, message: str) -> None:
            body = json.dumps({"error": {"message": message, "code": status}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            if self.path == HEALTH_PATH:
                body = json.dumps({"status": "ok", "dp_instances": len(ranks.urls)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self._forward("GET", b"")

        def do_POST(self) -> None:  # noqa: N802
            # read first: a body left unread would be taken for the next request on the connection
            self._forward("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, method: str, raw: bytes) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in PASSED_HEADERS}
            url = f"{ranks.pick()}{self.path}"
            try:
                with http.stream(method, url, content=raw or None, headers=headers) as r:
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in r.iter_raw():
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
            except httpx.HTTPError as err:
                if not self.wfile.closed:
                    self._error(502, f"DP rank {url}: {type(err).__name__}: {err}")

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
    ranks = Instances(args.dp_hosts, args.dp_ports, "dp")
    server = ThreadingHTTPServer(
        (args.host, args.port), _handler(ranks, httpx.Client(timeout=args.timeout_s, trust_env=False))
    )
    server.daemon_threads = True
    return server


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    server = serve(args)
    sys.stderr.write(f"dp_proxy: serving on {args.host}:{args.port}\n")
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()

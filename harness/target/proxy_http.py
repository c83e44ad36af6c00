"""What ppconf's two proxies for the CPU target (P/D and DP) share: the instances of one side
taken in turn, an HTTP/1.1 handler that answers with a whole body, an error or a relayed stream,
and the process's serve-forever ``main``."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEALTH_PATH = "/healthcheck"
JSON = "application/json"


class Instances:
    """The instances of one side (a P/D side, or the ranks of an external-DP deployment), taken in turn."""

    def __init__(self, hosts: Sequence[str], ports: Sequence[int], side: str, prog: str = "proxy"):
        if len(hosts) != len(ports) or not hosts:
            raise SystemExit(f"{prog}: {side}: {len(hosts)} host(s) for {len(ports)} port(s)")
        urls = [f"http://{h}:{p}" for h, p in zip(hosts, ports, strict=True)]
        self.urls = urls
        self._next = itertools.cycle(urls)
        self._lock = threading.Lock()

    def pick(self) -> str:
        with self._lock:
            return next(self._next)


class ProxyHandler(BaseHTTPRequestHandler):
    """A keep-alive handler whose answers are a whole body (:meth:`send_body`), an OpenAI-style
    error (:meth:`send_error_json`) or an upstream answer relayed as it arrives (:meth:`relay`)."""

    protocol_version = "HTTP/1.1"
    prog = "proxy"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base class's name
        sys.stderr.write(f"{self.prog}: {self.address_string()} {format % args}\n")

    def read_body(self) -> bytes:
        # read whatever the path: a body left unread would be taken for the next request on the connection
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_body(self, status: int, body: bytes, ctype: str = JSON) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_error_json(self, status: int, message: str) -> None:
        self.send_body(status, json.dumps({"error": {"message": message, "code": status}}).encode())

    def relay(self, status: int, ctype: str, chunks: Iterator[bytes]) -> None:
        """An upstream answer as it arrives, in HTTP/1.1 chunks (a stream stays a stream)."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            if chunk:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def threading_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(
    prog: str,
    parse: Callable[[Sequence[str]], argparse.Namespace],
    serve: Callable[[argparse.Namespace], ThreadingHTTPServer],
    argv: Sequence[str] | None = None,
) -> None:
    """Parse the command line, serve until killed, saying where on stderr first."""
    args = parse(sys.argv[1:] if argv is None else argv)
    server = serve(args)
    sys.stderr.write(f"{prog}: serving on {args.host}:{args.port}\n")
    sys.stderr.flush()
    server.serve_forever()

"""A stand-in for one vLLM instance of a P/D pair (run as a script: ``PORT [HEALTH_STATUS]``).

It serves /health (with the given status), /v1/models, /metrics, /tokenize (its port as the one
token) and /v1/completions. A completion
asked with ``kv_transfer_params.do_remote_decode`` (the prefill leg) answers one token and
``kv_transfer_params`` naming this port; any other completion echoes, as its text, the JSON of the
request it got, so a test reads what the proxy forwarded; ``stream: true`` answers two SSE events.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler(port: int, health: int) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, status: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._json(health, {})
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": f"stub-{port}"}]})
            elif self.path == "/metrics":
                self._json(200, {})
            else:
                self._json(404, {})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                self._json(200, {"tokens": [port], "got": body})
                return
            params = body.get("kv_transfer_params") or {}
            if params.get("do_remote_decode"):
                self._json(200, {"choices": [{"text": "x"}], "kv_transfer_params": {"remote_port": port, "seen": body}})
                return
            if not body.get("stream"):
                self._json(200, {"choices": [{"text": json.dumps(body)}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(stream_bytes(body))))
            self.end_headers()
            self.wfile.write(stream_bytes(body))

    return H


def stream_bytes(body: dict) -> bytes:
    return (
        b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in ({"n": 1, "got": body}, {"n": 2})) + b"data: [DONE]\n\n"
    )


if __name__ == "__main__":
    port = int(sys.argv[1])
    ThreadingHTTPServer(
        ("127.0.0.1", port), handler(port, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
    ).serve_forever()

"""A tiny OpenAI-compatible server that answers generation requests, for tests that run AISBench
without vLLM.

It serves ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``. Its "model" is a rule:
the answer to a prompt is the sum of the integers in its last ``Question:`` part, written as
"The answer is N." So on tests/data/aisbench/tiny_arith it gets the sums right and the differences
wrong, and the expected score is known without AISBench (:func:`sum_rule_accuracy`).

``fail`` makes it answer HTTP 500 to the requests whose prompt it matches; ``hang`` makes every
request block until the server is closed.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def answer(prompt: str) -> str:
    question = prompt.split("Question:")[-1]
    return f"The answer is {sum(int(n) for n in re.findall(r'[0-9]+', question))}."


def sum_rule_accuracy(dataset: Path, limit: int | None = None) -> float:
    """What the rule scores on a GSM8K-format test.jsonl, in AISBench's points (0-100)."""
    rows = [json.loads(line) for line in (dataset / "test.jsonl").read_text().splitlines()][:limit]
    right = 0
    for row in rows:
        gold = row["answer"].split("#### ")[1].strip()
        right += answer(f"Question: {row['question']}").removesuffix(".").split()[-1] == gold
    return 100 * right / len(rows)


class AnswerStub:
    def __init__(self, model: str = "stub", fail: Callable[[str], bool] | None = None, hang: bool = False):
        self.model = model
        self.fail = fail
        self.hang = hang
        self.requests: list[tuple[str, dict]] = []
        self.request_seen = threading.Event()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> AnswerStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def reply(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/v1/chat/completions":
            prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        elif path == "/v1/completions":
            prompt = str(body.get("prompt", ""))
        else:
            return 404, {"error": f"no route {path}"}
        if self.fail and self.fail(prompt):
            return 500, {"error": "the stub was told to fail this request"}
        text = answer(prompt)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        if path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return 200, {"object": "chat.completion", "model": self.model, "choices": [choice], "usage": usage}
        choice = {"index": 0, "text": " " + text, "finish_reason": "stop"}
        return 200, {"object": "text_completion", "model": self.model, "choices": [choice], "usage": usage}

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest's output clean
                pass

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._reply(200, {"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                else:
                    self._reply(404, {"error": f"no route {self.path}"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body))
                stub.request_seen.set()
                if stub.hang:
                    stub._closing.wait()
                    return
                self._reply(*stub.reply(self.path, body))

        return Handler

"""A tiny OpenAI-compatible /v1/completions server for tests that must not launch vLLM.

It answers the requests lm-eval's ``local-completions`` model sends for loglikelihood tasks
(``echo: true``, ``logprobs``, ``max_tokens: 1``, prompts as token ids or text) the way vLLM 0.32
does: the prompt's tokens echoed with their logprobs, the first one ``null``, then one generated
token. Its "model" is a rule: every token's logprob is minus the length of its text, so a
sequence's logprob is minus its length in characters and a multiple-choice task's `acc` is the
share of questions whose right answer is the shortest choice (the first of the shortest on ties).

``hang=True`` makes every completion request block until the server is closed: a stand-in for a
deployment that stopped answering.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GENERATED_TOKEN = 1  # the one token a loglikelihood request asks to generate; lm-eval drops it


def token_logprob(text: str) -> float:
    return -float(len(text))


class CompletionsStub:
    def __init__(self, tokenizer_dir: Path, model: str = "stub", hang: bool = False):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self.model = model
        self.hang = hang
        self.requests: list[dict] = []
        self.request_seen = threading.Event()
        self._closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> CompletionsStub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def complete(self, body: dict) -> dict:
        if not body.get("echo") or body.get("logprobs") is None:
            raise ValueError("the stub answers only echo requests with logprobs (loglikelihood)")
        prompt = body["prompt"]
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            prompt = [prompt]
        choices = []
        for index, p in enumerate(prompt):
            ids = self.tokenizer.encode(p).ids if isinstance(p, str) else list(p)
            ids.append(GENERATED_TOKEN)
            tokens = [self.tokenizer.decode([i]) for i in ids]
            logprobs = [None] + [token_logprob(t) for t in tokens[1:]]
            choices.append(
                {
                    "index": index,
                    "text": "".join(tokens),
                    "finish_reason": "length",
                    "logprobs": {
                        "tokens": tokens,
                        "token_logprobs": logprobs,
                        "top_logprobs": [None] + [{t: lp} for t, lp in zip(tokens[1:], logprobs[1:], strict=True)],
                        "text_offset": [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))],
                    },
                }
            )
        return {"id": "cmpl-stub", "object": "text_completion", "model": self.model, "choices": choices}

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

            def do_POST(self):
                if self.path != "/v1/completions":
                    self._reply(404, {"error": f"no route {self.path}"})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(body)
                stub.request_seen.set()
                if stub.hang:
                    stub._closing.wait()
                    return
                try:
                    self._reply(200, stub.complete(body))
                except ValueError as e:
                    self._reply(400, {"error": str(e)})

        return Handler

"""The standalone repro: requests.json holds the exact requests, expected.json the reference's and
the case's answers, and client.py — run with plain Python, no ppconf on its path — sends them to a
server and exits 1 exactly when an answer still differs from the reference."""

import http.server
import json
import subprocess
import sys
import threading

import pytest

from harness.cases.workload import plan_phase
from harness.check.verdict import standalone
from harness.matrix.schema import Accuracy, Phase
from harness.results.result import Observation

LONG = 100


def serve(skewed: bool):
    """A completions server whose answer is a function of the prompt: with ``skewed``, token 7
    for prompts of ``LONG`` ids or more (the planted fault), else token 1."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"data": [{"id": "tiny"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            long = isinstance(body["prompt"], list) and len(body["prompt"]) >= LONG
            token = 7 if skewed and long else 1
            tokens = [f"token_id:{token}"] * body["max_tokens"]
            if not body.get("stream"):
                self._send({"choices": [{"text": "", "logprobs": {"tokens": tokens}}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for t in tokens:  # one token a chunk, as vLLM streams them
                chunk = {"choices": [{"index": 0, "text": "", "logprobs": {"tokens": [t]}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def bundle(tmp_path):
    plan = plan_phase(Phase(kind="concurrent", requests=4, prompt_tokens=200, max_tokens=3), pp=2)
    longest = max(plan.requests, key=lambda r: len(r.prompt))
    n = longest.max_tokens
    diff = {"request": longest.label, "why": "differs", "baseline_ids": [1] * n, "observed_ids": [7] * n}
    obs = Observation(ready=True, workload=[{"name": "concurrent", "kind": "concurrent", "diffs": [diff]}])
    standalone.write(tmp_path, None, obs, Accuracy(prompts=["Hello"], max_tokens=2), (plan,))
    return tmp_path, plan


def client(bundle_dir, url):
    # -I: the standard library alone, whatever the environment's path holds
    return subprocess.run(
        [sys.executable, "-I", str(bundle_dir / "client.py"), "--url", url], capture_output=True, text=True
    )


def test_the_client_reproduces_the_failure_with_the_exact_requests(bundle):
    out, plan = bundle
    server, seen = serve(skewed=True)
    try:
        got = client(out, f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert got.returncode == 1, got.stdout + got.stderr
    assert "differs from the reference (as observed)" in got.stdout
    assert "1 of 1 requests differ from the reference" in got.stdout
    # every request sent as the check sent it: the sequential prompt, then the phase's token ids
    assert seen[0]["prompt"] == "Hello" and seen[0]["max_tokens"] == 2
    assert sorted(map(tuple, (b["prompt"] for b in seen[1:]))) == sorted(r.prompt for r in plan.requests)
    assert all(b["temperature"] == 0 and b["ignore_eos"] and b["return_tokens_as_token_ids"] for b in seen)
    assert [bool(b.get("stream")) for b in seen] == [False] + [True] * len(plan.requests)  # as the phase streams


def test_the_client_says_so_when_the_failure_is_gone(bundle):
    out, _ = bundle
    server, _ = serve(skewed=False)
    try:
        got = client(out, f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert got.returncode == 0, got.stdout + got.stderr
    assert "equals the reference (not reproduced)" in got.stdout


def test_requests_and_expected_answers_are_data(bundle):
    out, plan = bundle
    traffic = json.loads((out / "requests.json").read_text())
    assert [p["name"] for p in traffic["phases"]] == ["sequential", "concurrent"]
    assert traffic["phases"][1]["at_once"] and len(traffic["phases"][1]["requests"]) == len(plan.requests)
    (label,) = json.loads((out / "expected.json").read_text())
    assert label.startswith("concurrent:")

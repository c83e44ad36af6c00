"""Talking to a running deployment over its OpenAI-compatible HTTP API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Completion:
    prompt: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    # per generated token, the server's top logprobs: {token id: logprob}
    top: tuple[dict[int, float], ...] = ()
    label: str = ""  # which request of a comparison this answers ("text:0", "stream:0", "ids:0")
    finish_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt": self.prompt,
            "token_ids": list(self.token_ids),
            "logprobs": list(self.logprobs),
            "text": self.text,
        }
        if self.top:
            out["top"] = [{str(k): v for k, v in t.items()} for t in self.top]
        if self.label:
            out["label"] = self.label
        if self.finish_reason:
            out["finish_reason"] = self.finish_reason
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> Completion:
        top = tuple({int(k): float(v) for k, v in t.items()} for t in d.get("top") or [])
        return Completion(
            d["prompt"],
            tuple(d["token_ids"]),
            tuple(d["logprobs"]),
            d["text"],
            top,
            d.get("label", ""),
            d.get("finish_reason", ""),
        )


@dataclass(frozen=True)
class Sampling:
    """How a completion is sampled: greedy (temperature 0) or seeded."""

    temperature: float = 0.0
    seed: int | None = None
    top_logprobs: int = 1


GREEDY = Sampling()


@dataclass(frozen=True)
class Timing:
    """When a streamed request was sent, and each stream event with tokens as the client read it
    (monotonic s): (arrival, tokens it carried, how long the client waited on the socket for it).
    An event the client did not wait for was already read, with the one before, when it asked."""

    sent: float
    chunks: tuple[tuple[float, int, float], ...]

    @property
    def ttft(self) -> float | None:
        return self.chunks[0][0] - self.sent if self.chunks else None

    def to_json(self) -> list[list[float]]:
        """Each event: [seconds since the request was sent, tokens, seconds the client waited for it]."""
        return [[round(at - self.sent, 6), n, round(waited, 6)] for at, n, waited in self.chunks]

    @staticmethod
    def from_json(events: list[list[float]]) -> Timing:
        return Timing(0.0, tuple((float(at), int(n), float(waited)) for at, n, waited in events))

    def inter_token(self) -> list[float]:
        """Seconds per token between consecutive chunks (a chunk of k tokens counts k gaps)."""
        out: list[float] = []
        for (t0, _, _), (t1, n, _) in zip(self.chunks, self.chunks[1:], strict=False):
            out += [(t1 - t0) / n] * n if n else []
        return out


@dataclass(frozen=True)
class Answer:
    """A server's answer to one request: its HTTP status and its body (JSON, or text)."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _answer(r: httpx.Response) -> Answer:
    """A read response as an answer: its status, its body as JSON, else as text."""
    try:
        content: Any = r.json()
    except ValueError:
        content = r.text
    return Answer(r.status_code, content)


class EventStream:
    """A streamed POST's answer as it arrives: its status, and the server-sent events of a success
    (HTTP 2xx), each event's data parsed as JSON, up to ``data: [DONE]``."""

    def __init__(self, response: httpx.Response):
        self._response = response
        self.status = response.status_code

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def answer(self) -> Answer:
        """The whole answer read at once (what an error status carries), as ``Client.call`` has it."""
        self._response.read()
        return _answer(self._response)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self._response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])


@dataclass(frozen=True)
class Batch:
    """The answer to one /v1/completions request with several prompts."""

    completions: tuple[Completion, ...]
    usage: dict[str, int]


def _token_id(token: str) -> int:
    # with return_tokens_as_token_ids, tokens come back as "token_id:123"
    return int(token.rsplit(":", 1)[1])


def top_by_id(entry: dict[str, float] | None) -> dict[int, float]:
    """A top-logprobs entry keyed by token id (its tokens returned as "token_id:N")."""
    return {_token_id(t): float(v) for t, v in (entry or {}).items()}


def _completion(prompt: str, choice: dict[str, Any], label: str) -> Completion:
    lp = choice["logprobs"]
    return Completion(
        prompt,
        tuple(_token_id(t) for t in lp["tokens"]),
        tuple(float(x) for x in lp["token_logprobs"]),
        choice["text"],
        tuple(top_by_id(t) for t in lp.get("top_logprobs") or []),
        label,
        choice.get("finish_reason") or "",
    )


class Client:
    def __init__(
        self, base_url: str, timeout_s: float, connections: int = 10, transport: httpx.BaseTransport | None = None
    ):
        """``transport``: httpx's own (None), or one standing in for the server (a test's)."""
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.transport = transport
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        # a plain-HTTP server needs no TLS context (loading the CA bundle costs about 0.5 s of CPU
        # per client, taken from the servers starting beside it)
        verify = not self.base.startswith("http://")
        self.http = httpx.Client(timeout=timeout_s, trust_env=False, limits=limits, verify=verify, transport=transport)

    def sibling(self, connections: int) -> Client:
        """Another client of the same server, for requests in flight at once (closed by the caller)."""
        return Client(self.base, self.timeout_s, connections, self.transport)

    def close(self) -> None:
        self.http.close()

    def healthy(self, path: str) -> bool:
        """Whether ``path`` (a proxy's own readiness path) answers 200."""
        try:
            return self.http.get(f"{self.base}{path}", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def ready(self, health: str = "/health") -> str | None:
        """The served model name once ``health`` (vLLM's /health, or a P/D proxy's own path) and
        /v1/models both answer, else None."""
        try:
            if self.http.get(f"{self.base}{health}", timeout=2).status_code != 200:
                return None
            models = self.http.get(f"{self.base}/v1/models", timeout=2)
            if models.status_code != 200:
                return None
            return models.json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            return None

    def _body(
        self, model: str, prompt: str | list[int] | list[list[int]], max_tokens: int, sampling: Sampling
    ) -> dict[str, Any]:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "logprobs": sampling.top_logprobs,
            "return_tokens_as_token_ids": True,
            "ignore_eos": True,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        return body

    def complete(
        self, model: str, prompt: str | list[int], max_tokens: int, sampling: Sampling = GREEDY, label: str = ""
    ) -> Completion:
        r = self.http.post(f"{self.base}/v1/completions", json=self._body(model, prompt, max_tokens, sampling))
        r.raise_for_status()
        return _completion(str(prompt), r.json()["choices"][0], label)

    def complete_batch(
        self, model: str, prompts: list[list[int]], max_tokens: int, sampling: Sampling, labels: list[str]
    ) -> Batch:
        """Several token-id prompts in one request; the answers in prompt order, with the usage."""
        r = self.http.post(f"{self.base}/v1/completions", json=self._body(model, prompts, max_tokens, sampling))
        r.raise_for_status()
        body = r.json()
        choices = sorted(body["choices"], key=lambda c: c["index"])
        return Batch(
            tuple(_completion(str(p), c, lab) for p, c, lab in zip(prompts, choices, labels, strict=True)),
            {k: int(v) for k, v in (body.get("usage") or {}).items() if isinstance(v, int)},
        )

    def models_answer(self) -> Answer:
        """GET /v1/models: its status and its answer (JSON, else the text), an error status not
        raised (as ``call``): the list is compared like any answer."""
        return _answer(self.http.get(f"{self.base}/v1/models"))

    def models(self) -> list[dict[str, Any]]:
        r = self.http.get(f"{self.base}/v1/models")
        r.raise_for_status()
        return [{"id": m.get("id"), "root": m.get("root")} for m in r.json()["data"]]

    def complete_streamed(
        self, model: str, prompt: str, max_tokens: int, sampling: Sampling = GREEDY, label: str = ""
    ) -> Completion:
        return self.stream_timed(model, prompt, max_tokens, sampling, label)[0]

    def stream_timed(
        self,
        model: str,
        prompt: str | list[int],
        max_tokens: int,
        sampling: Sampling = GREEDY,
        label: str = "",
        stop_after_chunks: int | None = None,
    ) -> tuple[Completion, Timing]:
        """A streamed completion and when its chunks arrived. With ``stop_after_chunks`` the
        stream is closed after that many chunks, as a client that goes away would."""
        body = self._body(model, prompt, max_tokens, sampling) | {"stream": True}
        ids: list[int] = []
        lps: list[float] = []
        tops: list[dict[int, float]] = []
        text = []
        chunks: list[tuple[float, int, float]] = []
        finish = ""
        sent = time.monotonic()
        with self.http.stream("POST", f"{self.base}/v1/completions", json=body) as r:
            r.raise_for_status()
            asked = time.monotonic()  # when the client began waiting for the next event
            for line in r.iter_lines():
                arrived = time.monotonic()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choice = json.loads(line[6:])["choices"][0]
                text.append(choice.get("text") or "")
                lp = choice.get("logprobs") or {}
                new = [_token_id(t) for t in lp.get("tokens") or []]
                ids += new
                lps += [float(x) for x in lp.get("token_logprobs") or []]
                tops += [top_by_id(t) for t in lp.get("top_logprobs") or []]
                finish = choice.get("finish_reason") or finish
                if new:
                    chunks.append((arrived, len(new), arrived - asked))
                if stop_after_chunks is not None and len(chunks) >= stop_after_chunks:
                    break
                asked = time.monotonic()
        completion = Completion(str(prompt), tuple(ids), tuple(lps), "".join(text), tuple(tops), label, finish)
        return completion, Timing(sent, tuple(chunks))

    def tokenize(self, model: str, prompt: str) -> list[int]:
        r = self.http.post(f"{self.base}/tokenize", json={"model": model, "prompt": prompt})
        r.raise_for_status()
        return [int(t) for t in r.json()["tokens"]]

    def collective_rpc(self, method: str) -> list[Any]:
        r = self.http.post(f"{self.base}/collective_rpc", json={"method": method})
        r.raise_for_status()
        return r.json()["results"]

    def server_config(self) -> dict[str, Any]:
        """The configuration the API server built (vLLM's dev-mode ``/server_info``, as JSON)."""
        r = self.http.get(f"{self.base}/server_info", params={"config_format": "json"})
        r.raise_for_status()
        config = r.json()["vllm_config"]
        if not isinstance(config, dict):
            raise ValueError(f"/server_info: vllm_config is a {type(config).__name__}, not an object")
        return config

    def metrics(self) -> str:
        r = self.http.get(f"{self.base}/metrics")
        r.raise_for_status()
        return r.text

    def metric(self, name: str) -> float:
        """Sum of a Prometheus counter over its label sets."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def call(self, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None) -> Answer:
        """POST ``path``: its status and its answer (JSON, else the text). An error status is
        an answer too, not raised: a request's refusal is compared like its output."""
        return _answer(self.http.post(f"{self.base}{path}", json=body, params=params))

    @contextmanager
    def call_streamed(self, path: str, body: dict[str, Any]) -> Iterator[EventStream]:
        """POST ``path`` for a streamed answer: its status and its events as they arrive (iterate
        the stream), or with an error status its whole answer (``EventStream.answer``), not
        raised (as ``call``). The response is closed when the block ends."""
        with self.http.stream("POST", f"{self.base}{path}", json=body) as r:
            yield EventStream(r)

    def embed(self, model: str, text: str) -> list[float]:
        r = self.http.post(f"{self.base}/v1/embeddings", json={"model": model, "input": text})
        r.raise_for_status()
        return r.json()["data"][0]["embedding"]

    def classify(self, model: str, text: str) -> dict[str, Any]:
        """A sequence classifier's answer for ``text``: its ``label`` and class ``probs``."""
        r = self.http.post(f"{self.base}/classify", json={"model": model, "input": text})
        r.raise_for_status()
        d = r.json()["data"][0]
        return {"label": d["label"], "probs": [float(p) for p in d["probs"]]}


class ServerGroup:
    """Several servers of one deployment read as one: their /metrics pages together (a page's
    samples are summed by name, so counters and gauges add up over the servers) and a counter
    summed over them. The DP ranks of external DP, or the servers of one P/D side."""

    def __init__(self, clients: list[Client]):
        self.clients = clients

    @property
    def base(self) -> str:
        return self.clients[0].base

    def metrics(self) -> str:
        return "\n".join(c.metrics() for c in self.clients)

    def metric(self, name: str) -> float:
        return sum(c.metric(name) for c in self.clients)

    def sibling(self, connections: int) -> ServerGroup:
        return ServerGroup([c.sibling(connections) for c in self.clients])

    def collective_rpc(self, method: str) -> list[Any]:
        """Every server's workers' answers, each (an object) tagged with ``dp_rank``, its
        server's place in the group: the DP ranks of external DP each run their own workers."""
        out: list[Any] = []
        for i, c in enumerate(self.clients):
            out += [{**a, "dp_rank": i} if isinstance(a, dict) else a for a in c.collective_rpc(method)]
        return out

    def close(self) -> None:
        for c in self.clients:
            c.close()

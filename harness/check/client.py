"""Talking to a running deployment over its OpenAI-compatible HTTP API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Completion:
    prompt: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "token_ids": list(self.token_ids),
                "logprobs": list(self.logprobs), "text": self.text}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Completion:
        return Completion(d["prompt"], tuple(d["token_ids"]), tuple(d["logprobs"]), d["text"])


def _token_id(token: str) -> int:
    # with return_tokens_as_token_ids, tokens come back as "token_id:123"
    return int(token.rsplit(":", 1)[1])


class Client:
    def __init__(self, base_url: str, timeout_s: float):
        self.base = base_url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def ready(self) -> str | None:
        """The served model name once /health and /v1/models both answer, else None."""
        try:
            if self.http.get(f"{self.base}/health", timeout=2).status_code != 200:
                return None
            models = self.http.get(f"{self.base}/v1/models", timeout=2)
            if models.status_code != 200:
                return None
            return models.json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            return None

    def _body(self, model: str, prompt: str | list[int], max_tokens: int) -> dict[str, Any]:
        return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "logprobs": 1, "return_tokens_as_token_ids": True, "ignore_eos": True}

    def complete(self, model: str, prompt: str | list[int], max_tokens: int) -> Completion:
        r = self.http.post(f"{self.base}/v1/completions", json=self._body(model, prompt, max_tokens))
        r.raise_for_status()
        choice = r.json()["choices"][0]
        lp = choice["logprobs"]
        return Completion(str(prompt), tuple(_token_id(t) for t in lp["tokens"]),
                          tuple(float(x) for x in lp["token_logprobs"]), choice["text"])

    def complete_streamed(self, model: str, prompt: str, max_tokens: int) -> Completion:
        body = self._body(model, prompt, max_tokens) | {"stream": True}
        ids: list[int] = []
        lps: list[float] = []
        text = []
        with self.http.stream("POST", f"{self.base}/v1/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choice = json.loads(line[6:])["choices"][0]
                text.append(choice.get("text") or "")
                lp = choice.get("logprobs") or {}
                ids += [_token_id(t) for t in lp.get("tokens") or []]
                lps += [float(x) for x in lp.get("token_logprobs") or []]
        return Completion(prompt, tuple(ids), tuple(lps), "".join(text))

    def collective_rpc(self, method: str) -> list[Any]:
        r = self.http.post(f"{self.base}/collective_rpc", json={"method": method})
        r.raise_for_status()
        return r.json()["results"]

    def metrics(self) -> str:
        r = self.http.get(f"{self.base}/metrics")
        r.raise_for_status()
        return r.text

    def metric(self, name: str) -> float:
        """Sum of a Prometheus counter over its label sets."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def embed(self, model: str, text: str) -> list[float]:
        r = self.http.post(f"{self.base}/v1/embeddings", json={"model": model, "input": text})
        r.raise_for_status()
        return r.json()["data"][0]["embedding"]


def compare(baseline: list[Completion], observed: list[Completion], tolerance: float) -> dict[str, Any]:
    """Token ids must be equal; logprobs within ``tolerance``. Returns the evidence either way."""
    diffs = []
    worst = 0.0
    for base, got in zip(baseline, observed):
        first_id = next((i for i, (a, b) in enumerate(zip(base.token_ids, got.token_ids)) if a != b), None)
        if first_id is None and len(base.token_ids) != len(got.token_ids):
            first_id = min(len(base.token_ids), len(got.token_ids))
        deltas = [abs(a - b) for a, b in zip(base.logprobs, got.logprobs)]
        delta = max(deltas, default=0.0)
        worst = max(worst, delta)
        if first_id is not None or delta > tolerance:
            diffs.append({"prompt": base.prompt, "first_token_mismatch": first_id,
                          "baseline_ids": list(base.token_ids), "observed_ids": list(got.token_ids),
                          "max_logprob_diff": delta})
    equal = not diffs and len(baseline) == len(observed)
    summary = (f"{len(baseline)} prompts equal, max |Δlogprob| {worst:.3g} (tolerance {tolerance:g})" if equal else
               f"{len(diffs)} of {len(baseline)} prompts differ, max |Δlogprob| {worst:.3g} (tolerance {tolerance:g})")
    return {"equal": equal, "max_logprob_diff": worst, "tolerance": tolerance, "summary": summary, "diffs": diffs}


def compare_embeddings(baseline: list[list[float]] | None, observed: list[list[float]], tolerance: float) -> dict[str, Any]:
    """Each prompt's embedding against the PP=1 baseline's: same dimension, every component
    within ``tolerance``. The evidence either way, as a feature check ({"ok", "detail", ...})."""
    dims = sorted({len(v) for v in observed})
    if baseline is None:
        return {"ok": False, "detail": f"no PP=1 baseline to compare with (dimension {dims})"}
    if len(baseline) != len(observed) or any(len(a) != len(b) for a, b in zip(baseline, observed)):
        return {"ok": False, "detail": f"shape differs from the PP=1 baseline: {[len(v) for v in observed]} "
                                       f"vs {[len(v) for v in baseline]}"}
    worst = max((abs(a - b) for va, vb in zip(baseline, observed) for a, b in zip(va, vb)), default=0.0)
    ok = worst <= tolerance and bool(observed) and all(dims)
    return {"ok": ok, "max_abs_diff": worst, "tolerance": tolerance,
            "detail": f"{len(observed)} embeddings of dimension {dims[0] if dims else 0} "
                      f"{'equal' if ok else 'differ from'} PP=1 (max |Δ| {worst:.3g}, tolerance {tolerance:g})"}

"""``kv-transferred``: every P/D case's check that its decode instance received KV over the
connector instead of computing the prompt itself (a pair that recomputed everything answers the
same greedy text, so its outputs alone prove nothing)."""

from __future__ import annotations

from typing import Any

from harness.check.serving.client import Client
from harness.check.serving.live import LiveDeployment

# vLLM 0.32's split of each prompt's tokens by where they came from (v1/metrics/stats.py,
# PromptTokenStats): computed here, a local prefix-cache hit, or received over the KV connector.
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def prompt_sources(*clients: Client) -> dict[str, float]:
    """An instance's prompt tokens so far, per source (summed over its engines and servers: each
    DP rank of a side with external DP serves on its own)."""
    out = dict.fromkeys(SOURCES, 0.0)
    for client in clients:
        for line in client.metrics().splitlines():
            if line.startswith(BY_SOURCE + "{"):
                labels, value = line.rsplit(" ", 1)
                for source in SOURCES:
                    if f'source="{source}"' in labels:
                        out[source] += float(value)
    return out


def kv_transfer_check(live: LiveDeployment, block: int = 128) -> dict[str, Any]:
    """A prompt longer than one KV block (``block``: 128 on the CPU), new to both instances, sent
    through the proxy: the decode instance must receive at least one block of it over the KV
    connector rather than compute it, so a pair whose decode side recomputed everything (the same
    text, no transfer) fails here whatever its outputs."""
    decode, prefill = live.sides.get("decode"), live.sides.get("prefill")
    if not decode or not prefill:
        return {"ok": False, "detail": "not a P/D deployment: no prefill and decode instance to read"}
    prompt = [(11 * i + 3) % 500 + 1 for i in range(block + 72)]
    try:
        d0, p0 = prompt_sources(*decode), prompt_sources(*prefill)
        live.client.complete(live.model_name or "", prompt, 4)
        d1, p1 = prompt_sources(*decode), prompt_sources(*prefill)
    except Exception as err:  # noqa: BLE001 — a failed check is evidence, not a crash
        return {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    moved = d1["external_kv_transfer"] - d0["external_kv_transfer"]
    computed = d1["local_compute"] - d0["local_compute"]
    prefilled = p1["local_compute"] - p0["local_compute"]
    return {
        "ok": moved >= block,
        "detail": f"decode instance, {len(prompt)}-token prompt: {moved:.0f} prompt tokens received over the KV "
        f"connector, {computed:.0f} computed there (the prefill instance computed {prefilled:.0f}); "
        f"{BY_SOURCE} on each instance's /metrics",
    }


CHECK = kv_transfer_check

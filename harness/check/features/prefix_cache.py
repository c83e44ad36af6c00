"""``prefix-cache-hit``: a prompt sent twice must be served from the prefix cache the second time."""

from __future__ import annotations

from typing import Any

from harness.check.serving.live import LiveDeployment


def prefix_cache_check(live: LiveDeployment, block: int = 128) -> dict[str, Any]:
    """A prompt longer than one KV block, sent twice: the repeat must be served from the cache.
    ``block`` is the platform's KV block size (128 on the CPU); a shorter prompt never hits."""
    prompt = [(7 * i) % 500 + 1 for i in range(block + 72)]
    metric = "vllm:prefix_cache_hits_total"
    try:
        before = live.metrics_client.metric(metric)
        first = live.client.complete(live.model_name or "", prompt, 4)
        second = live.client.complete(live.model_name or "", prompt, 4)
        hits = live.metrics_client.metric(metric) - before
    except Exception as err:  # noqa: BLE001 — a failed check is evidence, not a crash
        return {"ok": False, "detail": f"{type(err).__name__}: {err}"}
    same = first.token_ids == second.token_ids
    return {
        "ok": hits >= block and same,
        "detail": f"{hits:.0f} prompt tokens served from the cache on the repeat of a {len(prompt)}-token "
        f"prompt; outputs {'equal' if same else 'differ'}",
    }


CHECK = prefix_cache_check

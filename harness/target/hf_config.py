"""Reading a Hugging Face config.json the way vLLM does where ppconf needs it: the layer count."""

from __future__ import annotations

from typing import Any

# Sub-configs vLLM takes the text model's settings from (its hf_text_config), in that order.
TEXT_CONFIGS = ("text_config", "llm_config", "language_config", "thinker_config")


def layers_in(config: dict[str, Any]) -> int | None:
    for key in TEXT_CONFIGS:
        sub = config.get(key)
        if isinstance(sub, dict):
            found = layers_in(sub)
            if found:
                return found
    n = config.get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

"""Hidden-layer counts the matrix does not state, read from the model's own config.json.

The partition oracle needs a family's ``num_hidden_layers``; a variant without ``hidden_layers``
in the matrix gets it from its checkpoint when ppconf expands a suite:

- ``zoo:NAME``: the tiny model's spec (the config.json ppconf writes for it);
- a local directory holding ``config.json``, or a Hugging Face repo id in the local HF cache;
- else the first node of the cluster, whose own Python reads ``MODEL/config.json`` there (the
  nodes hold the checkpoints; the driver often does not).

The count is what vLLM partitions: the text model's, for multimodal configs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from harness.matrix.schema import Variant
from harness.target.hf_config import TEXT_CONFIGS, layers_in

# Run by a node's Python: prints the count, or nothing when the config is missing or has none.
_NODE_SCRIPT = (
    f"TEXT = {TEXT_CONFIGS!r}\n"
    + r"""
import json, os, sys
def layers_in(c):
    for k in TEXT:
        if isinstance(c.get(k), dict):
            n = layers_in(c[k])
            if n:
                return n
    n = c.get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
try:
    with open(os.path.join(sys.argv[1], "config.json")) as f:
        n = layers_in(json.load(f))
except (OSError, ValueError):
    n = None
print(json.dumps(n))
"""
)


def _local_config(model: str) -> Path | None:
    path = Path(model).expanduser() / "config.json"
    if path.is_file():
        return path
    if model.count("/") == 1 and not model.startswith(("/", ".", "~")):
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            return None
        found = try_to_load_from_cache(model, "config.json")
        if isinstance(found, str):
            return Path(found)
    return None


# How a count is asked of a cluster's first node: ``ask(model)`` -> (the count, or None; why the
# node could not answer, "" when it did; whether it gave no answer at all, so it is not asked
# again). The caller that knows how to reach nodes (``harness.check.serving.stack.layer_counts``) gives
# it; without one, only this host is read.
NodeReader = Callable[[str], tuple[int | None, str, bool]]


class LayerCounts:
    """``counts(variant)`` -> the variant's hidden-layer count, or None when nobody can say.
    Asks each model once. ``network`` is the link type of the cluster the counts come from
    ("unknown" without one): case expansion gives it to rules about the network."""

    def __init__(self, ask_node: NodeReader | None = None, network: str = "unknown", node: str = ""):
        self.ask_node = ask_node
        self.network = network
        self.node = node  # the name of the node ``ask_node`` reads on
        self.where: dict[str, str] = {}  # model -> where its count was read (for messages)
        self._cache: dict[str, int | None] = {}
        self._node_down = ""  # why the first node could not be asked, once it could not

    def __call__(self, variant: Variant) -> int | None:
        if variant.hidden_layers:
            return variant.hidden_layers
        model = variant.model
        if model not in self._cache:
            self._cache[model] = self._read(model)
        return self._cache[model]

    def _read(self, model: str) -> int | None:
        if model.startswith("zoo:"):
            from harness.target.zoo import ZooError, spec_of

            self.where[model] = "the tiny model's spec"
            try:
                return spec_of(model[4:]).num_hidden_layers
            except ZooError as err:
                self.where[model] = f"the tiny model's spec ({err})"
                return None
        path = _local_config(model)
        if path is not None:
            self.where[model] = str(path)
            try:
                return layers_in(json.loads(path.read_text()))
            except (OSError, ValueError):
                return None
        if self.ask_node is None:
            self.where[model] = f"{model}/config.json (not found here)"
            return None
        self.where[model] = f"{model}/config.json on node {self.node}"
        if self._node_down:  # asked once already, and it did not answer: do not wait on it again
            self.where[model] += f" (could not ask it: {self._node_down})"
            return None
        n, why, down = self.ask_node(model)
        if why:
            self.where[model] += f" (could not ask it: {why})"
        if down:
            self._node_down = why
        return n


def node_script(model: str) -> list[str]:
    """The arguments after a node's Python that print ``model``'s count there (or null)."""
    return ["-c", _NODE_SCRIPT, model]


def parse_node_reply(stdout: str) -> int | None:
    try:
        n = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

"""Ask each vLLM worker which pipeline stage it is and which layers it built.

It imports the standard library, torch and vLLM only: ppconf ships this file with every serving
launch as `ppconf_stage_probe.py` in the launch's own directory on its node (first on the
launch's PYTHONPATH), so a node needs nothing of ppconf. Serve with
`--worker-extension-cls ppconf_stage_probe.StageProbe` and `VLLM_SERVER_DEV_MODE=1`, then

    POST /collective_rpc  {"method": "ppconf_stage_info"}

answers `{"results": [info_rank0, info_rank1, ...]}`, one dict per global rank,
from every node (the leader collects the headless nodes' replies too).
`ppconf_stage_timing` then `ppconf_stage_cost` measure each stage's forward
time and peak memory, for the partition-tuning advice.

The layer range is read from the model object the worker really loaded, not
recomputed from the partition rule, so it can check that rule.
"""

from __future__ import annotations

import os
import re
import socket
import time
from typing import Any

import torch

# vLLM mixes the extension class into its worker class and refuses any
# attribute name the worker already has, so the class carries only
# uniquely prefixed methods and the helpers live at module level.

# Per worker process: the forward passes timed since ppconf_stage_timing.
_TIMING: dict[str, float] = {"steps": 0, "seconds": 0.0}


class StageProbe:
    # Given by the vLLM worker this class is mixed into. Annotations only: they create no class
    # attributes, so vLLM's name-conflict check does not see them.
    model_runner: Any
    vllm_config: Any
    rank: int
    local_rank: int

    def ppconf_stage_timing(self) -> dict[str, Any]:
        """Start (or restart) timing this stage's forward passes.

        The model's forward is wrapped on this worker only. The wait for the
        previous stage's activations is taken before the clock starts, so a
        stage's time is its own compute, not its upstream's; the device is
        synchronised before the clock stops.
        """
        model = _loaded_model(self.model_runner)
        original = getattr(model, "_ppconf_forward", None) or model.forward
        model._ppconf_forward = original
        _TIMING.update(steps=0, seconds=0.0)

        def timed(*args, **kwargs):
            tensors = kwargs.get("intermediate_tensors")
            wait = getattr(tensors, "wait_for_comm", None)
            if callable(wait):
                wait()
            t0 = time.perf_counter()
            out = original(*args, **kwargs)
            _synchronize()
            _TIMING["steps"] += 1
            _TIMING["seconds"] += time.perf_counter() - t0
            return out

        model.forward = timed
        return {"rank": self.rank, "timing": True}

    def ppconf_stage_cost(self) -> dict[str, Any]:
        """This worker's forward passes since ppconf_stage_timing, and its peak memory."""
        from vllm.distributed.parallel_state import get_pp_group, get_tp_group

        peak, source = _peak_memory()
        return {
            "rank": self.rank,
            "pp_rank": get_pp_group().rank_in_group,
            "tp_rank": get_tp_group().rank_in_group,
            "steps": int(_TIMING["steps"]),
            "step_s": _TIMING["seconds"] / _TIMING["steps"] if _TIMING["steps"] else None,
            "peak_memory_bytes": peak,
            "memory_source": source,
        }

    def ppconf_stage_memory(self) -> dict[str, Any]:
        """This worker's memory now (sampled over an open-loop phase): device memory allocated,
        or on the CPU the process's resident set."""
        from vllm.distributed.parallel_state import get_pp_group

        return {"rank": self.rank, "pp_rank": get_pp_group().rank_in_group, "memory_bytes": _memory_now()}

    def ppconf_stage_info(self) -> dict[str, Any]:
        """This worker's ranks and the layers it built.

        `start_layer`/`end_layer` are the model's own record (None for models
        without pipeline support, which keep none); `built_layers` lists the
        blocks that are real modules rather than pipeline placeholders.
        `model_runner` is the runner's layout as the probe told it (`"v1"`,
        `"v2"`, or None for one it does not know), `model_runner_class` its class.
        `drafter` says where the speculative-decoding draft model lives: None
        on a worker that holds none, else what this worker built of it.
        `output_modules` says where the embedding, the final norm and the LM
        head were really built (a module, or vLLM's placeholder) and whether the
        LM head shares the embedding's weight.
        `taps` are the target layers a tapping drafter (DSpark) reads, as its
        config names them (`dspark_target_layer_ids`); `aux_layers` the same
        taps in the target model's capture numbering, as the engine derives
        them; `collected_taps` the ones this worker's stack collects (and so
        relays on towards the last stage). `weights_bytes` is what the loaded
        model's parameters hold on this worker, `kv_blocks` the KV-cache blocks
        the engine gave it, `peak_memory_bytes` its peak so far.
        """
        from vllm.distributed.parallel_state import get_pp_group, get_tp_group

        pp, tp = get_pp_group(), get_tp_group()
        config = self.vllm_config
        num_layers = config.model_config.hf_text_config.num_hidden_layers
        model = _loaded_model(self.model_runner)
        stack_path, stack, blocks = _decoder_stack(model, num_layers)
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": config.parallel_config.node_rank,
            "pp_rank": pp.rank_in_group,
            "pp_size": pp.world_size,
            "tp_rank": tp.rank_in_group,
            "tp_size": tp.world_size,
            "num_hidden_layers": num_layers,
            "stack": stack_path,
            "start_layer": _layer_attr(stack, "start_layer"),
            "end_layer": _layer_attr(stack, "end_layer"),
            "built_layers": _built_layers(blocks),
            "output_modules": _output_modules(model, stack_path, stack),
            "model_runner": _runner_version(self.model_runner),
            "model_runner_class": type(self.model_runner).__name__,
            "drafter": _drafter_info(self.model_runner, config),
            "taps": _taps(config),
            "aux_layers": _aux_layers(config),
            "collected_taps": _int_list(getattr(stack, "aux_hidden_state_layers", None)),
            "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "kv_blocks": getattr(config.cache_config, "num_gpu_blocks", None),
            "peak_memory_bytes": _peak_memory()[0],
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    # --- effective configuration (its helpers are at the end of this file) ---

    def ppconf_effective_config(self) -> dict[str, Any]:
        """The configuration this worker runs with, after every override (the platform's
        among them): dotted field -> JSON value for the sections in `EFFECTIVE_SECTIONS`,
        enums by name; with the model runner class it built and the platform's class."""
        config = self.vllm_config
        fields: dict[str, Any] = {}
        for section in EFFECTIVE_SECTIONS:
            flatten_config(getattr(config, section, None), section, fields, 0)
        runner = type(self.model_runner)
        fields["model_runner.class"] = f"{runner.__module__}.{runner.__qualname__}"
        try:
            fields["model_runner.v2"] = bool(config.use_v2_model_runner)
        except Exception:  # noqa: BLE001 - an engine without the property, or one that refuses here
            fields["model_runner.v2"] = None
        from vllm.platforms import current_platform

        fields["platform.class"] = type(current_platform).__name__
        fields["platform.device_name"] = getattr(current_platform, "device_name", None)
        return {"rank": self.rank, "fields": fields}


# Where each of vLLM's model runners keeps what this probe reads. A runner is told by its layout,
# not its class name, so subclasses (the CPU runner, vllm-ascend's) read alike: Model Runner V2
# (vllm/v1/worker/gpu/model_runner.py) always assigns `speculator` (None off the last PP stage or
# without speculative decoding); the V1 runner (vllm/v1/worker/gpu_model_runner.py) always assigns
# `input_batch` and assigns `drafter` on the last stage only. Both load the target model into
# `model`, and their drafters load theirs into `model` too. Checked first to last;
# tests/test_runner_contract.py ties every name to the installed engine's source.
RUNNER_LAYOUTS = {
    "v2": {"marker": "speculator", "drafter": "speculator", "model": "model", "draft_model": "model"},
    "v1": {"marker": "input_batch", "drafter": "drafter", "model": "model", "draft_model": "model"},
}


def _runner_version(model_runner) -> str | None:
    return next((v for v, layout in RUNNER_LAYOUTS.items() if hasattr(model_runner, layout["marker"])), None)


def _loaded_model(model_runner):
    # get_model() strips graph wrappers on runners that add them.
    get = getattr(model_runner, "get_model", None)
    if callable(get):
        return get()
    # a runner of neither layout: try the name both use
    return getattr(model_runner, RUNNER_LAYOUTS[_runner_version(model_runner) or "v1"]["model"])


# Names vLLM models give their list of decoder (or encoder) blocks.
_LAYER_LISTS = ("layers", "layer", "h", "blocks")


def _decoder_stack(model, num_layers: int):
    """The submodule holding the model's blocks: (dotted path, module, blocks).

    Models built with vLLM's make_layers keep `start_layer`/`end_layer` next to
    a `layers` list; draft or vision stacks may have their own lists, so prefer
    one as long as the model's hidden-layer count, and among those one that
    records its pipeline range.
    """
    found = []
    for path, module in model.named_modules():
        for attr in _LAYER_LISTS:
            blocks = getattr(module, attr, None)
            if isinstance(blocks, torch.nn.ModuleList):
                found.append((len(blocks) != num_layers, not hasattr(module, "start_layer"), path, module, blocks))
                break
    if not found:
        return "", None, None
    _, _, path, module, blocks = min(found, key=lambda f: f[:2])
    return path, module, blocks


def _drafter_info(model_runner, config) -> dict[str, Any] | None:
    """The draft model this worker holds, or None.

    `method` is the speculative method, `proposer` the runner's proposer
    class, `tp_size` the drafter's TP size as the engine set it; for drafters that are models (MTP, EAGLE, DSpark ...),
    `model` is the draft model's class, `stack` and `built_layers` its own
    blocks (all `blocks` of them on the stage that holds it, when it is not
    partitioned) and `parameters` the parameter count this worker loaded.
    A proposer without a model (n-gram) has `model` None.
    """
    version = _runner_version(model_runner)
    if version is None:
        return None
    layout = RUNNER_LAYOUTS[version]
    drafter = getattr(model_runner, layout["drafter"], None)
    if drafter is None:
        return None
    spec = getattr(config, "speculative_config", None)
    info: dict[str, Any] = {
        "method": getattr(spec, "method", None),
        "proposer": type(drafter).__name__,
        "tp_size": getattr(getattr(spec, "draft_parallel_config", None), "tensor_parallel_size", None),
        "model": None,
        "stack": "",
        "built_layers": None,
        "blocks": 0,
        "parameters": 0,
    }
    model = getattr(drafter, layout["draft_model"], None)
    if isinstance(model, torch.nn.Module):
        path, _, blocks = _decoder_stack(model, -1)  # a draft stack has its own depth: take the first
        info.update(
            model=type(model).__name__,
            stack=path,
            built_layers=_built_layers(blocks),
            blocks=len(blocks) if blocks is not None else 0,
            parameters=sum(p.numel() for p in model.parameters()),
        )
    return info


# Names vLLM models give the modules around their decoder stack: the embedding and the final norm
# sit beside the blocks, the LM head on a module above them.
_EMBEDDINGS = ("embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embeddings")
_FINAL_NORMS = ("norm", "final_layernorm", "ln_f", "final_norm", "norm_f")
_LM_HEADS = ("lm_head", "output", "embed_out")


def _output_modules(model, stack_path: str, stack) -> dict[str, Any] | None:
    """Where this worker built the target's embedding, final norm and LM head.

    Each is `{"path", "module", "built"}` (`built` False for vLLM's pipeline
    placeholder), or None where the model has no module of a known name;
    `tied` says whether the LM head uses the embedding's weight (False unless
    this worker built both).
    """
    if stack is None:
        return None
    from vllm.model_executor.models.utils import PPMissingLayer

    def found(owner, owner_path: str, names: tuple[str, ...]):
        for name in names:
            module = getattr(owner, name, None)
            if isinstance(module, torch.nn.Module):
                path = f"{owner_path}.{name}" if owner_path else name
                built = not isinstance(module, PPMissingLayer)
                return module, {"path": path, "module": type(module).__name__, "built": built}
        return None, None

    embedding, embedding_info = found(stack, stack_path, _EMBEDDINGS)
    _, norm_info = found(stack, stack_path, _FINAL_NORMS)
    # the LM head hangs on the nearest module above the stack that has one
    head, head_info = None, None
    parts = stack_path.split(".") if stack_path else []
    for depth in range(len(parts) - 1, -1, -1):
        owner_path = ".".join(parts[:depth])
        head, head_info = found(model.get_submodule(owner_path), owner_path, _LM_HEADS)
        if head_info is not None:
            break
    tied = False
    if embedding_info and head_info and embedding_info["built"] and head_info["built"]:
        weight = getattr(head, "weight", None)
        tied = weight is not None and weight is getattr(embedding, "weight", None)
    return {"embedding": embedding_info, "final_norm": norm_info, "lm_head": head_info, "tied": tied}


def _draft_hf_config(config):
    spec = getattr(config, "speculative_config", None)
    return getattr(getattr(spec, "draft_model_config", None), "hf_config", None)


def _taps(config) -> list[int] | None:
    return _int_list(getattr(_draft_hf_config(config), "dspark_target_layer_ids", None))


def _aux_layers(config) -> list[int] | None:
    """The target layers whose hidden states the drafter needs, numbered as the target model
    captures them (vLLM converts each drafter's own numbering)."""
    spec = getattr(config, "speculative_config", None)
    if spec is None:
        return None
    try:
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config

        return _int_list(get_eagle3_aux_layers_from_config(spec))
    except Exception:  # noqa: BLE001 - an engine without this helper: the taps are judged as named
        return None


def _int_list(value) -> list[int] | None:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else None


def _layer_attr(stack, attr: str):
    value = getattr(stack, attr, None)
    return int(value) if value is not None else None


def _built_layers(blocks) -> list[int] | None:
    """Indices of blocks that are real on this worker (others are placeholders)."""
    if blocks is None:
        return None
    from vllm.model_executor.models.utils import PPMissingLayer

    return [i for i, block in enumerate(blocks) if not isinstance(block, PPMissingLayer)]


def _accelerator():
    for name in ("npu", "cuda"):
        mod = getattr(torch, name, None)
        try:
            if mod is not None and mod.is_available():
                return mod
        except Exception:  # noqa: BLE001 - a half-installed backend is no backend
            continue
    return None


def _synchronize() -> None:
    acc = _accelerator()
    if acc is not None:
        acc.synchronize()


def _memory_now() -> int | None:
    acc = _accelerator()
    if acc is not None:
        return int(acc.memory_allocated())
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_memory() -> tuple[int | None, str]:
    """Peak device memory of this worker; on the CPU, the process's peak resident set."""
    acc = _accelerator()
    if acc is not None:
        return int(acc.max_memory_allocated()), f"torch.{acc.__name__.rsplit('.', 1)[-1]}.max_memory_allocated"
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM (peak resident set)"
    except OSError:
        pass
    return None, "unavailable"


# --- effective configuration: flattening the engine's config objects ---

# The VllmConfig sections read back (harness.matrix.effective.CONFIG_SECTIONS names the same).
EFFECTIVE_SECTIONS = (
    "model_config",
    "cache_config",
    "parallel_config",
    "scheduler_config",
    "speculative_config",
    "compilation_config",
    "kv_transfer_config",
    "lora_config",
    "additional_config",
)
# Deeper than this is model internals (a draft model's own config of configs), not settings.
_EFFECTIVE_DEPTH = 3
# A longer list is summarised (capture sizes and the like say nothing of a feature being on).
_EFFECTIVE_LIST = 32
# Names whose values may be secret, or are objects and not settings.
_EFFECTIVE_SKIP = re.compile(
    r"token$|secret|password|api_key|^hf_config$|^hf_text_config$|^static_|^traced_files$|_time$", re.I
)


def flatten_config(value, name: str, out: dict[str, Any], depth: int) -> None:
    """`value` (a config dataclass, pydantic model, dict or plain value) into `out` as dotted names."""
    import dataclasses
    import enum

    children = None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    elif hasattr(value, "model_fields") and not isinstance(value, type):
        children = {k: getattr(value, k, None) for k in type(value).model_fields}
    elif isinstance(value, dict):
        children = {str(k): v for k, v in value.items()}
    if children is not None:
        if depth >= _EFFECTIVE_DEPTH or not children:
            out[name] = None if not children else f"<{type(value).__name__}>"
            return
        for key, child in children.items():
            if not key.startswith("_") and not _EFFECTIVE_SKIP.search(key):
                flatten_config(child, f"{name}.{key}", out, depth + 1)
        return
    if isinstance(value, enum.Enum):
        out[name] = value.name
    elif value is None or isinstance(value, (bool, int, float, str)):
        out[name] = value
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        plain = all(v is None or isinstance(v, (bool, int, float, str)) for v in items)
        out[name] = items if plain and len(items) <= _EFFECTIVE_LIST else f"<{len(items)} items>"
    elif isinstance(value, torch.dtype):
        out[name] = str(value)
    else:  # an object, not a setting
        out[name] = f"<{type(value).__name__}>"

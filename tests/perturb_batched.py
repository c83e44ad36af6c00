"""A fault that shows only when several sequences share an engine step of a pipeline: the last
PP stage's logits are skewed whenever it samples more than one sequence at once. One request at
a time never gives it more than one row, so sequential requests pass; requests in flight together
do not. Used by tests/test_accuracy_e2e.py only.

Loaded into vLLM's workers by ``--worker-extension-cls tests.perturb_batched.BatchedFaultProbe``:
the import patches Qwen3's ``compute_logits`` in the worker process. With PP=1 (the reference)
nothing changes.
"""

from vllm.distributed.parallel_state import get_pp_group
from vllm.model_executor.models import qwen3

from harness.target.worker_probe import StageProbe

_compute_logits = qwen3.Qwen3ForCausalLM.compute_logits


def _patched(self, hidden_states):
    logits = _compute_logits(self, hidden_states)
    if logits is not None and logits.shape[0] > 1 and get_pp_group().world_size > 1:
        logits = logits.clone()
        logits[:, 7] = logits.max(dim=-1).values + 5.0  # token 7 wins every batched pick
    return logits


qwen3.Qwen3ForCausalLM.compute_logits = _patched


class BatchedFaultProbe(StageProbe):
    pass

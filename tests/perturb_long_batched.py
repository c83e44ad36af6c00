"""A fault that shows only with several requests in flight and a long context: the last PP
stage's logits are skewed when it samples more than one sequence in a step in which some
sequence is ``LONG`` tokens or more into its context. One request at a time never gives it two
rows, and several short requests never reach ``LONG``. Used by ``ppconf shrink``'s planted case
(tests/shrink_planted.py).

Loaded into vLLM's workers by ``--worker-extension-cls tests.perturb_long_batched.LongBatchedFaultProbe``:
the import patches Qwen3's ``forward`` (to see the step's positions) and ``compute_logits`` in
the worker process. With PP=1 (the reference) nothing changes.
"""

from vllm.distributed.parallel_state import get_pp_group
from vllm.model_executor.models import qwen3

from harness.target.worker_probe import StageProbe

LONG = 100
_forward = qwen3.Qwen3ForCausalLM.forward
_compute_logits = qwen3.Qwen3ForCausalLM.compute_logits
_step = {"longest": 0}


def _patched_forward(self, input_ids, positions, *args, **kwargs):
    _step["longest"] = int(positions.max()) + 1 if positions is not None and positions.numel() else 0
    return _forward(self, input_ids, positions, *args, **kwargs)


def _patched_logits(self, hidden_states):
    logits = _compute_logits(self, hidden_states)
    if logits is not None and logits.shape[0] > 1 and _step["longest"] >= LONG and get_pp_group().world_size > 1:
        logits = logits.clone()
        logits[:, 7] = logits.max(dim=-1).values + 5.0  # token 7 wins every pick of such a step
    return logits


qwen3.Qwen3ForCausalLM.forward = _patched_forward
qwen3.Qwen3ForCausalLM.compute_logits = _patched_logits


class LongBatchedFaultProbe(StageProbe):
    pass

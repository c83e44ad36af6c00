"""A stage probe that also perturbs the last decoder layer of a pipeline (PP > 1 only), so a test
can show the accuracy check failing for real. Used by tests/test_accuracy_e2e.py only.

Loaded into vLLM's workers by ``--worker-extension-cls tests.perturb.PerturbedStageProbe``: the
import patches Qwen3's decoder layer in the worker process before the model is built. With PP=1
(the reference) nothing changes, so outputs differ exactly when the pipeline is perturbed.
"""

import torch
from vllm.model_executor.models import qwen3

from harness.target.worker_probe import StageProbe

_init = qwen3.Qwen3DecoderLayer.__init__
_forward = qwen3.Qwen3DecoderLayer.forward


def _patched_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    from vllm.config import get_current_vllm_config

    cfg = get_current_vllm_config()
    last = cfg.model_config.hf_text_config.num_hidden_layers - 1
    prefix = kwargs.get("prefix", "")
    self._ppconf_perturb = cfg.parallel_config.pipeline_parallel_size > 1 and prefix.endswith(f".{last}")


def _patched_forward(self, *args, **kwargs):
    hidden, residual = _forward(self, *args, **kwargs)
    if self._ppconf_perturb:
        hidden = hidden + 2.0 * torch.sin(7.0 * hidden)
    return hidden, residual


qwen3.Qwen3DecoderLayer.__init__ = _patched_init
qwen3.Qwen3DecoderLayer.forward = _patched_forward


class PerturbedStageProbe(StageProbe):
    pass

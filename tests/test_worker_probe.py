"""The stage probe's report of where the drafter lives (no server: the probe's helpers on
stand-in runners built from real torch modules and vLLM's own pipeline placeholder)."""

import functools
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow  # importing torch alone takes seconds: not for the fast loop


# torch (which the probe imports too) is imported by the first test, not at collection: every
# `pytest -m "not slow"` collects this module and would pay for it
@functools.cache
def _torch():
    # the probe runs inside vLLM's workers and imports torch itself; without torch there is nothing
    # to test (in CI, where torch is installed, a skip here fails: tests/needs.py)
    return pytest.importorskip("torch")


def _drafter_info(runner, config):
    _torch()
    from harness.target.worker_probe import _drafter_info

    return _drafter_info(runner, config)


@functools.cache
def _draft_class() -> type:
    torch = _torch()

    class Draft(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    return Draft


def Draft(n: int):  # noqa: N802 (stands for the class)
    return _draft_class()(n)


CONFIG = SimpleNamespace(
    speculative_config=SimpleNamespace(method="mtp", draft_parallel_config=SimpleNamespace(tensor_parallel_size=2))
)


def test_a_worker_without_a_drafter_reports_none():
    assert _drafter_info(SimpleNamespace(), CONFIG) is None
    assert _drafter_info(SimpleNamespace(drafter=None), CONFIG) is None


def test_the_stage_holding_the_drafter_reports_its_whole_stack():
    runner = SimpleNamespace(drafter=SimpleNamespace(model=Draft(2)))
    info = _drafter_info(runner, CONFIG)
    assert info["method"] == "mtp" and info["proposer"] == "SimpleNamespace" and info["tp_size"] == 2
    assert info["model"] == "Draft" and info["stack"] == ""
    assert info["built_layers"] == [0, 1]
    assert info["parameters"] == 2 * (4 * 4 + 4)


@pytest.mark.needs_vllm
def test_a_partitioned_drafter_shows_its_placeholders():
    from vllm.model_executor.models.utils import PPMissingLayer

    draft = Draft(3)
    draft.layers[2] = PPMissingLayer()
    info = _drafter_info(SimpleNamespace(drafter=SimpleNamespace(model=draft)), CONFIG)
    assert info["built_layers"] == [0, 1] and info["blocks"] == 3


def test_a_proposer_without_a_model():
    info = _drafter_info(SimpleNamespace(drafter=SimpleNamespace()), SimpleNamespace(speculative_config=None))
    assert info == {
        "method": None,
        "proposer": "SimpleNamespace",
        "tp_size": None,
        "model": None,
        "stack": "",
        "built_layers": None,
        "blocks": 0,
        "parameters": 0,
    }

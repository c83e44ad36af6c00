"""Explicit requests are validated by ppconf's own schema (harness/matrix/requests.py), so a
matrix lints where vLLM is not installed; these tests keep its names equal to the installed
vLLM's: every parameter ppconf accepts is a field of the request model vLLM parses it with, and
every endpoint's path is one vLLM's API server routes. A rename upstream fails here rather than
as a 400 on a cluster."""

import dataclasses
import importlib
from pathlib import Path

import pytest

from harness.matrix.requests import REQUEST_MODELS, StructuredOutputs
from harness.registry import ENDPOINTS

# importing vLLM's protocol modules takes seconds
pytestmark = [pytest.mark.needs_vllm, pytest.mark.slow]


def _vllm_fields(spec: str) -> set[str]:
    module, cls = spec.split(":")
    return set(getattr(importlib.import_module(module), cls).model_fields)


def unknown_names() -> dict[str, list[str]]:
    """Each endpoint's parameters that none of its vLLM request models has."""
    out = {}
    for endpoint, model in REQUEST_MODELS.items():
        if not model.VLLM_MODELS:
            continue
        theirs = set().union(*(_vllm_fields(s) for s in model.VLLM_MODELS))
        mine = {f.alias or name for name, f in model.model_fields.items()} - model.OWN
        if mine - theirs:
            out[endpoint] = sorted(mine - theirs)
    return out


def test_every_parameter_is_a_field_of_the_installed_vllm_request_models():
    assert unknown_names() == {}


def test_structured_outputs_are_spelt_as_vllm_spells_them():
    from vllm.sampling_params import StructuredOutputsParams

    theirs = {f.name for f in dataclasses.fields(StructuredOutputsParams)}
    mine = {f.alias or name for name, f in StructuredOutputs.model_fields.items()}
    assert mine <= theirs, sorted(mine - theirs)


def test_every_endpoint_path_is_routed_by_the_installed_vllm():
    import vllm

    routers = "\n".join(p.read_text() for p in (Path(vllm.__file__).parent / "entrypoints").rglob("api_router.py"))
    missing = [f"{name}: {ENDPOINTS[name].path}" for name in ENDPOINTS if f'"{ENDPOINTS[name].path}"' not in routers]
    assert missing == []


def test_a_name_vllm_does_not_have_is_found(monkeypatch):
    # the check itself can fail: a parameter ppconf would accept that vLLM's model lacks
    from pydantic import create_model

    from harness.matrix.requests import CompletionsRequest

    planted = create_model("Planted", __base__=CompletionsRequest, best_off=(int | None, None))
    monkeypatch.setitem(REQUEST_MODELS, "completions", planted)
    assert unknown_names() == {"completions": ["best_off"]}

"""LoRA in the matrix: the `lora` feature's flags, requests naming an adapter as their `model`
(vLLM's way), a phase sending two adapters and the base model at once, an adapter loaded at run
time by its zoo name, and lint naming a request whose model nothing serves."""

import pytest
from pydantic import ValidationError

from harness.cases.expand import expand
from harness.cases.phases.explicit_concurrent import KIND as AT_ONCE
from harness.cases.workload import workload_problems
from harness.check.requests.generate import COMPLETIONS
from harness.matrix.load import load_matrix
from harness.matrix.requests import CompletionsRequest, LoadLoraAdapterRequest
from harness.matrix.schema import Phase
from harness.plan.resolved import Planner
from harness.target import zoo_lora

SUITE = """\
suites:
  mine:
    title: adapters
    platform: cpu
    max_devices: 1
    workload:
      - kind: {kind}
        explicit: {explicit}
    groups:
      - families: [qwen3-tiny]
        topologies: [pp1-tp1]
        features: [{feature}]
"""


def test_the_lora_feature_gives_vllm_s_flags(shipped):
    args = shipped.features["lora"].args
    for flag in ("--enable-lora", "--lora-modules", "--max-loras", "--max-lora-rank"):
        assert flag in args
    assert not shipped.features["lora"].preserves_output  # adapters change the output: the reference keeps them


def test_a_request_names_its_adapter_as_model_and_the_body_carries_it():
    req = CompletionsRequest(endpoint="completions", prompt="hi", model="lora-a", temperature=0)
    assert COMPLETIONS.body(req, "/base")["model"] == "lora-a"
    assert COMPLETIONS.body(req.model_copy(update={"model": None}), "/base")["model"] == "/base"
    with pytest.raises(ValidationError, match="at least 1 character"):
        CompletionsRequest(endpoint="completions", prompt="hi", model="")


def test_a_misspelt_model_field_is_a_positioned_error(matrix_dir):
    from harness.matrix.source import MatrixError

    matrix_dir(
        "cpu/mine.yaml",
        SUITE.format(kind="explicit", explicit="[{endpoint: completions, prompt: a, modle: x}]", feature="lora"),
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert any("cpu/mine.yaml:8:" in str(e) and "(did you mean 'model'?)" in str(e) for e in err.value.errors)


def test_the_shipped_lora_suites_lint_clean_and_mix_adapters_at_once(shipped):
    cases = expand(shipped, "lora-cpu").cases
    assert sorted(c.topology for c in cases) == ["pp1-tp1", "pp2-tp1-mp"]
    for case in [*cases, *expand(shipped, "lora-base-mixed-cpu").cases]:
        assert [e.message for e in workload_problems(shipped, case)] == []

    def models(suite, phase):
        (p,) = [p for p in shipped.suites[suite].workload or [] if p.label == phase]
        assert p.kind == "explicit-concurrent" and AT_ONCE.plan(p, 2).in_flight == len(p.explicit or [])
        return {getattr(r, "model", None) for r in p.explicit or []}

    assert models("lora-cpu", "adapters-mixed") == {"lora-a", "lora-b"}
    assert models("lora-base-mixed-cpu", "base-and-adapters") == {None, "lora-a", "lora-b"}


def test_an_adapter_loaded_at_run_time_is_planned_with_its_zoo_path(shipped):
    planner = Planner(shipped, None)
    case = next(c for c in expand(shipped, "lora-cpu").cases if c.topology == "pp1-tp1")
    (loaded,) = [p for p in planner.resolved(case).phases if p.name == "adapter-loaded"]
    load = loaded.explicit[0]
    assert isinstance(load, LoadLoraAdapterRequest)
    assert load.lora_path == str(zoo_lora.adapter_dir("qwen3-tiny", "b"))
    assert "qwen3-tiny#lora-a" in planner.zoo_models([case]) and "qwen3-tiny#lora-b" in planner.zoo_models([case])


def test_lint_names_a_request_whose_model_nothing_serves(matrix_dir):
    explicit = (
        "[{endpoint: completions, name: q, prompt: a, temperature: 0, model: lora-c},"
        " {endpoint: load-lora-adapter, lora_name: lora-c, lora_path: 'adapter:a'},"
        " {endpoint: completions, name: r, prompt: a, temperature: 0, model: lora-c}]"
    )
    matrix_dir("cpu/mine.yaml", SUITE.format(kind="explicit", explicit=explicit, feature="lora"))
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    problems = [(str(e.where), e.message) for e in workload_problems(m, case)]
    assert any(
        "request q names model 'lora-c', not served then (lora-a, lora-b)" in msg and "cpu/mine.yaml:7" in where
        for where, msg in problems
    ), problems
    assert not any("request r" in msg for _, msg in problems)  # loaded by then


def test_an_explicit_concurrent_phase_refuses_control_requests_and_needs_two_running():
    phase = Phase.model_validate(
        {
            "kind": "explicit-concurrent",
            "explicit": [
                {"endpoint": "completions", "prompt": "a", "temperature": 0},
                {"endpoint": "completions", "prompt": "b", "temperature": 0, "model": "lora-a"},
                {"endpoint": "reset-prefix-cache", "name": "reset"},
            ],
        }
    )
    assert any("reset: sent at once" in p for p in AT_ONCE.lint(phase, None))
    plan = AT_ONCE.plan(phase, 1)
    assert "no sign of two requests running at once" in AT_ONCE.not_exercised(plan, {"peak_running": 1.0})
    assert AT_ONCE.not_exercised(plan, {"peak_running": 2.0}) is None

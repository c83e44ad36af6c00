"""Claimed rejections launched without their weights (harness.plan.weights): which launches go
dummy first, what their argv becomes, and the runner's verdicts — a matching refusal is XFAIL
with the evidence that no weight was loaded; anything else is judged on the real weights. The
launches here are observed by a stand-in for the observer (the real run is in the report of
issue 36: smoke-cpu's rejection claims with and without dummy weights)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.cases.expand import expand, select
from harness.launch import Deployment, LaunchSpec
from harness.matrix.load import load_matrix
from harness.matrix.schema import Rule
from harness.outcomes import Outcome
from harness.plan import weights
from harness.results.result import Observation
from tests.trial_launch import refused, run_one

RAY = "qwen3-tiny/pp2-tp1-ray/auto/none"  # claimed refused at startup
PARTITION = "qwen3-tiny/pp2-tp1-mp/1,2/none"  # claimed refused at startup, before the weights
CONFIG = "bert-tiny/pp2-tp1-mp/auto/none"  # claimed refused at config
SERVED = "qwen3-tiny/pp2-tp1-mp/auto/none"


def claims(m, *ids):
    return [c.expectation for c in select(expand(m, "smoke-cpu").cases, ids=list(ids))]


def test_which_claims_launch_without_weights_first(shipped):
    assert weights.dummy_first(claims(shipped, RAY))
    assert weights.dummy_first(claims(shipped, PARTITION))  # reads none either way, and none if it is wrong
    assert not weights.dummy_first(claims(shipped, CONFIG))  # refused before anything is built
    assert not weights.dummy_first(claims(shipped, SERVED))
    assert not weights.dummy_first(claims(shipped, RAY, SERVED))  # one launch: the served case needs them
    (ray,) = claims(shipped, RAY)
    assert not weights.dummy_first([ray.model_copy(update={"needs_weights": True})])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"expect": "supported", "needs_weights": True}, "needs_weights only apply to expect: rejected"),
        ({"expect": "rejected", "phase": "config", "before_weights": True}, "before_weights only applies to phase"),
        (
            {"expect": "rejected", "phase": "startup", "before_weights": True, "needs_weights": True},
            "contradict",
        ),
    ],
)
def test_weight_fields_are_refused_where_they_mean_nothing(fields, message):
    base = {"when": "pp > 1", "why": "w", "error": "e"} if fields["expect"] == "rejected" else {"when": "pp > 1"}
    with pytest.raises(ValidationError, match=message):
        Rule(**({"why": "w"} | base | fields))


def _deployment(*launches: tuple[str, tuple[str, ...]]) -> Deployment:
    specs = tuple(LaunchSpec(f"l{i}", role, "n0", "localhost", argv, ()) for i, (role, argv) in enumerate(launches))
    return Deployment(("c",), specs, "l0")


def test_every_launch_that_loads_weights_loads_dummy_ones():
    d = _deployment(
        ("api", ("vllm", "serve", "/m", "--load-format", "safetensors", "--seed", "0")),
        ("headless", ("vllm", "serve", "/m", "--load-format=auto", "--headless")),
        ("ray-worker", ("ray", "start", "--block")),
        ("proxy", ("python3", "proxy.py")),
    )
    assert not weights.loads_dummy(d)
    out = weights.without_weights(d)
    assert out.launches[0].argv == ("vllm", "serve", "/m", "--seed", "0", "--load-format", "dummy")
    assert out.launches[1].argv == ("vllm", "serve", "/m", "--headless", "--load-format", "dummy")
    assert out.launches[2:] == d.launches[2:]  # nothing there loads weights
    assert weights.loads_dummy(out) and weights.without_weights(out) == out


REFUSED = "(EngineCore pid=1) ERROR ValueError: current platform cpu does not support ray"


def _refused() -> Observation:
    return refused("ValueError", REFUSED, engine_started=True)


def _run(tmp_path, monkeypatch, m, answers):
    """A run of the ray case whose launches are observed by ``answers`` in turn; returns its
    result and the launches made (dummy weights or not)."""
    return run_one(tmp_path, monkeypatch, m, RAY, answers, "dummy_weights", weights.without_weights)


def test_a_matching_refusal_with_dummy_weights_is_xfail_saying_so(tmp_path, monkeypatch, shipped):
    result, launches = _run(tmp_path, monkeypatch, shipped, [_refused])
    assert launches == [True]  # one launch, without the weights
    assert result.outcome is Outcome.XFAIL and weights.NOTE in result.observation.notes
    assert ("--load-format", "dummy") == result.deployment.launches[0].argv[-2:]


def test_an_acceptance_with_dummy_weights_is_judged_on_the_real_ones(tmp_path, monkeypatch, shipped):
    accepted = lambda: Observation(ready=True, ready_s=3.0)  # noqa: E731
    result, launches = _run(tmp_path, monkeypatch, shipped, [accepted, _refused])
    assert launches == [True, False]
    assert result.outcome is Outcome.XFAIL and weights.NOTE not in result.observation.notes
    assert any("with dummy weights" in n and "judged on the real weights" in n for n in result.observation.notes)
    assert "dummy" not in result.deployment.launches[0].argv


def test_a_claim_that_needs_its_weights_is_launched_with_them(tmp_path, monkeypatch):
    matrices = tmp_path / "matrices"
    shutil.copytree(Path(__file__).parents[1] / "matrices", matrices)
    rules = matrices / "cpu" / "rules.yaml"
    text = rules.read_text()
    marker = "    why: The CPU platform has no Ray executor"
    assert marker in text
    rules.write_text(text.replace(marker, "    needs_weights: true\n" + marker, 1))
    result, launches = _run(tmp_path, monkeypatch, load_matrix(matrices), [_refused])
    assert launches == [False] and result.outcome is Outcome.XFAIL
    assert weights.NOTE not in result.observation.notes and "dummy" not in result.deployment.launches[0].argv

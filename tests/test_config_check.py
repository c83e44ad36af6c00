"""Claimed configuration refusals checked without a server (harness.plan.config_check): which
launches are checked that way, the argv that builds the configuration in the node's Python, and
the runner's verdicts (a matching refusal is XFAIL saying how it was checked; anything else is
judged on a real launch). The real check runs in CI's smoke run (bert-tiny at PP 2) and in
tests/test_config_check_e2e.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.cases.expand import expand, select
from harness.launch import Deployment, LaunchSpec
from harness.outcomes import Outcome
from harness.plan import config_check
from harness.results.result import Observation
from tests.trial_launch import refused, run_one

CONFIG = "bert-tiny/pp2-tp1-mp/auto/none"  # claimed refused at config
RAY = "qwen3-tiny/pp2-tp1-ray/auto/none"  # claimed refused at startup
SERVED = "qwen3-tiny/pp2-tp1-mp/auto/none"


def claims(m, *ids):
    return [c.expectation for c in select(expand(m, "smoke-cpu").cases, ids=list(ids))]


def test_only_launches_whose_every_claim_is_a_config_refusal_are_checked_without_a_server(shipped):
    assert config_check.config_first(claims(shipped, CONFIG))
    assert not config_check.config_first(claims(shipped, RAY))
    assert not config_check.config_first(claims(shipped, SERVED))
    assert not config_check.config_first(claims(shipped, CONFIG, SERVED))
    assert not config_check.config_first([])


@pytest.mark.parametrize(
    ("argv", "python"),
    [
        (("/v/bin/python", "-m", "harness.target.vllm_cpu", "serve", "/m", "--seed", "0"), "/v/bin/python"),
        (("/opt/venv/bin/vllm", "serve", "/m", "--seed", "0"), "/opt/venv/bin/python"),
        (("vllm", "serve", "/m", "--seed", "0"), "python3.11"),  # the node's Python
        (("numactl", "-N", "0", "vllm", "serve", "/m", "--seed", "0"), "python3.11"),
    ],
)
def test_the_check_runs_the_same_arguments_in_the_python_of_that_vllm(argv, python):
    out = config_check.check_argv(argv, "python3.11")
    at = out.index("-c")
    assert out[at - 1] == python and out[at + 1] == config_check.SCRIPT
    assert out[at + 2 :] == ("serve", "/m", "--seed", "0")  # vLLM's own parser reads them as given
    assert out[: at - 1] == (("numactl", "-N", "0") if argv[0] == "numactl" else ())


def test_the_script_is_fixed_text_and_compiles():
    compile(config_check.SCRIPT, "<config-check>", "exec")
    assert "/m" not in config_check.SCRIPT  # matrix values reach it only as arguments


def test_launches_that_serve_nothing_are_left_out_and_the_api_is_a_checked_launch():
    launches = (
        LaunchSpec("p", "prefill", "n0", "h", ("vllm", "serve", "/m", "--port", "1"), (("A", "1"),), port=1),
        LaunchSpec("d", "decode", "n1", "h", ("vllm", "serve", "/m", "--port", "2"), (), port=2),
        LaunchSpec("proxy", "proxy", "n0", "h", ("python3", "proxy.py"), (), port=3),
    )
    out = config_check.config_only(Deployment(("c",), launches, "proxy"), {"n0": "py0", "n1": "py1"}.__getitem__)
    assert [s.name for s in out.launches] == ["p", "d"] and out.api == "p"
    assert out.launches[0].argv[:3] == ("py0", "-c", config_check.SCRIPT) and out.launches[1].argv[0] == "py1"
    assert out.launches[0].env == (("A", "1"),)  # the launch's environment is kept: it shapes the config
    with pytest.raises(ValueError, match="no launch that serves"):
        config_check.config_only(Deployment(("c",), launches[2:], "proxy"), str)


def test_the_script_builds_nothing_without_vllm_and_says_so():
    """Run with a Python that has no vLLM: it fails at the import (a failure, never the note
    that the configuration was built)."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", config_check.SCRIPT, "serve", "/m"], capture_output=True, text=True
    )
    assert out.returncode != 0 and config_check.BUILT not in out.stdout


REFUSED = "NotImplementedError: Pipeline parallelism is not supported for this model."


def _refused() -> Observation:
    return refused("NotImplementedError", REFUSED)


def _run(tmp_path, monkeypatch, m, answers):
    replan = lambda d: config_check.config_only(d, lambda node: "python3")  # noqa: E731
    return run_one(tmp_path, monkeypatch, m, CONFIG, answers, "check_config", replan)


def test_a_matching_refusal_without_a_server_is_xfail_saying_how(tmp_path, monkeypatch, shipped):
    result, launches = _run(tmp_path, monkeypatch, shipped, [_refused])
    assert launches == [True]
    assert result.outcome is Outcome.XFAIL and config_check.NOTE in result.observation.notes
    assert config_check.SCRIPT in result.deployment.launches[0].argv


def test_a_configuration_that_builds_is_judged_on_a_real_launch(tmp_path, monkeypatch, shipped):
    built = lambda: Observation(exit_codes={"node0-api": 0}, failed_after_s=4.0, failed_phase="startup")  # noqa: E731
    result, launches = _run(tmp_path, monkeypatch, shipped, [built, _refused])
    assert launches == [True, False]
    assert result.outcome is Outcome.XFAIL and config_check.NOTE not in result.observation.notes
    assert any("as a configuration check" in n and "judged on a real launch" in n for n in result.observation.notes)
    assert config_check.SCRIPT not in result.deployment.launches[0].argv


def test_a_wrong_claim_fails_on_the_real_launch(tmp_path, monkeypatch, shipped):
    built = lambda: Observation(exit_codes={"node0-api": 0}, failed_after_s=4.0, failed_phase="startup")  # noqa: E731
    ready = lambda: Observation(ready=True, ready_s=3.0)  # noqa: E731
    result, launches = _run(tmp_path, monkeypatch, shipped, [built, ready])
    assert launches == [True, False] and result.outcome is Outcome.UNEXPECTED_ACCEPT

"""Sleep mode in the matrix: the `sleep-mode` feature's flag, env and effective field; the CPU's
claim (refused while vLLM builds its configuration, no server); the Ascend claim with its
sleep, wake-up and requests after waking; and lint refusing a sleep or wake-up request on a
deployment without sleep mode, where the request is written (the matrix file or a file of
requests). The real configuration check is in tests/test_config_check_e2e.py."""

from harness.cases.expand import expand
from harness.cases.workload import workload_problems
from harness.check.requests.control import SLEEP, WAKE_UP
from harness.matrix.effective import parse_requirements
from harness.matrix.load import load_matrix
from harness.matrix.requests import SleepRequest

SUITE = """\
suites:
  mine:
    title: sleep
    platform: cpu
    max_devices: 1
    workload:
      - kind: explicit
        explicit: {explicit}
    groups:
      - families: [qwen3-tiny]
        topologies: [pp1-tp1]
        features: [{feature}]
"""

REQUESTS = """\
requests:
  - {name: before, endpoint: completions, prompt: a, temperature: 0}
  - {name: nap, endpoint: sleep, level: 1}
  - {name: up, endpoint: wake-up}
"""


def test_the_feature_gives_the_flag_the_dev_endpoints_and_the_field_it_reads_back(shipped):
    f = shipped.features["sleep-mode"]
    assert f.args == ["--enable-sleep-mode"]
    assert f.env["VLLM_SERVER_DEV_MODE"] == "1"  # /sleep and /wake_up are development endpoints
    assert f.env["VLLM_ASCEND_ENABLE_NZ"] == "0"  # vllm-ascend's wake-up refuses FRACTAL_NZ weights
    assert [(r.field, r.value) for r in parse_requirements(f.effective)] == [("model_config.enable_sleep_mode", True)]
    assert not f.preserves_output  # the reference must sleep and wake too: it keeps the feature


def test_the_cpu_claims_a_refusal_while_the_configuration_is_built(shipped):
    (case,) = [c for c in expand(shipped, "features-cpu").cases if c.features == ("sleep-mode",)]
    e = case.expectation
    assert (e.kind, e.phase, e.error) == ("rejected", "config", "Sleep mode is not supported on current platform.")


def test_ascend_claims_sleep_and_wake_with_pp_and_compares_the_answers_after_waking(shipped):
    cases = [c for c in expand(shipped, "release-ascend").cases if "sleep-mode" in c.features]
    assert {c.family for c in cases} == {"deepseek-v4", "deepseek-v4.1", "glm-5.2", "minimax-m3", "qwen3.6", "kimi-k3"}
    for case in cases:
        assert case.expectation.kind == "supported" and case.expectation.undocumented
        assert [e.message for e in workload_problems(shipped, case)] == []
    rule = shipped.rules[cases[0].expectation.rule].rule
    (phase,) = [p for p in rule.workload or [] if p.kind == "explicit"]
    endpoints = [r.endpoint for r in phase.explicit or []]
    assert endpoints[endpoints.index("sleep") + 1] == "wake-up"
    assert [r.level for r in phase.explicit or [] if isinstance(r, SleepRequest)] == [1]
    after = endpoints[endpoints.index("wake-up") + 1 :]
    assert after and all(e in ("completions", "chat") for e in after)


def test_sleep_and_wake_up_are_sent_where_vllm_reads_them():
    assert (SLEEP.path, WAKE_UP.path) == ("/sleep", "/wake_up")
    req = SleepRequest(endpoint="sleep", level=1)
    assert SLEEP.params(req) == {"level": 1} and SLEEP.body(req, "/m") is None


def test_lint_refuses_a_sleep_request_on_a_deployment_without_sleep_mode_where_it_is_written(matrix_dir):
    explicit = "[{endpoint: completions, prompt: a, temperature: 0}, {endpoint: sleep, level: 1}, {endpoint: wake-up}]"
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit=explicit, feature="prefix-caching"))
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    problems = [(str(e.where), e.message) for e in workload_problems(m, case)]
    slept = [(w, msg) for w, msg in problems if "without sleep mode" in msg]
    assert len(slept) == 2, problems
    (where, msg), (where2, msg2) = slept
    # the line of the phase's `explicit:`, the column of each request's endpoint value
    assert where.startswith("matrices/cpu/mine.yaml:8:") and where2.startswith("matrices/cpu/mine.yaml:8:")
    assert int(where.rsplit(":", 1)[1]) < int(where2.rsplit(":", 1)[1])
    assert "endpoint 'sleep'" in msg and "endpoint 'wake-up'" in msg2
    assert "the deployment runs without sleep mode (--enable-sleep-mode" in msg


def test_lint_names_the_line_of_the_request_in_its_file(matrix_dir):
    matrix_dir("cpu/requests/naps.yaml", REQUESTS)
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit="requests/naps.yaml", feature="prefix-caching"))
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    slept = [(str(e.where), e.message) for e in workload_problems(m, case) if "without sleep mode" in e.message]
    file = "matrices/cpu/requests/naps.yaml"
    assert [w.rsplit(":", 1)[0] for w, _ in slept] == [f"{file}:3", f"{file}:4"]
    assert "request nap is endpoint 'sleep'" in slept[0][1] and "request up is endpoint 'wake-up'" in slept[1][1]


def test_with_the_feature_the_requests_lint_clean(matrix_dir):
    matrix_dir("cpu/requests/naps.yaml", REQUESTS)
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit="requests/naps.yaml", feature="sleep-mode"))
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    assert not [e for e in workload_problems(m, case) if "sleep mode" in e.message]


def test_ppconf_lint_reports_it_on_a_served_case_with_the_file_and_line(matrix_dir):
    from harness.cases.lint import lint

    matrix_dir("cpu/requests/naps.yaml", REQUESTS)
    text = SUITE.format(explicit="requests/naps.yaml", feature="prefix-caching")
    matrix_dir("cpu/mine.yaml", text.replace("max_devices: 1", "max_devices: 2").replace("pp1-tp1", "pp2-tp1-mp"))
    report = lint(load_matrix(matrix_dir.root))
    found = [f"{e.where}: {e.message}" for e in report.errors if "without sleep mode" in e.message]
    assert len(found) == 2, report.errors
    assert found[0].startswith("matrices/cpu/requests/naps.yaml:3:") and "request nap is endpoint 'sleep'" in found[0]

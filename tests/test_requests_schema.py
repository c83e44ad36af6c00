"""Explicit requests in a matrix: vLLM's parameter names, validated at load with positions (in
the matrix file, or in the file of requests beside it), planned with their names, and linted for
what cannot be compared."""

import pytest
from pydantic import ValidationError

from harness.cases.expand import expand
from harness.cases.workload import plan_phase, workload_of, workload_problems
from harness.matrix.load import load_matrix
from harness.matrix.requests import REQUEST_MODELS
from harness.matrix.schema import Phase
from harness.matrix.source import MatrixError
from harness.registry import ENDPOINTS

SUITE = """\
suites:
  mine:
    title: explicit requests
    platform: cpu
    max_devices: 2
    workload:
      - kind: explicit
        explicit: {explicit}
    groups:
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp]
"""


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


def test_every_endpoint_of_the_schema_has_a_sender_and_a_rule():
    assert set(REQUEST_MODELS) == set(ENDPOINTS)
    for name in ENDPOINTS:
        assert ENDPOINTS[name].path.startswith("/"), name


def test_requests_of_each_kind_load_and_plan_with_their_names():
    phase = Phase.model_validate(
        {
            "kind": "explicit",
            "explicit": [
                {"endpoint": "completions", "prompt": [5, 6, 7], "n": 2, "seed": 3, "temperature": 0.7, "logprobs": 2},
                {"endpoint": "chat", "name": "ask", "messages": [{"role": "user", "content": "hi"}], "temperature": 0},
                {"endpoint": "embeddings", "input": "a text"},
                {"endpoint": "score", "text_1": "a", "text_2": ["b", "c"]},
                {"endpoint": "rerank", "query": "q", "documents": ["x", "y"]},
                {"endpoint": "classify", "input": ["a", "b"]},
                {"endpoint": "tokenize", "prompt": "x"},
                {"endpoint": "reset-prefix-cache"},
                {"endpoint": "load-lora-adapter", "lora_name": "a", "lora_path": "/x"},
                {"endpoint": "unload-lora-adapter", "lora_name": "a"},
                {"endpoint": "sleep", "level": 1},
                {"endpoint": "wake-up"},
                {
                    "endpoint": "completions",
                    "prompt": "j",
                    "temperature": 0,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "p", "schema": {"type": "object"}},
                    },
                },
            ],
        }
    )
    plan = plan_phase(phase, 2)
    names = [r.name for r in plan.explicit]
    assert names[:3] == ["explicit:0", "ask", "explicit:2"]
    assert plan.longest() == 3 + 16  # token ids and ppconf's default max_tokens
    body = plan.explicit[0].body()
    assert body == {"prompt": [5, 6, 7], "n": 2, "seed": 3, "temperature": 0.7, "logprobs": 2, "max_tokens": 16}
    # OpenAI's spelling of the schema, as sent
    assert plan.explicit[-1].body()["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert plan.to_json()["explicit"][1]["name"] == "ask"
    assert plan.explicit[9].body() == {"lora_name": "a"}


@pytest.mark.parametrize(
    "request_yaml, where, message",
    [
        (
            "[{endpoint: completions, prompt: hi, tempreature: 0}]",
            ":8:",
            "unknown key 'tempreature' (did you mean 'temperature'?)",
        ),
        ("[{endpoint: complete, prompt: hi}]", ":8:", "(did you mean 'completions'?)"),
        ("[{endpoint: chat, messages: [{role: usr, content: x}]}]", ":8:", "(did you mean 'user'?)"),
        ("[{endpoint: completions, prompt: hi, n: 0}]", ":8:", "greater than or equal to 1"),
        ("[{endpoint: tokenize}]", ":8:", "names a prompt or messages"),
        ("[{endpoint: rerank, query: q, documents: x, top_n: 1, stop: a}]", ":8:", "unknown key 'stop'"),
    ],
)
def test_a_misspelt_or_bad_request_is_a_positioned_error(matrix_dir, request_yaml, where, message):
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit=request_yaml))
    errs = errors_of(matrix_dir.root)
    assert any("cpu/mine.yaml" + where in e and message in e for e in errs), errs


def test_a_file_of_requests_is_read_beside_its_matrix_file_with_positions_in_it(matrix_dir):
    matrix_dir(
        "cpu/requests/mine.yaml",
        """\
        requests:
          - {endpoint: completions, prompt: hi, temperature: 0}
          - endpoint: chat
            messages: [{role: user, content: x}]
            top_kk: 2
        """,
    )
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit="requests/mine.yaml"))
    errs = errors_of(matrix_dir.root)
    assert any(
        "cpu/mine.yaml:8:" in e
        and "cpu/requests/mine.yaml:5:5: requests.1.top_kk: unknown key 'top_kk'" in e
        and "did you mean 'top_k'" in e
        for e in errs
    ), errs


def test_a_file_of_requests_loads_and_a_missing_one_is_named(matrix_dir):
    matrix_dir("cpu/requests/mine.yaml", "requests:\n  - {endpoint: tokenize, prompt: hi}\n")
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit="requests/mine.yaml"))
    m = load_matrix(matrix_dir.root)
    (phase,) = m.suites["mine"].workload or []
    assert [r.endpoint for r in phase.explicit or []] == ["tokenize"]
    matrix_dir("cpu/mine.yaml", SUITE.format(explicit="requests/other.yaml"))
    errs = errors_of(matrix_dir.root)
    assert any("cpu/mine.yaml:8:" in e and "requests/other.yaml not found" in e for e in errs), errs


def test_explicit_requests_belong_to_the_explicit_kind_only():
    with pytest.raises(ValidationError, match="generates its requests"):
        Phase.model_validate({"kind": "concurrent", "explicit": [{"endpoint": "tokenize", "prompt": "x"}]})
    from harness.cases.phases.explicit import KIND

    assert KIND.lint(Phase(kind="explicit"), None) == ["an explicit phase names its requests in `explicit`"]


def test_lint_refuses_what_cannot_be_compared(shipped, matrix_dir):
    matrix_dir(
        "cpu/mine.yaml",
        SUITE.format(
            explicit="[{endpoint: completions, prompt: a}, {endpoint: chat, name: x, temperature: 0.5,"
            " messages: [{role: user, content: b}]}, {endpoint: completions, prompt: c, temperature: 1, seed: 1},"
            " {endpoint: tokenize, name: x, prompt: d}]"
        ),
    )
    m = load_matrix(matrix_dir.root)
    (case,) = expand(m, "mine").cases
    problems = [e.message for e in workload_problems(m, case)]
    assert any(
        "request explicit:0 (completions): temperature unset (the server samples at 1) with no seed" in p
        for p in problems
    )
    assert any("request x (chat): temperature 0.5 with no seed" in p for p in problems)
    assert not any("explicit:2" in p for p in problems)  # seeded: repeatable
    assert any("request names must be unique in a phase: x" in p for p in problems)


def test_the_shipped_request_kinds_lint_clean_on_smokes_auto_case(shipped):
    (case,) = [c for c in expand(shipped, "smoke-cpu").cases if c.id == "qwen3-tiny/pp2-tp1-mp/auto/none"]
    assert [e.message for e in workload_problems(shipped, case)] == []
    phases = [p for p in workload_of(shipped, case) if p.kind == "explicit"]
    assert [p.name for p in phases] == [None, "compare-two-settings", "vllm-ascend-pp"]
    kinds = {r.endpoint for r in phases[0].explicit or []}
    assert {"completions", "chat", "tokenize", "reset-prefix-cache"} <= kinds

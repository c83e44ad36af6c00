"""Hypothesis feeds generated results.jsonl and run.json to report, diff and signoff: each
answers with output (exit 0 or 1) or one clean error line (exit 2), never a traceback."""

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.matrix.load import DEFAULT_MATRICES
from harness.results.result import RecordError, Result
from tests.records import record

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["PASS", "BAD_REJECT", "2026-13-01", "\n", "../../etc/x"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
FIELDS = [
    "case",
    "suite",
    "family",
    "variant",
    "topology",
    "partition",
    "platform",
    "features",
    "expectation",
    "outcome",
    "reason",
    "observation",
    "deployment",
    "versions",
    "started",
    "duration_s",
    "diagnosis",
    "repro",
]
OBSERVATION = [
    "root_cause",
    "expected_error_line",
    "logs",
    "partition",
    "accuracy",
    "tuning",
    "feature_checks",
    "notes",
    "ready_s",
]


@st.composite
def records(draw):
    """A plausible record with a few fields replaced, dropped, or nested values made up."""
    rec = record(
        draw(st.sampled_from(["a/pp2/auto/none", "b/pp2/1,4/none", "a/pp2/auto/x"])),
        draw(st.sampled_from(["PASS", "FAIL", "XFAIL", "BAD_REJECT", "SKIP", "KNOWN_ISSUE", "ERROR"])),
        kind=draw(st.sampled_from(["supported", "rejected", "known-issue", "unspecified"])),
    )
    rec["observation"] = {"root_cause": {"log": "api", "line": 1, "text": "ValueError: x"}, "logs": {"api": "x.log"}}
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(FIELDS))
        if draw(st.booleans()):
            rec.pop(name, None)
        else:
            rec[name] = draw(JSON)
    if draw(st.booleans()) and isinstance(rec.get("observation"), dict):
        rec["observation"][draw(st.sampled_from(OBSERVATION))] = draw(JSON)
    return rec


META = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "suite": st.one_of(st.sampled_from(["smoke-cpu", "gone"]), JSON),
            "matrices": st.sampled_from(
                [
                    str(DEFAULT_MATRICES),
                    [str(DEFAULT_MATRICES)],
                    "/nonexistent/m",
                    None,
                    3,
                    [str(DEFAULT_MATRICES), str(DEFAULT_MATRICES)],
                ]
            ),
            "started": st.one_of(st.sampled_from(["2026-11-30T20:00:00+00:00", "never"]), JSON),
            "versions": st.one_of(st.just({"n1": {"vllm": "0.32.0"}}), JSON),
            "pid": JSON,
        },
    ),
)


def lines(recs):
    return "".join(json.dumps(r) + "\n" for r in recs)


@pytest.mark.slow  # over 1 s: each example runs report, diff and signoff
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    run=st.lists(records(), max_size=4),
    base=st.lists(records(), max_size=3),
    meta=META,
    junk=st.sampled_from(["", "not json\n", '{"case": "torn']),
)
def test_report_diff_and_signoff_answer_or_fail_cleanly(run, base, meta, junk):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, base_dir = Path(tmp) / "run", Path(tmp) / "base"
        run_dir.mkdir()
        base_dir.mkdir()
        (run_dir / "results.jsonl").write_text(lines(run) + junk)
        (base_dir / "results.jsonl").write_text(lines(base))
        if meta is not None:
            (run_dir / "run.json").write_text(json.dumps(meta))
        for argv in (
            ["report", str(run_dir), "--out", str(Path(tmp) / "out")],
            ["diff", str(run_dir), str(base_dir)],
            ["signoff", str(run_dir), "--baseline", str(base_dir)],
        ):
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = main(argv)  # an exception here is the traceback a user would see
            assert code in (0, 1, 2), argv
            if code == 2:
                assert len(err.getvalue().strip().splitlines()) == 1 and err.getvalue().startswith("error: "), err


@settings(max_examples=200, deadline=None)
@given(rec=records())
def test_every_record_that_loads_is_written_back_as_it_loads(rec):
    """Result.from_json(r.to_json()) is r, for any record that loads (JSON text compared: a NaN
    kept among unknown keys is not equal to itself)."""
    try:
        r = Result.from_json(rec)
    except RecordError:
        return
    out = r.to_json()
    again = Result.from_json(out)
    assert json.dumps(again.to_json(), sort_keys=True) == json.dumps(out, sort_keys=True)
    assert again.outcome is r.outcome and again.expectation.kind is r.expectation.kind

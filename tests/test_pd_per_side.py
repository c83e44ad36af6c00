"""Per-instance features on a P/D pair: an eager prefill and a graph-mode decode are one case
(eager and graph mode are exclusive on one instance, not across the pair), each launch gets its
own side's flags, and each side is judged on the features it runs — a graph-mode downgrade in
the decode's log fails the claim, the prefill's eager engine is no downgrade — from its own
engine's configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.check.effective.read import judge_case, read
from harness.check.observe import silent_disables
from harness.check.verdict.judge import judge
from harness.matrix.load import MatrixError, load_matrix
from harness.outcomes import Outcome
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.resolved import resolve_case
from harness.results.result import EffectiveConfig, Observation

LOGS = Path(__file__).parent / "data" / "logs"
# a real run of qwen3-tiny/pd-p-pp1-d-pp1/auto/enforce-eager+graph-mode on vLLM-CPU: the logs of
# its eager prefill and its graph-mode decode
RECORDED = LOGS / "pd-eager-prefill-graph-decode"
CASE = "guide-61-layer/pd-p-tp8pp2-d-tp4/auto/enforce-eager+graph-mode"

SUITE = """\
suites:
  pd-sides:
    title: an eager prefill and a graph-mode decode
    platform: ascend
    groups:
      - families: [guide-61-layer]
        topologies: [pd-p-tp8pp2-d-tp4, tp8-pp2-2node-mp]
        features: [enforce-eager+graph-mode, enforce-eager, graph-mode]
        prefill: {skip_features: [graph-mode]}
        decode: {skip_features: [enforce-eager]}
      # the same stack with no sides: both modes on each instance, which cannot be
      - families: [guide-61-layer]
        topologies: [pd-p-tp8pp2-d-tp1]
        features: [enforce-eager+graph-mode, none]
"""


@pytest.fixture
def m(matrix_dir):
    matrix_dir("ascend/pd-sides.yaml", SUITE)
    return load_matrix(matrix_dir.root)


@pytest.fixture
def case(m):
    return {c.id: c for c in expand(m, "pd-sides").cases}[CASE]


def _argv(launch) -> list[str]:
    return list(launch.argv)


def _config(launch, flag: str) -> dict | None:
    argv = _argv(launch)
    return json.loads(argv[argv.index(flag) + 1]) if flag in argv else None


def test_an_eager_prefill_and_a_graph_mode_decode_are_one_case_claimed_by_their_sides(m):
    ids = {c.id for c in expand(m, "pd-sides").cases}
    assert CASE in ids
    # exclusive on one instance: without P/D, or on a pair whose sides both run both, no case
    assert "guide-61-layer/tp8-pp2-2node-mp/auto/enforce-eager+graph-mode" not in ids
    assert "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/enforce-eager+graph-mode" not in ids
    assert "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none" in ids
    case = {c.id: c for c in expand(m, "pd-sides").cases}[CASE]
    assert case.attrs["prefill_features"] == ["enforce-eager"]
    assert case.attrs["decode_features"] == ["graph-mode"]
    assert case.attrs["features"] == ["enforce-eager", "graph-mode"]
    # the rule for vllm-ascend's P/D shape decides it, not the graph-mode-with-PP row
    e = case.expectation
    assert e.kind == "supported" and not e.experimental and "Decode" in e.why
    plain = {c.id: c for c in expand(m, "pd-sides").cases}["guide-61-layer/tp8-pp2-2node-mp/auto/graph-mode"]
    assert plain.attrs["prefill_features"] == plain.attrs["decode_features"] == []


def test_pairwise_expansion_keeps_the_per_side_case(matrix_dir):
    matrix_dir("ascend/pd-sides.yaml", SUITE.replace("platform: ascend", "platform: ascend\n    mode: pairwise"))
    m = load_matrix(matrix_dir.root)
    ids = {c.id for c in expand(m, "pd-sides").cases}
    assert CASE in ids and "guide-61-layer/tp8-pp2-2node-mp/auto/enforce-eager+graph-mode" not in ids


def test_each_instance_is_planned_with_its_own_compilation_mode(m, case):
    launches = {launch.role: launch for launch in plan(m, case, load_cluster("a3-pd")).launches}
    prefill, decode = launches["prefill"], launches["decode"]
    assert "--enforce-eager" in _argv(prefill) and _config(prefill, "--compilation-config") is None
    assert "--enforce-eager" not in _argv(decode)
    assert _config(decode, "--compilation-config") == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    # both sides still describe one pair to the connector
    assert _config(prefill, "--kv-transfer-config")["kv_role"] == "kv_producer"
    assert _config(decode, "--kv-transfer-config")["kv_role"] == "kv_consumer"


def test_the_shipped_ascend_suites_hold_the_shape_and_plan_it(shipped):
    for suite in ("nightly-ascend", "release-ascend"):
        cases = {c.id: c for c in expand(shipped, suite).cases}
        assert CASE in cases, suite
        launches = {launch.role: launch for launch in plan(shipped, cases[CASE], load_cluster("a3-pd")).launches}
        assert "--enforce-eager" in _argv(launches["prefill"]) and "--enforce-eager" not in _argv(launches["decode"])


def test_a_feature_is_searched_for_a_silent_disable_only_in_its_own_side_s_log(m, case):
    rc = resolve_case(m, case)
    assert {role for _, role in rc.silent_disable} == {"decode"}  # enforce-eager names no downgrade
    downgrade = LOGS / "graph-mode-downgraded.log"
    # the decode instance downgraded graph mode: the claim fails, naming the decode's log line
    found = silent_disables(rc, {"prefill": RECORDED / "prefill.log", "decode": downgrade, "proxy": downgrade})
    assert [(line.log, line.line) for line in found] == [("decode", 3)]
    v = judge(case.expectation, Observation(ready=True, ready_s=60.0, silent_disable=found))
    assert v.outcome is Outcome.FAIL and "setting cudagraph_mode=PIECEWISE" in v.reason
    # the same line from the eager prefill is no downgrade of a feature it does not run
    assert silent_disables(rc, {"prefill": downgrade, "decode": RECORDED / "decode.log"}) == []


def test_the_recorded_pair_ran_each_side_as_planned():
    prefill = (RECORDED / "prefill.log").read_text()
    decode = (RECORDED / "decode.log").read_text()
    assert "'enforce_eager': True" in prefill and "'enforce_eager': True" not in decode
    assert "FULL_DECODE_ONLY" in decode and "FULL_DECODE_ONLY" not in prefill


def _instance(eager: bool, mode: str) -> dict:
    return {"api": {"model_config.enforce_eager": eager, "compilation_config.cudagraph_mode": mode}}


def test_each_side_is_judged_on_its_own_engine_s_configuration(m, case):
    rc = resolve_case(m, case)
    assert sorted((f, role) for f, _, role in rc.effective) == [("enforce-eager", "prefill"), ("graph-mode", "decode")]
    # each engine built what its side asked for: nothing disabled, although the prefill runs no
    # graph and the decode is not eager
    good = EffectiveConfig.model_validate(
        {"instances": {"prefill": _instance(True, "NONE"), "decode": _instance(False, "FULL_DECODE_ONLY")}}
    )
    obs = Observation(ready=True, ready_s=60.0)
    judge_case(obs, good, rc.effective)
    assert obs.effective is not None and obs.effective.disabled == [] and obs.notes == []
    assert judge(case.expectation, obs).outcome is Outcome.PASS
    # the decode engine downgraded graph mode: that side's feature is disabled, by name and side
    bad = EffectiveConfig.model_validate(
        {"instances": {"prefill": _instance(True, "NONE"), "decode": _instance(False, "PIECEWISE")}}
    )
    obs = Observation(ready=True, ready_s=60.0)
    judge_case(obs, bad, rc.effective)
    assert obs.effective is not None
    assert [(d.feature, d.instance, d.value) for d in obs.effective.disabled] == [("graph-mode", "decode", "PIECEWISE")]
    v = judge(case.expectation, obs)
    assert v.outcome is Outcome.FAIL
    assert "graph-mode on the decode instance: disabled by the engine: compilation_config.cudagraph_mode" in v.reason


def test_an_instance_that_does_not_answer_leaves_its_features_unjudged(m, case):
    rc = resolve_case(m, case)
    eff = EffectiveConfig.model_validate(
        {"instances": {"prefill": _instance(True, "NONE"), "decode": {"unavailable": ["api server: refused"]}}}
    )
    obs = Observation(ready=True, ready_s=60.0)
    judge_case(obs, eff, rc.effective)
    assert obs.effective is not None and obs.effective.disabled == []
    assert obs.notes == [
        "effective configuration unavailable on the decode instance (api server: refused): the fields of "
        "graph-mode were not judged"
    ]


class _Client:
    def __init__(self, config: dict):
        self.config = config

    def server_config(self) -> dict:
        return self.config

    def collective_rpc(self, method: str) -> list:
        raise RuntimeError("no stage probe")


class _Live:
    def __init__(self, instances: dict):
        self.client = _Client({})  # the proxy: no engine of its own
        self.instances = instances


def test_a_pair_s_configuration_is_read_from_each_instance():
    eff = read(
        _Live(  # type: ignore[arg-type]
            {
                "prefill": _Client({"model_config": {"enforce_eager": True}}),
                "decode": _Client({"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}}),
            }
        )
    )
    assert eff.api == {} and set(eff.instances) == {"prefill", "decode"}
    assert eff.instances["prefill"].api["model_config.enforce_eager"] is True
    assert eff.instances["decode"].api["compilation_config.cudagraph_mode"] == "FULL_DECODE_ONLY"
    assert [u.split(":")[0] for u in eff.instances["decode"].unavailable] == ["workers"]


def test_one_id_from_two_groups_with_other_sides_is_an_error_at_the_suite(matrix_dir):
    path = matrix_dir(
        "ascend/pd-sides.yaml",
        """\
suites:
  pd-sides:
    title: graph mode on the decode only, and on both
    platform: ascend
    groups:
      - families: [guide-61-layer]
        topologies: [pd-p-tp8pp2-d-tp4]
        features: [graph-mode]
        prefill: {skip_features: [graph-mode]}
      - families: [guide-61-layer]
        topologies: [pd-p-tp8pp2-d-tp4]
        features: [graph-mode]
""",
    )
    m = load_matrix(matrix_dir.root)
    with pytest.raises(MatrixError) as err:
        expand(m, "pd-sides")
    text = str(err.value)
    assert path.name in text and "guide-61-layer/pd-p-tp8pp2-d-tp4/auto/graph-mode comes from two groups" in text
    assert "groups[0] runs prefill [], decode ['graph-mode']" in text
    assert "groups[1] runs prefill ['graph-mode'], decode ['graph-mode']" in text

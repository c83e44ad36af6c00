"""Plan validation: the engine's parser, JSON config fields, world sizes, env names, platforms, ports."""

import textwrap

import pytest

from harness import cli
from harness.cases.expand import expand, select
from harness.launch import Placement
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.validate import check_deployment, engine, summarize, validate_cases

FAMILY = """
families:
  tiny:
    title: tiny
    variants:
      default:
        architecture: Qwen3ForCausalLM
        hidden_layers: 4
        supports_pp: true
        model: /models/tiny
        platforms: [cpu]
        serve_args: [--max-model-len, "256"]
"""

RULES = """
rules:
  - when: 'family == "tiny"'
    expect: supported
    why: a test claim
"""


@pytest.fixture
def private(tmp_path):
    """A private matrix layered on the shipped one: write(text) adds a file and returns the matrix."""
    root = tmp_path / "private"
    root.mkdir()

    def write(text: str, name: str = "private.yaml"):
        (root / name).write_text(textwrap.dedent(text))
        return load_matrix([DEFAULT_MATRICES, root])

    write.root = root
    return write


@pytest.fixture(scope="module")
def vllm_engine():
    # its tests are marked needs_vllm (skipped where vLLM is not installed): an installed vLLM
    # whose parser cannot be built is a failure, not a reason to skip
    eng = engine()
    if isinstance(eng, str):
        pytest.fail(eng)
    return eng


def suite(groups: str) -> str:
    return f"""
suites:
  s:
    title: private suite
    platform: cpu
    groups:
{textwrap.indent(textwrap.dedent(groups), "      ")}
"""


def check(m, name="s", cluster=None):
    cluster = cluster or load_cluster(None)
    return validate_cases(m, expand(m, name).cases, cluster)


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_misspelled_serve_flag_names_the_matrix_entry(private, vllm_engine):
    m = private(
        FAMILY.replace('[--max-model-len, "256"]', '[--max-modle-len, "256"]')
        + RULES
        + suite("- {families: [tiny], topologies: [pp1-tp1]}")
    )
    report = check(m)
    assert not report.ok
    (err,) = summarize(report.errors)
    assert "unknown serve flag --max-modle-len (did you mean '--max-model-len'?)" in err
    assert "private/private.yaml:12:" in err and "(variant tiny/default)" in err


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_bad_value_is_an_error(private, vllm_engine):
    m = private(FAMILY.replace('"256"', "lots") + RULES + suite("- {families: [tiny], topologies: [pp1-tp1]}"))
    (err,) = summarize(check(m).errors)
    assert "vLLM's serve parser rejects it: argument --max-model-len" in err and "'lots'" in err
    assert "private/private.yaml:12:" in err


def test_flag_from_two_layers_without_an_override(private):
    features = """
features:
  long: {title: long, args: [--max-num-seqs, "8"]}
  short: {title: short, args: [--max-num-seqs, "4"]}
"""
    m = private(
        FAMILY + RULES + features + suite("- {families: [tiny], topologies: [pp1-tp1], features: [long+short]}")
    )
    (err,) = summarize(check(m).errors)
    assert "flag --max-num-seqs has different values from two features entries" in err
    assert "private/private.yaml:20:" in err and "private/private.yaml:21:" in err
    assert "set it in a more specific layer" in err


def test_a_more_specific_layer_decides(private):
    features = """
features:
  long: {title: long, args: [--max-num-seqs, "8"]}
  short: {title: short, args: [--max-num-seqs, "4"]}
"""
    m = private(
        FAMILY
        + RULES
        + features
        + suite('- {families: [tiny], topologies: [pp1-tp1], features: [long+short], args: [--max-num-seqs, "2"]}')
    )
    assert check(m).ok
    (case,) = expand(m, "s").cases
    argv = list(plan(m, case, load_cluster(None)).launches[0].argv)
    assert argv.count("--max-num-seqs") == 1 and argv[argv.index("--max-num-seqs") + 1] == "2"


def test_a_flag_the_planner_also_gives_is_reported_twice_with_both_origins(private):
    features = """
features:
  pinned: {title: a feature that pins the node rank, args: [--node-rank, "0"]}
"""
    m = private(
        FAMILY + RULES + features + suite("- {families: [tiny], topologies: [pp2-tp1-2node-mp], features: [pinned]}")
    )
    errors = summarize(check(m).errors)
    assert any(
        "--node-rank and --node-rank set the same option 2 times" in e
        and "private/private.yaml:20:" in e
        and "planned by ppconf for this node" in e
        for e in errors
    ), errors


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_unknown_key_in_a_speculative_config(private, vllm_engine):
    features = """
features:
  spec:
    title: spec
    configs:
      speculative-config: {method: ngram, num_speculative_tokens: 2, prompt_lookup_maxx: 3}
"""
    m = private(FAMILY + RULES + features + suite("- {families: [tiny], topologies: [pp1-tp1], features: [spec]}"))
    (err,) = summarize(check(m).errors)
    assert "unknown key 'speculative-config.prompt_lookup_maxx' (did you mean 'prompt_lookup_max'?)" in err
    assert "not a field of vLLM's SpeculativeConfig" in err
    assert "private/private.yaml:23:" in err and "(feature spec)" in err


def test_pcp_on_eight_devices_per_node_is_a_world_size_mismatch(shipped):
    """TP8 x PP2 x PCP2 is 32 ranks: two nodes of 8 NPUs (what the old planner gave) cannot hold it."""
    cluster = load_cluster("a3-pd")
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["deepseek-v4/text/tp8-pp2-2node-mp/auto/pcp"])
    eight = Placement(tuple((n.name, tuple(n.devices[:8])) for n in cluster.nodes))
    report = check_deployment(shipped, case, plan(shipped, case, cluster, placement=eight), cluster)
    (err,) = report.errors
    assert "case deepseek-v4/text/tp8-pp2-2node-mp/auto/pcp" in err
    assert "vLLM's world size is 32 (TP 8 x PP 2 x PCP 2 x DP 1) but the plan gives it 16 device(s)" in err
    # planned as the planner now does, it gets 16 NPUs on each node and passes
    assert check_deployment(shipped, case, plan(shipped, case, cluster), cluster).ok


def test_a_rule_that_changes_the_pcp_size_is_an_error(private):
    rules = """
rules:
  - when: 'suite == "s"'
    expect: supported
    why: a claim that also sets PCP
    args: [--prefill-context-parallel-size, "2"]
"""
    m = private(FAMILY + rules + suite("- {families: [tiny], topologies: [pp1-tp1]}"))
    (err,) = summarize(check(m).errors)
    assert "vLLM's world size is 2" in err and "planned on 1 device(s)" in err
    assert "private/private.yaml:" in err and "(rule 0)" in err


def test_env_name_with_a_space(private):
    # refused where the matrix is read, with its position, before any plan is made
    with pytest.raises(MatrixError, match=r"private/private.yaml:12:\d+: families.tiny.variants.default.env.BAD NAME"):
        private(
            FAMILY.replace('serve_args: [--max-model-len, "256"]', 'env: {"BAD NAME": "1"}')
            + RULES
            + suite("- {families: [tiny], topologies: [pp1-tp1]}")
        )


def test_suite_platform_must_match_the_cluster(shipped):
    report = validate_cases(shipped, expand(shipped, "smoke-cpu").cases, load_cluster("a3-pd"))
    assert report.errors == [
        f"{shipped.where[('suites', 'smoke-cpu')]}: suite smoke-cpu is for platform 'cpu', cluster a3-pd is 'ascend'"
    ]


def test_ports_must_not_collide_on_a_node(private):
    features = """
features:
  kv:
    title: a KV connector on the API port
    configs:
      kv-transfer-config: {kv_connector: X, kv_role: kv_both, kv_port: 8000}
"""
    m = private(FAMILY + RULES + features + suite("- {families: [tiny], topologies: [pp1-tp1], features: [kv]}"))
    errors = [e for e in check(m).errors if "port" in e]
    assert errors and "port 8000 on node local is used by node0-api and node0-api (kv ports)" in errors[0]


def test_two_node_ranks_on_one_host_keep_their_kv_ports_apart(shipped):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["glm-5.2/text/tp8-pp2-2node-mp/38,40/kv-offload"])
    d = plan(shipped, case, load_cluster("a3-16npu"))  # two node ranks packed on one 16-NPU node
    ports = [cli_json(l.argv, "--kv-transfer-config")["kv_port"] for l in d.launches]
    assert ports == [20050, 20058]
    assert check_deployment(shipped, case, d, load_cluster("a3-16npu")).errors == []


def cli_json(argv, flag):
    import json

    argv = list(argv)
    return json.loads(argv[argv.index(flag) + 1])


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_additional_config_keys_come_from_the_platform(shipped, vllm_engine, matrix_dir):
    matrix_dir(
        "features-extra.yaml",
        """
        features:
          typo:
            title: a misspelled Ascend option
            configs:
              additional-config: {enable_kvp: true}
        suites:
          t:
            title: t
            platform: ascend
            reference: {kind: counterpart, fold: tp}
            groups:
              - {families: [glm-5.2], topologies: [tp8-pp2-2node-mp], features: [typo]}
        """,
    )
    m = load_matrix(matrix_dir.root)
    # the case and its reference (the same flags, PP folded away) each carry the typo
    report = validate_cases(m, expand(m, "t").cases, load_cluster("a3-pd"))
    assert any("/reference/" in e for e in report.errors)
    (err,) = summarize(report.errors)
    assert "--additional-config: unknown key 'enable_kvp' (did you mean 'enable_kvpp'?)" in err
    # the case's two node launches and its reference's one (TP16 on one of a3-pd's 16-NPU nodes)
    assert "matrices/features-extra.yaml:6:" in err and "in 3 cases" in err
    # the keys vllm-ascend's source reads (its facts file), the one its guide documents beyond
    # them, with its source, and the compilation key only vllm-ascend's vLLM reads
    ascend = shipped.platforms["ascend"]
    assert {"xlite_graph_config", "sparse_kv_offload_config"} <= set(ascend.facts.additional_config)
    assert set(ascend.additional_config) == {"enable_kvpp"}
    assert all(k.source.startswith("https://") for k in ascend.additional_config.values())
    assert "compilation-config.pass_config.enable_sp" in ascend.config_keys


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
@pytest.mark.parametrize(
    "suite_name, cluster",
    [("nightly-ascend", "a3-pd"), ("nightly-ascend", "a3-2node"), ("smoke-cpu", None), ("features-cpu", None)],
)
def test_shipped_plans_pass(shipped, vllm_engine, suite_name, cluster):
    report = validate_cases(shipped, expand(shipped, suite_name).cases, load_cluster(cluster))
    assert report.errors == []
    assert report.plans > 0


@pytest.mark.slow  # over 2 s: it builds the engine's serve parser
def test_cli_lint_plans_fails_with_a_positioned_message(private, capsys):
    m_text = (
        FAMILY
        + RULES
        + """
features:
  long: {title: long, args: [--max-num-seqs, "8"]}
  short: {title: short, args: [--max-num-seqs, "4"]}
"""
        + suite("- {families: [tiny], topologies: [pp1-tp1], features: [long+short]}")
    )
    private(m_text)
    code = cli.main(
        ["lint", "--matrices", str(DEFAULT_MATRICES), "--matrices", str(private.root), "--plans", "--suite", "s"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "error: s on local:" in out and "private/private.yaml:20:" in out


@pytest.mark.slow  # over 2 s: it builds the engine's serve parser
def test_cli_lint_plans_passes_on_a_shipped_cpu_suite(capsys):
    assert cli.main(["lint", "--plans", "--suite", "smoke-cpu"]) == 0
    assert "0 errors" in capsys.readouterr().out


def test_an_engine_variable_this_vllm_does_not_read_is_a_warning_with_the_closest_name():
    from harness.plan.validate import unknown_engine_env

    known = frozenset({"VLLM_PP_LAYER_PARTITION", "VLLM_HOST_IP", "VLLM_CPU_KVCACHE_SPACE"})
    env = {
        "VLLM_PP_LAYER_PARTITON": "1,4",  # a typo
        "VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL": "1",  # gone from this vLLM
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_ASCEND_ENABLE_FLASHCOMM": "1",  # vllm-ascend's own: not the driver's to judge
        "HCCL_IF_IP": "10.0.0.1",
    }
    warned = unknown_engine_env(env, known)
    assert warned == [
        "env VLLM_PP_LAYER_PARTITON is not a variable this vLLM reads (did you mean 'VLLM_PP_LAYER_PARTITION'?); "
        "it changes nothing",
        "env VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL is not a variable this vLLM reads; it changes nothing",
    ]
    assert unknown_engine_env(env, frozenset()) == []  # no engine on the driver: nothing to compare

"""One merge with a stated precedence: platform < topology < variant < its P/D side < features < suite < group
< rule."""

import json
import textwrap

import pytest

from harness.cases.expand import expand, select
from harness.cases.merge import LEVELS, Layer, merge
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.instance import MergeError

BASE = """
platforms:
  cpu:
    title: cpu, with a default block size and per-backend env
    device_env: VLLM_CPU_OMP_THREADS_BIND
    device_format: cpu-bind
    env: {VLLM_TARGET_DEVICE: cpu, LEVEL: platform}
    backend_env:
      mp: {MP_ONLY: "1"}
      ray: {RAY_ONLY: "1", LEVEL: platform-ray}
    serve_args: [--block-size, "16", --seed, "1"]
families:
  tiny:
    title: tiny
    variants:
      default:
        architecture: Qwen3ForCausalLM
        supports_pp: true
        model: /models/tiny
        platforms: [cpu]
        serve_args: [--block-size, "128", --hf-overrides, '{"num_hidden_layers": 4, "rope_theta": 1}']
        env: {LEVEL: variant}
features:
  small:
    title: small
    args: [--max-model-len, "2048"]
    env: {LEVEL: feature}
    configs:
      hf-overrides: {rope_theta: 2}
suites:
  s:
    title: upstream's PP test shape — shared args for the main rows, not the graph rows
    platform: cpu
    args: [--max-num-seqs, "8"]
    env: {LEVEL: suite}
    groups:
      - families: [tiny]
        topologies: [pp2-tp1-mp, pp2-tp1-ray]
        features: [small]
        args: [--max-model-len, "1024"]
        env: {LEVEL: group}
      - families: [tiny]
        topologies: [pp1-tp1]
rules:
  - when: 'suite == "s" && topology == "pp2-tp1-mp"'
    expect: supported
    why: the rule layer is the most specific
    env: {LEVEL: rule}
  - when: 'suite == "s"'
    expect: supported
    why: the rest
"""


@pytest.fixture
def m(tmp_path):
    root = tmp_path / "private"
    root.mkdir()
    (root / "m.yaml").write_text(textwrap.dedent(BASE))
    return load_matrix([DEFAULT_MATRICES, root])


def launch(m, cid, cluster=None):
    (case,) = select(expand(m, "s").cases, ids=[cid])
    return plan(m, case, load_cluster(cluster)), case


def flag(argv, name):
    argv = list(argv)
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def test_precedence_is_the_stated_one():
    assert LEVELS == (
        "platform",
        "topology",
        "variant",
        "variant-side",
        "features",
        "suite",
        "group",
        "group-side",
        "rule",
    )


def test_a_variants_pd_side_wins_over_its_own_flags_and_loses_to_a_feature():
    own = Layer("variant", "variant f/v", (("--max-num-seqs", "f:1:1"), ("32", "f:1:1")), (("E", "1", "f:2:1"),))
    decode = Layer(
        "variant-side",
        "variant f/v on the decode instance",
        (("--max-num-seqs", "f:5:1"), ("8", "f:5:1")),
        (("E", "2", "f:6:1"),),
    )
    mg = merge([own, decode])
    assert mg.errors == [] and mg.args() == ["--max-num-seqs", "8"] and mg.env == {"E": "2"}
    feature = Layer("features", "feature x", (("--max-num-seqs", "x:1:1"), ("4", "x:1:1")))
    assert merge([own, decode, feature]).args() == ["--max-num-seqs", "4"]


def test_more_specific_layers_override_instead_of_appending(m):
    d, _ = launch(m, "tiny/pp2-tp1-mp/auto/small")
    argv = d.launches[0].argv
    assert flag(argv, "--block-size") == "128"  # the family's over the platform's default
    assert flag(argv, "--seed") == "1"  # the platform's, nobody overrides it
    assert flag(argv, "--max-model-len") == "1024"  # the group's over the feature's
    assert flag(argv, "--max-num-seqs") == "8"  # the suite's
    env = d.launches[0].env_dict()
    assert env["LEVEL"] == "rule"
    other, _ = launch(m, "tiny/pp1-tp1/auto/none")
    assert "--max-model-len" not in other.launches[0].argv  # the group's args stay in their group
    assert other.launches[0].env_dict()["LEVEL"] == "suite"


def test_json_flags_merge_key_by_key_including_hf_overrides(m):
    d, case = launch(m, "tiny/pp2-tp1-mp/auto/small")
    assert json.loads(flag(d.launches[0].argv, "--hf-overrides")) == {"num_hidden_layers": 4, "rope_theta": 2}
    # a model shrunk to 4 layers is partitioned as 4
    assert case.attrs["layers"] == 4


def test_backend_env_reaches_vllm_processes_of_that_backend_only(m):
    mp, _ = launch(m, "tiny/pp2-tp1-mp/auto/small")
    assert mp.launches[0].env_dict()["MP_ONLY"] == "1" and "RAY_ONLY" not in mp.launches[0].env_dict()
    ray, _ = launch(m, "tiny/pp2-tp1-ray/auto/small", "a3-2node")
    assert ray.launches[0].env_dict()["RAY_ONLY"] == "1"


def test_backend_env_is_not_set_on_ray_start(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "m.yaml").write_text(
        textwrap.dedent("""
        suites:
          r:
            title: two-node Ray with a Ray-only variable
            platform: ascend
            backend_env:
              ray: {VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL: "1"}
            groups:
              - {families: [guide-61-layer], topologies: [tp8-pp2-2node-ray]}
        """)
    )
    m = load_matrix([DEFAULT_MATRICES, root])
    (case,) = expand(m, "r").cases
    d = plan(m, case, load_cluster("a3-2node"))
    by_role = {l.role: l.env_dict() for l in d.launches}
    assert by_role["api"]["VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL"] == "1"
    assert "VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL" not in by_role["ray-head"]
    assert "VLLM_USE_RAY_COMPILED_DAG_NCCL_CHANNEL" not in by_role["ray-worker"]


def test_same_level_conflict_is_an_error_naming_both_origins():
    a = Layer("features", "feature a", (("--runner", "a.yaml:1:1"), ("pooling", "a.yaml:1:1")))
    b = Layer("features", "feature b", (("--runner", "b.yaml:2:1"), ("generate", "b.yaml:2:1")))
    (err,) = merge([a, b]).errors
    assert "flag --runner has different values from two features entries" in err
    assert "a.yaml:1:1" in err and "b.yaml:2:1" in err
    # a rule decides
    rule = Layer("rule", "rule 0", (("--runner", "r.yaml:3:1"), ("pooling", "r.yaml:3:1")))
    mg = merge([a, b, rule])
    assert mg.errors == [] and mg.args() == ["--runner", "pooling"]
    assert mg.flag_origins["--runner"][-1] == "r.yaml:3:1"


def test_same_value_from_two_entries_of_one_level_is_kept_once():
    a = Layer("features", "feature a", (("--enforce-eager", "a:1:1"),))
    b = Layer("features", "feature b", (("--enforce-eager", "b:1:1"),))
    mg = merge([a, b])
    assert mg.errors == [] and mg.args() == ["--enforce-eager"]


def test_one_entry_giving_a_flag_twice_is_an_error():
    a = Layer(
        "variant",
        "variant x",
        (("--load-format", "v:1:1"), ("dummy", "v:1:1"), ("--load-format", "v:1:9"), ("dummy", "v:1:9")),
    )
    (err,) = merge([a]).errors
    assert "flag --load-format is given twice by variant x: at v:1:1 and at v:1:9" in err


def test_a_no_flag_overrides_its_positive_form():
    p = Layer("platform", "platform p", (("--enable-prefix-caching", "p:1:1"),))
    f = Layer("features", "feature f", (("--no-enable-prefix-caching", "f:1:1"),))
    assert merge([p, f]).args() == ["--no-enable-prefix-caching"]


def test_merge_errors_stop_the_plan(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "m.yaml").write_text(
        textwrap.dedent("""
        features:
          a: {title: a, env: {X: "1"}}
          b: {title: b, env: {X: "2"}}
        suites:
          c:
            title: c
            platform: cpu
            groups:
              - {families: [qwen3-tiny], topologies: [pp2-tp1-mp], features: [a+b]}
        """)
    )
    m = load_matrix([DEFAULT_MATRICES, root])
    (case,) = expand(m, "c").cases
    with pytest.raises(MergeError, match=r"env X has different values .* p/m.yaml:3:.* p/m.yaml:4:"):
        plan(m, case, load_cluster(None))

"""Layered matrices (--matrices given several times), rules that name their suite, DP across nodes."""

import json
import textwrap

import pytest

from harness import cli
from harness.cases.expand import expand, select
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.validate import check_deployment

PRIVATE = """
# a private suite reusing the shipped platforms, topologies, features and families
suites:
  mine:
    title: private claims on the shipped layouts
    platform: cpu
    groups:
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp, pp2-tp1-2node-mp]
        features: [none, prefix-caching]
rules:
  # two claims about one deployment, told apart by the suite alone
  - when: 'suite == "mine" && "prefix-caching" in features'
    expect: known-issue
    why: a private waiver
    waives: [accuracy]
    link: https://example.invalid/1
    owner: me
    until: 2099-01-01
  - when: 'suite == "mine"'
    expect: supported
    why: private claim
"""


@pytest.fixture
def private(tmp_path):
    root = tmp_path / "private"
    root.mkdir()
    (root / "mine.yaml").write_text(textwrap.dedent(PRIVATE))
    return root


def test_a_private_matrix_reuses_the_shipped_one(private):
    m = load_matrix([DEFAULT_MATRICES, private])
    cases = {c.id: c for c in expand(m, "mine").cases}
    assert set(cases) == {
        "qwen3-tiny/pp2-tp1-mp/auto/none",
        "qwen3-tiny/pp2-tp1-mp/auto/prefix-caching",
        "qwen3-tiny/pp2-tp1-2node-mp/auto/none",
        "qwen3-tiny/pp2-tp1-2node-mp/auto/prefix-caching",
    }
    assert cases["qwen3-tiny/pp2-tp1-mp/auto/prefix-caching"].expectation.kind == "known-issue"
    assert cases["qwen3-tiny/pp2-tp1-mp/auto/none"].expectation.where.startswith("private/mine.yaml:")
    # the shipped suites keep their own claims: the private rules only name their suite
    shipped = {c.id: c.expectation.kind for c in expand(load_matrix(), "smoke-cpu").cases}
    assert {c.id: c.expectation.kind for c in expand(m, "smoke-cpu").cases} == shipped
    # and the private cases plan on the shipped topologies
    d = plan(m, cases["qwen3-tiny/pp2-tp1-2node-mp/auto/none"], load_cluster(None))
    assert [l.role for l in d.launches] == ["api", "headless"]


def test_a_later_directory_overrides_an_entry_whole(private):
    (private / "topo.yaml").write_text(
        "topologies:\n  pp2-tp1-mp:\n    title: PP2, Ray this time\n    pp: 2\n    backend: ray\n"
    )
    m = load_matrix([DEFAULT_MATRICES, private])
    assert m.topologies["pp2-tp1-mp"].backend == "ray"
    assert str(m.where[("topologies", "pp2-tp1-mp")]).startswith("private/topo.yaml:2:")
    assert m.roots == (DEFAULT_MATRICES, private)


def test_the_same_name_twice_in_one_layer_is_still_an_error(private):
    (private / "a.yaml").write_text("topologies:\n  x:\n    title: x\n")
    (private / "b.yaml").write_text("topologies:\n  x:\n    title: x again\n")
    with pytest.raises(
        MatrixError, match=r"private/b.yaml:2:3: topologies: 'x' is already defined at private/a.yaml:2:3"
    ):
        load_matrix([DEFAULT_MATRICES, private])


def test_errors_in_a_later_layer_are_positioned(private):
    (private / "bad.yaml").write_text(
        "suites:\n  broken:\n    title: b\n    platform: cpu\n    groups:\n"
        "      - {families: [qwen3-tiny], topologies: [pp2-tp1-mpp]}\n"
    )
    with pytest.raises(MatrixError) as err:
        load_matrix([DEFAULT_MATRICES, private])
    assert "private/bad.yaml:2:3: suites.broken: unknown topology 'pp2-tp1-mpp' (did you mean 'pp2-tp1-mp'?)" in str(
        err.value
    )


@pytest.mark.slow  # over 2 s: it lints or expands every shipped suite
def test_cli_takes_matrices_several_times(private, capsys):
    args = ["--matrices", str(DEFAULT_MATRICES), "--matrices", str(private)]
    assert cli.main(["expand", *args, "--suite", "mine", "--count"]) == 0
    assert "mine: full, 4 cases" in capsys.readouterr().out
    assert cli.main(["plan", *args, "--suite", "mine", "--case", "qwen3-tiny/pp2-tp1-mp/auto/none"]) == 0
    assert "--pipeline-parallel-size 2" in capsys.readouterr().out
    assert cli.main(["lint", *args, "--plans", "--suite", "mine"]) == 0
    assert "0 errors" in capsys.readouterr().out


def test_a_rule_condition_may_name_an_unknown_suite_only_with_a_suggestion(private):
    (private / "r.yaml").write_text("rules:\n  - when: 'suite == \"mien\"'\n    expect: supported\n    why: typo\n")
    with pytest.raises(MatrixError, match="mien"):
        load_matrix([DEFAULT_MATRICES, private])


DP = """
topologies:
  tp2-pp2-dp4-2node-internal:
    title: internal DP across two nodes, PP inside each DP rank
    tp: 2
    pp: 2
    dp: 4
    nnodes: 2
    backend: mp
    dp_mode: internal
  tp2-pp2-dp4-2node-external:
    title: external DP, one engine per DP rank
    tp: 2
    pp: 2
    dp: 4
    nnodes: 2
    dp_mode: external
suites:
  dp:
    title: DP across nodes
    platform: ascend
    groups:
      - {families: [guide-61-layer], topologies: [tp2-pp2-dp4-2node-internal, tp2-pp2-dp4-2node-external]}
"""


@pytest.fixture
def dp_matrix(tmp_path):
    root = tmp_path / "dp"
    root.mkdir()
    (root / "dp.yaml").write_text(textwrap.dedent(DP))
    return load_matrix([DEFAULT_MATRICES, root])


def value(argv, flag):
    argv = list(argv)
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_internal_dp_across_nodes(dp_matrix):
    cluster = load_cluster("a3-2node")
    (case,) = select(expand(dp_matrix, "dp").cases, ids=["guide-61-layer/tp2-pp2-dp4-2node-internal/auto/none"])
    assert case.attrs["devices"] == 16
    d = plan(dp_matrix, case, cluster)
    head, other = d.launches
    assert (head.role, other.role) == ("api", "headless")
    for l in (head, other):
        assert value(l.argv, "--data-parallel-size") == "4" and value(l.argv, "--data-parallel-size-local") == "2"
        assert value(l.argv, "--data-parallel-address") == cluster.nodes[0].address
        assert value(l.argv, "--data-parallel-rpc-port") == "29550"
        assert value(l.argv, "--pipeline-parallel-size") == "2"
        assert l.env_dict()["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
        assert "--nnodes" not in l.argv
    assert value(head.argv, "--data-parallel-start-rank") is None and "--headless" not in head.argv
    assert value(other.argv, "--data-parallel-start-rank") == "2" and "--headless" in other.argv
    assert check_deployment(dp_matrix, case, d, cluster).errors == []


def test_external_dp_one_engine_per_rank(dp_matrix):
    cluster = load_cluster("a3-2node")
    (case,) = select(expand(dp_matrix, "dp").cases, ids=["guide-61-layer/tp2-pp2-dp4-2node-external/auto/none"])
    d = plan(dp_matrix, case, cluster)
    # the ranks, then the cluster's DP proxy over them on the API port, where the client connects
    assert [l.name for l in d.launches] == ["dp0", "dp1", "dp2", "dp3", "proxy"] and d.api == "proxy"
    ranks, proxy = d.launches[:4], d.launch("proxy")
    assert [value(l.argv, "--data-parallel-rank") for l in ranks] == ["0", "1", "2", "3"]
    assert [l.port for l in ranks] == [8001, 8002, 8003, 8004] and proxy.port == 8000
    assert [l.node for l in ranks] == ["node0", "node0", "node1", "node1"]
    assert [l.env_dict()["ASCEND_RT_VISIBLE_DEVICES"] for l in ranks] == ["0,1,2,3", "4,5,6,7"] * 2
    assert all(value(l.argv, "--data-parallel-size") == "4" for l in ranks)
    assert list(proxy.argv)[-10:] == [
        "--dp-hosts", *[cluster.node(l.node).address for l in ranks], "--dp-ports", "8001", "8002", "8003", "8004",
    ]  # fmt: skip
    assert check_deployment(dp_matrix, case, d, cluster).errors == []


def test_dp_mode_needs_whole_dp_ranks_per_node(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    (root / "t.yaml").write_text(
        "topologies:\n  odd:\n    title: odd\n    dp: 3\n    nnodes: 2\n    dp_mode: internal\n"
    )
    with pytest.raises(MatrixError, match="dp_mode internal needs dp > 1 and a multiple of nnodes"):
        load_matrix([DEFAULT_MATRICES, root])


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_dp_flags_are_the_installed_vllms(dp_matrix):
    from harness.plan.validate import engine

    eng = engine()
    if isinstance(eng, str):
        pytest.fail(eng)  # vLLM is installed (needs_vllm) but its parser cannot be built
    for flag in (
        "--data-parallel-size-local",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-start-rank",
        "--data-parallel-rank",
        "--headless",
    ):
        assert flag in eng.dests
    cluster = load_cluster("a3-2node")
    for case in expand(dp_matrix, "dp").cases:
        d = plan(dp_matrix, case, cluster)
        for l in d.launches:
            if "serve" not in l.argv:  # external DP's proxy
                continue
            args = list(l.argv[l.argv.index("serve") + 1 :])
            ns, unknown = eng.parse(args)
            assert unknown == []
        assert json.dumps(check_deployment(dp_matrix, case, d, cluster).errors) == "[]"

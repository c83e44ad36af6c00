"""References as data: resolution order, counterpart layouts, planning on a cluster, goldens,
cache keys, and what lint and the scheduler make of them. Pure: nothing is launched."""

import json
import subprocess
import sys

import pytest

from harness.cases.expand import expand, select
from harness.check.references.goldens import cache_key, check_plannable, golden_record, load_golden, stack_difference
from harness.check.traffic.compare import Outputs
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.matrix.schema import Topology
from harness.outcomes import NEEDS_REFERENCE
from harness.plan.cluster import load_cluster
from harness.plan.reference import (
    ReferenceUnavailable,
    counterpart_topology,
    plan_reference,
    resolve,
)
from harness.plan.schedule import schedule_suite
from harness.preflight import references_unfit


def case(m, suite, cid):
    return select(expand(m, suite).cases, ids=[cid])[0]


def ppconf(*argv):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


def test_counterpart_folds_pp_away_on_the_nodes_it_needs():
    two = Topology(tp=8, pp=2, nnodes=2, backend="mp")
    name, t = counterpart_topology("tp8-pp2-2node-mp", two, "none")
    assert (name, t.tp, t.pp, t.nnodes, t.backend) == ("tp8-pp2-2node-mp~pp1", 8, 1, 1, "mp")
    name, t = counterpart_topology("tp8-pp2-2node-mp", two, "tp")
    assert (name, t.tp, t.pp, t.nnodes, t.backend) == ("tp8-pp2-2node-mp~tp16", 16, 1, 2, "mp")
    _, t = counterpart_topology("x", Topology(tp=8, pp=2), "tp")  # one 16-device node stays one node
    assert (t.tp, t.nnodes) == (16, 1)
    _, t = counterpart_topology("x", Topology(tp=4, pp=2, dp=2, nnodes=2, backend="mp"), "none")
    assert (t.tp, t.dp, t.nnodes) == (4, 1, 1)


def test_the_most_specific_declaration_wins(matrix_dir):
    matrix_dir(
        "cpu/00-references.yaml",
        """\
        rules:
          - when: 'family == "qwen3-tiny" && partition == "1,4"'
            expect: supported
            why: a rule that names its own reference
            reference: {kind: golden, golden: goldens/qwen3.json}
            compare: {mode: first-divergence, diverge_after: 4}
        """,
    )
    text = (matrix_dir.root / "cpu/families.yaml").read_text()
    assert "      kind: counterpart\n      score:" in text
    text = text.replace(
        "      kind: counterpart\n      score:", "      kind: counterpart\n      fold: tp\n      score:", 1
    )
    (matrix_dir.root / "cpu/families.yaml").write_text(text)
    m = load_matrix(matrix_dir.root)
    plain = resolve(m, case(m, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none"))
    assert plain.spec.kind == "counterpart" and plain.spec.fold == "none" and "(default)" in plain.source
    assert plain.compare.mode == "exact"
    fam = resolve(m, case(m, "smoke-cpu", "qwen3-moe-tiny/pp2-tp1-mp/auto/none"))
    assert fam.spec.fold == "tp" and fam.source == "family qwen3-moe-tiny"
    ruled = resolve(m, case(m, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/1,4/none"))
    assert (
        ruled.spec.kind == "golden"
        and ruled.compare.mode == "first-divergence"
        and "00-references.yaml:2" in ruled.source
    )
    assert ruled.path("goldens/qwen3.json") == matrix_dir.root / "cpu" / "goldens" / "qwen3.json"


def test_reference_declarations_are_validated(matrix_dir):
    from harness.matrix.source import MatrixError

    matrix_dir(
        "cpu/zz-bad.yaml",
        """\
        rules:
          - when: 'family == "qwen3-tiny"'
            expect: supported
            why: golden without a file
            reference: {kind: golden}
        """,
    )
    with pytest.raises(MatrixError, match="golden needs golden"):
        load_matrix(matrix_dir.root)


def test_guide_models_get_a_reference_that_fits_the_shipped_clusters(shipped):
    c = case(shipped, "nightly-ascend", "deepseek-v4/text/tp8-pp2-2node-mp/auto/none")
    d = plan_reference(shipped, c, load_cluster("a3-2node"))
    (head, worker) = d.launches
    assert "--tensor-parallel-size" in head.argv and head.argv[head.argv.index("--tensor-parallel-size") + 1] == "16"
    assert head.argv[head.argv.index("--pipeline-parallel-size") + 1] == "1"
    assert "--headless" in worker.argv and head.node != worker.node
    env = dict(head.env)
    assert "VLLM_PP_LAYER_PARTITION" not in env and len(env["ASCEND_RT_VISIBLE_DEVICES"].split(",")) == 8
    assert resolve(shipped, c).compare.mode == "logprob"


@pytest.mark.slow  # every case of every Ascend suite planned with its reference, on three inventories
def test_every_shipped_case_gets_a_reference_on_the_shipped_clusters(shipped):
    for cluster in ("a3-pd", "a3-2node", "a3-16npu"):  # what `ppconf lint --cluster` checks
        assert references_unfit(shipped, None, cluster) == []


def test_a_reference_that_cannot_hold_the_model_is_named_before_anything_launches(matrix_dir):
    text = (matrix_dir.root / "ascend/suites.yaml").read_text()
    (matrix_dir.root / "ascend/suites.yaml").write_text(text.replace("fold: tp}", "fold: none}"))
    m = load_matrix(matrix_dir.root)
    c = case(m, "nightly-ascend", "deepseek-v4/text/tp8-pp2-2node-mp/auto/none")
    with pytest.raises(ReferenceUnavailable, match="needs at least 16 devices"):
        plan_reference(m, c, load_cluster("a3-2node"))
    assert "needs at least 16 devices" in check_plannable(m, c, load_cluster("a3-2node"))


@pytest.mark.slow  # lints and plans every case of the suite
def test_lint_names_a_case_whose_reference_cannot_be_planned(matrix_dir, capsys):
    text = (matrix_dir.root / "ascend/suites.yaml").read_text()
    (matrix_dir.root / "ascend/suites.yaml").write_text(text.replace("fold: tp}", "fold: none}"))
    assert main(["lint", "--matrices", str(matrix_dir.root), "--cluster", "a3-2node", "--suite", "nightly-ascend"]) == 1
    assert "deepseek-v4/text/tp8-pp2-2node-mp/auto/none: no reference" in capsys.readouterr().out


def test_plan_prints_the_reference_launch(shipped):
    r = ppconf(
        "plan",
        "--suite",
        "smoke-cpu",
        "--case",
        "qwen3-tiny/pp2-tp1-mp/auto/prefix-caching",
        "--reference",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    (api,) = d["launches"]
    assert api["argv"][api["argv"].index("--pipeline-parallel-size") + 1] == "1"
    assert "--enable-prefix-caching" in api["argv"]  # the counterpart keeps the case's features
    assert "counterpart" in r.stderr


def test_the_simulated_schedule_counts_reference_launches(shipped):
    s = schedule_suite(shipped, "smoke-cpu", load_cluster(None))
    names = [e.need.name for e in s.entries]
    assert any("/reference/" in n for n in names)
    served = [c for c in expand(shipped, "smoke-cpu").cases if c.expectation.kind in NEEDS_REFERENCE]
    refs = {plan_reference(shipped, c, load_cluster(None)).key for c in served}
    assert sum("/reference/" in n for n in names) == len(refs)  # one launch per distinct reference


def test_cache_key_moves_with_the_stack_and_the_requests(shipped):
    c = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    d = plan_reference(shipped, c, load_cluster(None))
    v = {"local": {"vllm": "0.32.0"}}
    shape = {"prompts": ["a"]}
    k = cache_key(d, v, shape)
    assert k == cache_key(d, json.loads(json.dumps(v)), dict(shape))
    assert k != cache_key(d, {"local": {"vllm": "0.33.0"}}, shape)
    assert k != cache_key(d, v, {"prompts": ["b"]})


def test_goldens_round_trip_and_say_when_the_stack_moved(tmp_path):
    data = golden_record(Outputs(embeddings=[[1.0]]), {"prompts": ["a"]}, None, {"n": {"vllm": "1"}}, "m")
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    assert load_golden(path)["outputs"]["embeddings"] == [[1.0]]
    assert stack_difference({"n": {"vllm": "1", "torch": "2"}}, {"x": {"vllm": "2", "torch": "2"}}) == ["vllm 1 → 2"]
    with pytest.raises(ReferenceUnavailable, match="not found"):
        load_golden(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"outputs": {}}')
    with pytest.raises(ReferenceUnavailable, match="not a ppconf golden"):
        load_golden(tmp_path / "bad.json")

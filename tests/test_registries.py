"""Every pluggable kind is one registry of modules (``harness.registry``): the schema's names are
the registries', each member provides its kind's protocol, and a new phase kind or report format is
one module and one registry line, seen working through the pure path."""

import typing

import pytest
from pydantic import BaseModel, ValidationError

from harness.cases.expand import expand
from harness.cases.phases.kind import PhaseKind
from harness.cases.workload import plan_workload, workload_of, workload_problems
from harness.check.traffic.evidence import not_exercised
from harness.check.traffic.phases import PhaseOutputs
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.matrix.schema import FEATURE_CHECKS, Phase, Score
from harness.matrix.source import MatrixError
from harness.plan.cluster import Node
from harness.plan.resolved import resolve_case
from harness.registry import LIVE_CHECKS, PHASE_KINDS, REPORT_FORMATS, RUNNERS, SCORE_TOOLS, Registry
from reports.formats import ReportFormat
from reports.render import report_claims

BURST = """\
    suites:
      mine:
        title: x
        platform: cpu
        workload: [{kind: burst, requests: 3}]
        groups:
          - families: [qwen3-tiny]
            topologies: [pp2-tp1-mp]
    """


def test_the_schemas_names_are_the_registries():
    assert typing.get_args(Score.model_fields["tool"].annotation) == SCORE_TOOLS.names
    assert typing.get_args(Node.model_fields["reach"].annotation) == RUNNERS.names
    assert FEATURE_CHECKS == (*LIVE_CHECKS.names, "embeddings", "classifications")
    for kind in PHASE_KINDS:
        assert Phase(kind=kind).kind == kind


def test_every_phase_kind_and_report_format_provides_its_protocol():
    assert all(isinstance(PHASE_KINDS[k], PhaseKind) for k in PHASE_KINDS)
    assert all(isinstance(REPORT_FORMATS[f], ReportFormat) for f in REPORT_FORMATS)
    assert [REPORT_FORMATS[f].file for f in REPORT_FORMATS] == [
        "support.md",
        "support.html",
        "summary.json",
        "junit.xml",
    ]
    assert [SCORE_TOOLS[t].label for t in SCORE_TOOLS] == ["lm-eval", "AISBench"]
    with pytest.raises(KeyError, match="no phase kind is named 'burst'"):
        PHASE_KINDS["burst"]


def test_a_name_outside_a_registry_is_refused_as_pydantic_refuses_one_outside_a_literal():
    """The loader reads the refusal's choices to suggest the closest name: both must say the same."""

    class Plain(BaseModel):
        kind: typing.Literal["a", "b", "c"]

    names = Registry("thing", "X", {"a": "m", "b": "m", "c": "m"})
    for bad in ("d", 3):
        with pytest.raises(ValidationError) as want:
            Plain(kind=bad)
        with pytest.raises(Exception) as got:
            names.check(bad)
        (w,) = want.value.errors()
        assert (got.value.type, got.value.message(), got.value.context) == (w["type"], w["msg"], w["ctx"])
    assert names.check("b") == "b"


def test_an_unknown_phase_kind_is_refused_at_load_with_the_closest_name(matrix_dir):
    matrix_dir("cpu/mine.yaml", BURST.replace("burst", "concurent"))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    text = "\n".join(map(str, err.value.errors))
    assert "mine.yaml:5:" in text and "workload.0.kind: Input should be 'sequential', 'batch'" in text, text
    assert "got 'concurent'" in text and "'concurrent'" in text.split("got 'concurent'")[1], text


class Recorder:
    """A Sender that keeps how each request was asked to be sent."""

    def __init__(self):
        self.sent: list[tuple[str, str]] = []

    def complete(self, requests):
        self.sent += [("complete", r.label) for r in requests]

    def stream(self, requests):
        self.sent += [("stream", r.label) for r in requests]

    def abort(self, requests):
        self.sent += [("abort", r.label) for r in requests]

    def batch(self, requests):
        self.sent += [("batch", r.label) for r in requests]


def test_a_new_phase_kind_is_one_module_and_one_registry_line(matrix_dir, monkeypatch):
    matrix_dir("cpu/mine.yaml", BURST)
    with pytest.raises(MatrixError, match="workload.0.kind"):
        load_matrix(matrix_dir.root)  # not registered: an unknown kind
    monkeypatch.setitem(PHASE_KINDS.members, "burst", "tests.plugins.burst_phase")
    m = load_matrix(matrix_dir.root)
    case = expand(m, "mine").cases[0]
    assert [p.kind for p in workload_of(m, case)] == ["burst"]
    (plan,) = plan_workload(m, case)
    assert [r.label for r in plan.requests] == [f"burst:{i}" for i in (0, 1, 2)] * 2
    assert plan.in_flight == 6 and len(plan.requests[0].prompt) == 16
    assert resolve_case(m, case).phases == (plan,)
    assert workload_problems(m, case) == []
    sender = Recorder()
    PHASE_KINDS["burst"].send(plan, sender)
    assert sender.sent == [("stream", r.label) for r in plan.requests]
    assert not_exercised(plan, PhaseOutputs(metrics={"peak_running": 2.0})) == "peak of 2 running, 6 sent"
    assert not_exercised(plan, PhaseOutputs(metrics={"peak_running": 6.0})) is None
    # streamed: it may bound throughput and TTFT, which lint refuses on a kind that does not stream
    matrix_dir("cpu/mine.yaml", BURST.replace("requests: 3}", "requests: 3, max_ttft_s: 2}"))
    m = load_matrix(matrix_dir.root)
    assert workload_problems(m, expand(m, "mine").cases[0]) == []


def test_a_new_report_format_is_one_module_and_one_registry_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(REPORT_FORMATS.members, "csv", "tests.plugins.csv_report")
    m = load_matrix()
    cases = expand(m, "smoke-cpu").cases
    report_claims(cases, tmp_path / "claims")
    lines = (tmp_path / "claims" / "support.csv").read_text().splitlines()
    assert lines[0] == "case,claim,outcome" and len(lines) == len(cases) + 1
    assert f"{cases[0].id},{cases[0].expectation.kind.value}," in lines
    assert (tmp_path / "claims" / "support.md").is_file()  # the shipped formats are still written
    assert main(["report", "--claims-only", "--suite", "smoke-cpu", "--out", str(tmp_path / "cli"), "-q"]) == 0
    assert str(tmp_path / "cli" / "support.csv") in capsys.readouterr().out.splitlines()

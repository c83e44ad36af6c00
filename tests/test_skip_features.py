"""A feature of a P/D case that one instance runs without (a suite group's ``prefill:`` or
``decode:`` side, ``skip_features``): that launch gets none of the feature's flags, env or
configs, the other launch all of them, and the case is still the feature's case."""

import json

import pytest

from harness.cases.expand import expand
from harness.cases.lint import lint
from harness.matrix.load import MatrixError, load_matrix
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan

SUITE = """\
suites:
  pd-graph:
    title: graph mode on the decode instance only
    platform: ascend
    groups:
      - families: [guide-61-layer]
        topologies: [pd-p-tp8pp2-d-tp1]
        features: [graph-mode, none]
        prefill:
          skip_features: [{skip}]
"""


def _compilation(launch) -> dict | None:
    argv = list(launch.argv)
    return json.loads(argv[argv.index("--compilation-config") + 1]) if "--compilation-config" in argv else None


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_the_skipping_instance_runs_without_the_feature_and_the_other_with_it(matrix_dir):
    matrix_dir("ascend/pd-graph.yaml", SUITE.format(skip="graph-mode"))
    m = load_matrix(matrix_dir.root)
    cases = {c.id: c for c in expand(m, "pd-graph").cases}
    case = cases["guide-61-layer/pd-p-tp8pp2-d-tp1/auto/graph-mode"]
    assert list(case.features) == ["graph-mode"]
    launches = {launch.role: launch for launch in plan(m, case, load_cluster("a3-pd")).launches}
    assert _compilation(launches["prefill"]) is None
    assert _compilation(launches["decode"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    # the feature's rules and cells still see the case as a graph-mode case
    assert "graph-mode" in case.attrs["features"]
    assert not [w for w in lint(m).warnings if "skip_features" in str(w)]


def test_an_unknown_feature_to_skip_is_an_error_at_its_file_with_a_suggestion(matrix_dir):
    path = matrix_dir("ascend/pd-graph.yaml", SUITE.format(skip="graph-mod"))
    with pytest.raises(MatrixError) as err:
        load_matrix(matrix_dir.root)
    text = str(err.value)
    assert path.name in text and "unknown feature in a group's prefill.skip_features 'graph-mod'" in text
    assert "graph-mode" in text.split("'graph-mod'", 1)[1]  # the closest valid name


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_skipping_a_feature_no_case_of_the_group_runs_is_a_lint_warning_at_its_line(matrix_dir):
    path = matrix_dir("ascend/pd-graph.yaml", SUITE.format(skip="mtp"))
    m = load_matrix(matrix_dir.root)
    (warning,) = [w for w in lint(m).warnings if "skip_features" in str(w)]
    assert "suites.pd-graph.groups[0].prefill.skip_features: no P/D case of the group runs mtp" in str(warning)
    assert warning.where is not None and warning.where.file.endswith(path.name) and warning.where.line == 10

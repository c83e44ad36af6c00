"""Matrix values that would run commands where a plan or a repro bundle is written for a shell."""

import subprocess

import pytest

from harness.check.verdict.repro import write_bundle
from harness.launch import Deployment, LaunchSpec, PlanError
from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError
from tests.records import result


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


@pytest.mark.parametrize(
    "section,body",
    [
        ("features", "features:\n  evil:\n    title: x\n    env:\n      'A=1; touch X; B': '1'\n"),
        (
            "platforms",
            "platforms:\n  evil:\n    title: x\n    device_env: X\n    device_format: comma-list\n"
            "    ray_env:\n      'A=1; touch X; B': '1'\n",
        ),
        (
            "platforms",
            "platforms:\n  evil:\n    title: x\n    device_env: 'X; touch Y'\n    device_format: comma-list\n",
        ),
        (
            "families",
            "families:\n  evil:\n    title: x\n    variants:\n      v:\n        architecture: A\n"
            "        supports_pp: true\n        model: m\n        env:\n          \"B\\n\": '1'\n",
        ),
    ],
)
def test_env_names_must_be_identifiers_at_load(matrix_dir, section, body):
    matrix_dir("evil.yaml", body)
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/evil.yaml:") and "should match pattern" in e for e in errs), errs


def test_cluster_node_env_names_are_checked(tmp_path):
    from harness.plan.cluster import load_cluster

    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\nnodes:\n  - name: n0\n    host: localhost\n    address: 127.0.0.1\n"
        "    devices: [0]\n    env:\n      'A=1; touch X; B': '1'\n"
    )
    with pytest.raises(MatrixError) as err:
        load_cluster(str(path))
    assert "c.yaml:" in str(err.value) and "should match pattern" in str(err.value)


def test_names_with_a_trailing_newline_are_refused(matrix_dir):
    matrix_dir("evil.yaml", 'topologies:\n  "pp2\\n":\n    pp: 2\n')
    errs = errors_of(matrix_dir.root)
    assert any("evil.yaml:2:" in e and "must match" in e for e in errs), errs


@pytest.mark.parametrize("partition", ["1,4\\ntouch /tmp/x", "1;4", "$(id)"])
def test_partitions_are_integers_and_commas_only(matrix_dir, partition):
    matrix_dir(
        "evil.yaml",
        f"""\
        suites:
          evil:
            title: x
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
                partitions: ["{partition}"]
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("evil.yaml:" in e and "partition" in e for e in errs), errs


def test_shell_refuses_an_env_name_it_cannot_quote():
    spec = LaunchSpec("n0", "api", "local", "localhost", ("vllm", "serve", "m"), (("A=1; touch X; B", "1"),))
    with pytest.raises(PlanError, match="not a valid identifier"):
        spec.shell()


def test_a_newline_in_the_case_id_or_reason_stays_inside_the_comment(tmp_path):
    marker = tmp_path / "pwned"
    d = Deployment(("c",), (LaunchSpec("n0", "api", "local", "localhost", ("true",), ()),), "n0")
    rec = result(f"fam/pp2/1,4\ntouch {marker}\n/none", "FAIL", reason=f"HTTP 500:\ntouch {marker}")
    info = write_bundle(tmp_path, rec, d, tmp_path / "m", {})
    subprocess.run(["bash", f"{info['dir']}/commands.sh"], check=True)
    assert not marker.exists()


def test_a_report_of_a_record_with_an_unquotable_env_name_shows_no_command(tmp_path):
    from harness.results import store as results
    from reports.render import report_run

    launch = {
        "name": "n0",
        "role": "api",
        "node": "local",
        "host": "localhost",
        "argv": ["vllm", "serve"],
        "env": {"A=1; touch X; B": "1"},
        "port": 8000,
        "set_env": None,
    }
    results.append(
        tmp_path,
        {
            "case": "qwen3-tiny/pp2-tp1-mp/auto/none",
            "suite": "s",
            "family": "qwen3-tiny",
            "variant": "default",
            "topology": "pp2-tp1-mp",
            "partition": "auto",
            "features": [],
            "platform": "cpu",
            "expectation": {"kind": "supported"},
            "outcome": "FAIL",
            "reason": "x",
            "observation": {},
            "deployment": {"launches": [launch]},
            "started": "2026-11-30T20:00:00+00:00",
            "duration_s": 1.0,
        },
    )
    report_run(tmp_path, tmp_path / "report")
    html = (tmp_path / "report" / "support.html").read_text()
    assert "not shown" in html and "export A=1; touch X; B" not in html

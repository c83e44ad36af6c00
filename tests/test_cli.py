import json
import platform
import subprocess
import sys

import pytest

from harness.cli import main
from harness.target.versions import ISA_FLAGS


def run(*argv):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)


def test_partition_tuning_advice_from_measured_stages(capsys):
    assert main(["partition", "--layers", "61", "--pp", "2", "--partition", "31,30", "--step-ms", "12,15.1"]) == 0
    out = capsys.readouterr().out
    assert (
        "by forward time: stage 1 is the costliest (25.8% above the cheapest): try VLLM_PP_LAYER_PARTITION=32,29" in out
    )
    assert "by memory: not measured on every stage" in out
    assert main(["partition", "--layers", "61", "--pp", "2", "--step-ms", "12"]) == 2
    assert "--step-ms '12': 1 values for 2 stages" in capsys.readouterr().err


def test_partition_ok_and_rejected(capsys):
    assert main(["partition", "--layers", "61", "--pp", "4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "[15,15,16,15]" and "PP rank 3: [46, 61)" in out
    assert main(["partition", "--layers", "61", "--pp", "2", "--partition", "32,30"]) == 1
    assert capsys.readouterr().err.strip() == "sum(partitions)=62 does not match num_hidden_layers=61."
    assert main(["partition", "--layers", "61", "--pp", "2", "--partition", "0,61", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranges"] == [[0, 0], [0, 61]]
    assert main(["partition", "--layers", "61", "--pp", "2", "--partition", "0,61", "--rules", "ascend-doc"]) == 1


@pytest.mark.slow  # over 2 s: it lints or expands every shipped suite
def test_lint_and_expand_on_shipped_matrix(capsys):
    assert main(["lint"]) == 0
    assert main(["expand", "--suite", "nightly-ascend", "--count"]) == 0
    out = capsys.readouterr().out
    assert "pairwise" in out and "possible pairs" in out and "full product" in out


def test_guide_single_node_example(capsys, matrix_dir):
    matrix_dir(
        "ascend/single.yaml",
        """\
        suites:
          single:
            title: the guide's minimal PP syntax on two NPUs
            platform: ascend
            groups:
              - families: [guide-61-layer]
                topologies: [pp2-tp1]
        """,
    )
    assert (
        main(
            [
                "plan",
                "--matrices",
                str(matrix_dir.root),
                "--suite",
                "single",
                "--case",
                "guide-61-layer/pp2-tp1/auto/none",
                "--cluster",
                "a3-16npu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "export ASCEND_RT_VISIBLE_DEVICES=0,1\n" in out
    assert (
        "vllm serve /path/to/model \\\n    --tensor-parallel-size 1 \\\n    --pipeline-parallel-size 2 \\\n"
        "    --trust-remote-code"
    ) in out


def test_bad_matrix_exits_2_with_positions(matrix_dir):
    matrix_dir("extra.yaml", "features:\n  x:\n    title: t\n    exclusiv: g\n")
    p = run("lint", "--matrices", str(matrix_dir.root))
    assert p.returncode == 2
    assert "extra.yaml:4:5" in p.stderr and "did you mean 'exclusive'" in p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_case_suggests(capsys):
    assert main(["plan", "--suite", "smoke-cpu", "--case", "qwen3-tiny/pp2-tp1-mp/auto/nne"]) == 2
    assert "did you mean 'qwen3-tiny/pp2-tp1-mp/auto/none'" in capsys.readouterr().err


def test_plan_json(capsys):
    assert (
        main(["plan", "--suite", "smoke-cpu", "--case", "qwen3-tiny/pp2-tp1-2node-mp/auto/none", "--format", "json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert [l["role"] for l in d["launches"]] == ["api", "headless"]


def test_a_resumed_run_keeps_the_cluster_it_started_on(tmp_path, monkeypatch):
    import json
    import sys

    inventory = tmp_path / "box.yaml"
    inventory.write_text(
        f"name: box\nplatform: cpu\nnodes:\n  - name: box\n    host: localhost\n"
        f"    address: 127.0.0.1\n    devices: [0]\n    python: {sys.executable}\n"
    )
    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # the inventory is named relative to where ppconf was started
    assert main(["run", "--suite", "families-cpu", "--cluster", "box.yaml", "--out", str(run)]) == 0
    meta = json.loads((run / "run.json").read_text())
    assert meta["cluster"] == "box" and meta["cluster_ref"] == str(inventory)
    assert list(meta["versions"]) == ["box"]
    # the machine is in the stack: this host's instruction set, as its /proc/cpuinfo lists it
    machine, *flags = meta["versions"]["box"]["isa"].split()
    listed = next(l for l in open("/proc/cpuinfo") if l.startswith(("flags", "Features"))).split(":")[1].split()
    assert machine == platform.machine() and flags == sorted(f for f in ISA_FLAGS[machine] if f in listed)
    monkeypatch.chdir(tmp_path.parent)
    assert main(["run", "--resume", str(run)]) == 0
    meta = json.loads((run / "run.json").read_text())
    assert "versions_on_resume" not in meta, "the resumed run probed other nodes than the run's own"


def test_the_reference_cache_defaults_to_the_environment(monkeypatch, tmp_path):
    from harness.cli import build_parser

    monkeypatch.delenv("PPCONF_REFERENCE_CACHE", raising=False)
    assert build_parser().parse_args(["run", "--suite", "s"]).reference_cache is None
    monkeypatch.setenv("PPCONF_REFERENCE_CACHE", str(tmp_path))
    assert build_parser().parse_args(["run", "--suite", "s"]).reference_cache == tmp_path
    given = build_parser().parse_args(["run", "--suite", "s", "--reference-cache", "elsewhere"])
    assert str(given.reference_cache) == "elsewhere"  # the option wins

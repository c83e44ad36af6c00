"""vllm-ascend's facts read from its source (scripts/ascend_facts.py), and lint's checks on them:
--additional-config keys and sub-keys, VLLM_ASCEND_* env names, kv ports in a transport's
reserved range; and the P/D planner keeping its kv ports out of that range."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.expand import expand, select
from harness.launch import LaunchSpec
from harness.matrix.facts import read_facts
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.validate import (
    additional_config_errors,
    plugin_env_errors,
    reserved_port_errors,
    summarize,
    validate_cases,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
CHECKOUT = DATA / "vllm-ascend-source"  # a cut-down vllm-ascend: one of each way it reads a fact
EXPECTED = DATA / "vllm-ascend-source-facts.json"
SHIPPED = DEFAULT_MATRICES / "ascend" / "vllm-ascend-facts.json"


def script():
    spec = importlib.util.spec_from_file_location("ascend_facts", ROOT / "scripts" / "ascend_facts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_script_reads_each_fact_from_a_checkout_folder(tmp_path):
    out = tmp_path / "facts.json"
    assert script().main([str(CHECKOUT), "--commit", "fixture", "--out", str(out)]) == 0
    assert out.read_text() == EXPECTED.read_text()
    facts = read_facts(out)
    # the split key is refused with vllm-ascend's own message; its two halves are read
    assert "split" in facts.removed_additional_config["enable_sparse_c8"].message
    assert {"enable_sparse_sfa_c8", "enable_sparse_li_c8"} <= set(facts.additional_config)
    # a sub-config followed through the class it is handed to, its _defaults included; one that
    # takes **kwargs passes any key on
    chunk = facts.additional_config["scheduler_config"].keys["profiling_chunk_config"]
    assert set(chunk.keys) == {"enabled", "min_chunk"}
    assert facts.additional_config["ascend_compilation_config"].open
    # env names read (a variable only written is not one), and the transport's reserved range
    assert set(facts.env) == {
        "VLLM_ASCEND_ENABLE_MLAPO",
        "VLLM_ASCEND_ENABLE_NZ",
        "ASCEND_TRANSFER_TIMEOUT",
        "HCCL_OP_EXPANSION_MODE",
    }
    (reserved,) = facts.reserved_ports
    assert (reserved.transport, reserved.first, reserved.per_device) == ("AscendDirectTransport", 20000, 1000)
    assert reserved.span(16) == range(20000, 36000)


@pytest.mark.parametrize("bare", [False, True])
def test_the_script_reads_a_git_repository_at_its_commit(tmp_path, bare):
    work = tmp_path / "vllm-ascend"
    shutil.copytree(CHECKOUT, work)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fixture"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (work / "vllm_ascend" / "envs.py").unlink()  # the work tree's state is not what is read
    source = work
    if bare:
        source = tmp_path / "bare.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(source)], check=True)
    out = tmp_path / "facts.json"
    script().main([str(source), "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["source"]["commit"] == commit
    assert {**data, "source": {**data["source"], "commit": "fixture"}} == json.loads(EXPECTED.read_text())


def test_a_source_without_the_fact_is_an_error_not_an_empty_list(tmp_path):
    copy = tmp_path / "vllm-ascend"
    shutil.copytree(CHECKOUT, copy)
    (copy / "docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md").write_text("moved\n")
    with pytest.raises(SystemExit, match="reserved port range"):
        script().main([str(copy), "--commit", "fixture", "--out", str(tmp_path / "facts.json")])


def test_the_shipped_facts_are_the_scripts_output():
    """As the script writes it (not edited by hand), read at a named vllm-ascend commit, with the
    split sparse C8 switch in its two halves."""
    text = SHIPPED.read_text()
    assert script().render(json.loads(text)) == text
    facts = read_facts(SHIPPED)
    assert facts.source.repository == "vllm-project/vllm-ascend"
    assert len(facts.source.commit) == 40 and int(facts.source.commit, 16) >= 0
    assert "enable_sparse_c8" not in facts.additional_config
    assert {"enable_sparse_sfa_c8", "enable_sparse_li_c8", "xlite_graph_config"} <= set(facts.additional_config)
    assert facts.reserved_ports and all(r.read_in.startswith("docs/") for r in facts.reserved_ports)


def test_the_ascend_platform_checks_against_the_facts(shipped):
    ascend = shipped.platforms["ascend"]
    assert ascend.facts == read_facts(SHIPPED)
    errors = additional_config_errors(
        ascend,
        {
            "enable_sparse_c8": True,
            "enable_sparse_li_c8": True,
            "xlite_graph_config": {"enabled": True},
            "scheduler_config": {"profiling_chunk_config": {"enable": True}},
            "ascend_compilation_config": {"anything": 1},  # **kwargs: passed on
            "enable_kvpp": True,  # documented by its guide (platforms.yaml), newer than the facts
        },
        set(),
    )
    assert errors == [
        f"unknown key 'enable_sparse_c8' (did you mean 'enable_sparse_li_c8'?) "
        f"(vllm-project/vllm-ascend@{ascend.facts.source.commit[:12]} reads no such key)",
        "unknown key scheduler_config.profiling_chunk_config.enable (did you mean 'enabled'?) "
        f"(vllm-project/vllm-ascend@{ascend.facts.source.commit[:12]} reads no such key in "
        "scheduler_config.profiling_chunk_config)",
    ]
    (removed,) = additional_config_errors(ascend, {"enable_sleep_mode_extra_cleanup": True}, set())
    assert "rl_config.sleep_mode_extra_cleanup" in removed and ascend.facts.source.commit in removed


def test_a_plugin_env_name_the_plugin_does_not_read(shipped):
    launch = LaunchSpec(
        "node0",
        "api",
        "node0",
        "h",
        ("vllm", "serve", "m"),
        (("VLLM_ASCEND_ENABLE_MLAP0", "1"), ("VLLM_ASCEND_ENABLE_NZ", "0"), ("HCCL_BUFFSIZE", "200")),
        8000,
        env_origins=(("VLLM_ASCEND_ENABLE_MLAP0", ("matrices/features.yaml:9:7 (feature x)",)),),
    )
    (err,) = plugin_env_errors(shipped.platforms["ascend"], launch, load_cluster("a3-pd"))
    assert "env VLLM_ASCEND_ENABLE_MLAP0 is not a variable vllm-project/vllm-ascend@" in err
    assert "(did you mean 'VLLM_ASCEND_ENABLE_MLAPO'?); given at matrices/features.yaml:9:7 (feature x)" in err
    assert plugin_env_errors(shipped.platforms["cpu"], launch, load_cluster("a3-pd")) == []


def kv_ports(d):
    return [json.loads(l.argv[l.argv.index("--kv-transfer-config") + 1])["kv_port"] for l in d.launches[:2]]


def test_the_pd_planner_keeps_kv_ports_out_of_the_reserved_range(shipped):
    """vllm-ascend's guide: on 16-NPU nodes AscendDirectTransport takes [20000, 36000), so kv_port
    36000 or above; on 8-NPU nodes [20000, 28000), where the default 30000 is clear."""
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["guide-61-layer/pd-p-tp2pp2-d-tp4/auto/none"])
    for cluster, want in (("a3-pd", ["36000", "36100"]), ("a3-2node", ["30000", "30100"])):
        d = plan(shipped, case, load_cluster(cluster))
        assert kv_ports(d) == want, cluster
        assert reserved_port_errors(shipped.platforms["ascend"], case, d, load_cluster(cluster)) == []


@pytest.mark.slow  # plans a suite and builds vLLM's own serve parser where vLLM is installed
def test_lint_names_where_each_fact_it_checks_was_broken(matrix_dir):
    matrix_dir(
        "features-extra.yaml",
        """
        features:
          own-mooncake:
            title: a feature that brings its own Mooncake connector and port
            configs:
              kv-transfer-config: {kv_connector: MooncakeConnectorV1, kv_role: kv_both, kv_port: 30000}
              additional-config: {enable_sparse_c8: true}
            env: {VLLM_ASCEND_ENABLE_MLAP0: "1"}
        suites:
          t:
            title: t
            platform: ascend
            groups:
              - {families: [glm-5.2], topologies: [tp8-pp2], features: [own-mooncake]}
        """,
    )
    m = load_matrix(matrix_dir.root)
    report = validate_cases(m, expand(m, "t").cases, load_cluster("a3-16npu"))
    ports = [e for e in summarize(report.errors) if "kv ports" in e]
    assert ports and all("matrices/features-extra.yaml:6:" in e for e in ports)
    assert "kv ports 30000-30015 on node node0 fall in [20000, 36000), where AscendDirectTransport" in ports[0]
    assert "use kv_port 36000 or above" in ports[0]
    (env,) = [e for e in summarize(report.errors) if "VLLM_ASCEND_ENABLE_MLAP0" in e]
    assert "did you mean 'VLLM_ASCEND_ENABLE_MLAPO'?" in env and "matrices/features-extra.yaml:8:" in env
    (key,) = [e for e in summarize(report.errors) if "enable_sparse_c8" in e]
    assert "--additional-config: unknown key 'enable_sparse_c8' (did you mean 'enable_sparse_li_c8'?)" in key
    assert "matrices/features-extra.yaml:7:" in key

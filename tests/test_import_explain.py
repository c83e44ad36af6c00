"""`ppconf import --explain`: each node of vllm-ascend's own nightly configs (tests/data/vllm-ascend)
beside the launch ppconf plans for it, with every flag and variable accounted for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.importers.explain import node_lines
from harness.importers.vllm_ascend import ConfigNode
from harness.launch import LaunchSpec

DATA = Path(__file__).parent / "data" / "vllm-ascend"
CONFIGS = sorted(DATA.glob("*.yaml"))


def explained(tmp_path: Path, capsys, *paths: Path) -> str:
    assert main(["import", "vllm-ascend-nightly", *map(str, paths), "--out", str(tmp_path / "out"), "--explain"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_flag_and_variable_of_every_node_is_kept_dropped_with_why_or_changed(tmp_path, capsys, config):
    out = explained(tmp_path, capsys, config)
    nodes = out.split("-- config node ")[1:]
    assert nodes, out
    for node in nodes:
        given = re.search(r"   config: vllm serve \S+ (.*)", node)[1]
        for flag in re.findall(r"(?:^| )(--[a-z0-9-]+)", given):
            assert re.search(rf"^  (kept|dropped|changed) +flag {flag}\b", node, re.M), (flag, node)
        for line in node.splitlines():
            if line.startswith(("  dropped", "  added", "  changed")):
                assert "  # " in line and "bug of the import" not in line, line


def test_the_planned_layout_replaces_the_configs_and_says_so(tmp_path, capsys):
    out = explained(tmp_path, capsys, DATA / "Qwen3-235B-A22B.yaml")
    assert "dropped flag --host 0.0.0.0  # the address: ppconf binds what the cluster inventory gives" in out
    assert re.search(r"dropped flag --data-parallel-address \$LOCAL_IP  # the node layout.*planned: 192\.0\.2\.10", out)
    assert re.search(r"kept +flag --seed 1024\n", out)
    assert re.search(r"added +flag --pipeline-parallel-size 1  # .*topologies\.yaml:\d+:\d+ \(topology", out)
    assert re.search(r"added +env  HCCL_IF_IP=192\.0\.2\.11  # planned by ppconf for this node", out)
    assert "-> node1-headless (headless on node1)" in out
    assert "dropped env  SERVER_PORT=8080  # the runner's port variable: ppconf picks the ports" in out


def test_a_pd_pair_names_the_proxy_ppconf_adds(tmp_path, capsys):
    out = explained(tmp_path, capsys, DATA / "Qwen3-235B-disagg-pd.yaml")
    assert "-> prefill (prefill on node0)" in out and "-> decode (decode on node1)" in out
    assert "-- added by ppconf: proxy (proxy on node0)" in out
    assert "dropped flag --kv-transfer-config" in out and "ppconf's P/D plan writes it" in out


def test_an_external_dp_config_is_explained_rank_by_rank_and_its_proxy_planned(tmp_path, capsys):
    out = explained(tmp_path, capsys, DATA / "generic_dp_smoke.yaml")
    for rank, node in enumerate(["node0", "node0", "node1", "node1"]):
        assert f"-> dp{rank} (dp-rank on {node})" in out
    ranks = out.split("-- config node ")[1:]
    assert len(ranks) == 4 and "the config has" not in out
    for rank, text in enumerate(ranks):
        assert re.search(rf"kept +flag --data-parallel-rank {rank}\n", text)
        assert re.search(rf"kept +env  ASCEND_RT_VISIBLE_DEVICES={rank % 2}\n", text)
        assert f"dropped flag --port {7100 + rank % 2}  # the port: ppconf picks" in text
    # the cluster's DP proxy over the four ranks' API servers, where their runner starts theirs
    assert "-- not planned by ppconf" not in out
    (proxy,) = [line for line in out.splitlines() if line.startswith("-- added by ppconf: proxy (proxy on node0)")]
    assert "external_online_dp/dp_load_balance_proxy_server.py" in proxy
    assert "--dp-hosts 192.0.2.10 192.0.2.10 192.0.2.11 192.0.2.11 --dp-ports 8001 8002 8003 8004" in proxy


def test_a_flag_the_plan_lost_is_an_unexplained_difference():
    node = ConfigNode([("--seed", None), ("1", None), ("--max-num-seqs", None), ("8", None)], {"A": ("1", None)}, None)
    launch = LaunchSpec("node0-api", "api", "n", "h", ("vllm", "serve", "M", "--seed", "2"), (("B", "2"),))
    lines = {(line.what, line.name): line for line in node_lines(node, launch, None)}
    assert lines[("changed", "--seed")].render().strip().startswith("changed flag --seed 1 -> 2")
    assert "bug of the import" in lines[("dropped", "--max-num-seqs")].why
    assert (lines[("dropped", "A")].config, lines[("added", "B")].plan) == ("1", "2")

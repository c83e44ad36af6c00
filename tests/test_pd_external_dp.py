"""P/D over external-DP ranks: a side with ``dp_mode: external`` is a `vllm serve` per DP rank
(its own devices, API port and ``--data-parallel-rank``, the side's ranks meeting at its first
node), spread over the side's nodes; the proxy is given every server of each side; the schedule
leases each side's nodes; the plan checks see each rank's world and kv ports."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.cases.expand import expand
from harness.matrix.load import MatrixError, load_matrix
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan
from harness.plan.schedule import need_of
from harness.plan.validate import _port_errors, check_deployment

SUITE = """\
topologies:
  pd-ext-decode:
    title: prefill TP4 x PP2 on one node, decode DP4 x TP4 as a server per DP rank
    tp: 4
    pp: 2
    decode: {tp: 4, dp: 4, dp_mode: external}
    connector: MooncakeConnectorV1
  pd-ext-both-3node:
    title: prefill DP2 x TP4 x PP2 per rank, decode DP4 x TP8 over two nodes, each a server per DP rank
    tp: 4
    pp: 2
    dp: 2
    dp_mode: external
    decode: {tp: 8, dp: 4, nnodes: 2, dp_mode: external}
    connector: MooncakeConnectorV1
suites:
  pd-ext:
    title: P/D over external-DP ranks
    platform: ascend
    groups:
      - families: [guide-61-layer]
        topologies: [pd-ext-decode, pd-ext-both-3node]
"""

THREE_NODES = """\
name: a3-pd-3
platform: ascend
pd_proxy: [python3, proxy.py]
nodes:
"""


@pytest.fixture
def m(matrix_dir):
    matrix_dir("ascend/pd-ext.yaml", SUITE)
    return load_matrix(matrix_dir.root)


def cases(m):
    return {c.topology: c for c in expand(m, "pd-ext").cases}


def three_nodes(tmp_path):
    text = THREE_NODES + "".join(
        f"  - {{name: node{i}, host: npu-{i}, address: 192.0.2.{10 + i}, nic: eth0, devices: {list(range(16))}, "
        f"vllm: [vllm]}}\n"
        for i in range(3)
    )
    path = tmp_path / "a3-pd-3.yaml"
    path.write_text(text)
    return load_cluster(str(path))


def argv_value(launch, flag):
    argv = list(launch.argv)
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_a_decode_side_with_external_dp_is_a_server_per_rank_behind_the_proxy(m):
    case = cases(m)["pd-ext-decode"]
    d = plan(m, case, load_cluster("a3-pd"))
    assert [(l.name, l.role, l.node) for l in d.launches] == [
        ("prefill", "prefill", "node0"),
        ("decode-dp0", "decode", "node1"),
        ("decode-dp1", "decode", "node1"),
        ("decode-dp2", "decode", "node1"),
        ("decode-dp3", "decode", "node1"),
        ("proxy", "proxy", "node0"),
    ]
    prefill = d.launch("prefill")
    assert argv_value(prefill, "--data-parallel-rank") is None and argv_value(prefill, "--data-parallel-size") is None
    for rank in range(4):
        launch = d.launch(f"decode-dp{rank}")
        assert argv_value(launch, "--data-parallel-size") == "4"
        assert argv_value(launch, "--data-parallel-rank") == str(rank)
        assert argv_value(launch, "--data-parallel-address") == "192.0.2.11"
        # its own four devices of node1's sixteen
        assert launch.env_dict()["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(str(4 * rank + i) for i in range(4))
    ports = [l.port for l in d.launches if l.role == "decode"]
    assert len(set(ports)) == 4
    proxy = list(d.launch("proxy").argv)
    at = proxy.index("--decoder-ports")
    assert proxy[at + 1 : at + 5] == [str(p) for p in ports]
    assert proxy[proxy.index("--prefiller-ports") + 1] == str(prefill.port)
    # the schedule leases what the plan places: 8 devices on one node, 16 on another
    assert need_of(d, m.topologies["pd-ext-decode"]).slots == (8, 16)
    assert [len(devices) for _, devices in d.placement.nodes] == [8, 16]


def test_sides_over_several_nodes_place_each_sides_ranks_on_its_own_nodes(m, tmp_path):
    case = cases(m)["pd-ext-both-3node"]
    cluster = three_nodes(tmp_path)
    d = plan(m, case, cluster)
    serving = [l for l in d.launches if l.role != "proxy"]
    assert [(l.name, l.node) for l in serving] == [
        ("prefill-dp0", "node0"),
        ("prefill-dp1", "node0"),
        ("decode-dp0", "node1"),
        ("decode-dp1", "node1"),
        ("decode-dp2", "node2"),
        ("decode-dp3", "node2"),
    ]
    # each side's ranks meet at the side's first node
    assert {argv_value(l, "--data-parallel-address") for l in serving if l.role == "decode"} == {"192.0.2.11"}
    assert {argv_value(l, "--data-parallel-address") for l in serving if l.role == "prefill"} == {"192.0.2.10"}
    assert d.launch("decode-dp2").env_dict()["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(map(str, range(8)))
    assert need_of(d, m.topologies["pd-ext-both-3node"]).slots == (16, 16, 16)
    # the plan checks: vLLM's world of each rank is its devices, no port is bound twice on a node
    assert check_deployment(m, case, d, cluster).errors == []
    # the Mooncake sizes both sides describe are the pair's
    kv = json.loads(argv_value(d.launch("decode-dp3"), "--kv-transfer-config"))
    assert kv["kv_connector_extra_config"] == {
        "prefill": {"dp_size": 2, "tp_size": 4, "pp_size": 2},
        "decode": {"dp_size": 4, "tp_size": 8, "pp_size": 1},
    }


def test_the_ranks_of_a_side_share_its_kv_port_each_binding_its_own_range(m):
    """The connector offsets a rank's kv ports by its DP rank (x its devices), so the ranks of a
    side share kv_port without a clash, and a side's range meeting another side's is caught."""
    case = cases(m)["pd-ext-decode"]
    d = plan(m, case, load_cluster("a3-pd"))
    assert _port_errors(case, d) == []
    prefill_kv = int(json.loads(argv_value(d.launch("prefill"), "--kv-transfer-config"))["kv_port"])
    # the decode ranks moved onto the prefill's node, their kv_port inside the prefill's 8 ports:
    # rank 0's range [kv+4, kv+7] meets the prefill's; ranks 1-3 start past it and past each other
    moved = tuple(
        replace(l, node="node0", argv=_kv(l, prefill_kv + 4)) if l.role == "decode" else l for l in d.launches
    )
    errors = _port_errors(case, replace(d, launches=moved))
    assert len(errors) == 1 and "prefill (kv ports) and decode-dp0 (kv ports)" in errors[0], errors


def _kv(launch, port):
    argv = list(launch.argv)
    at = argv.index("--kv-transfer-config") + 1
    argv[at] = json.dumps({**json.loads(argv[at]), "kv_port": str(port)})
    return tuple(argv)


@pytest.mark.parametrize(
    "decode, message",
    [
        ("{tp: 4, dp: 4, nnodes: 2}", "the decode instance spans 2 nodes: a P/D side is planned on one node"),
        ("{tp: 4, dp: 3, nnodes: 2, dp_mode: external}", "dp_mode external needs dp > 1 and a multiple of nnodes"),
        ("{tp: 4, dp: 1, dp_mode: external}", "dp_mode external needs dp > 1"),
    ],
)
def test_a_pd_side_over_nodes_needs_external_dp_ranks(matrix_dir, decode, message):
    matrix_dir(
        "ascend/pd-bad.yaml",
        f"topologies:\n  pd-bad:\n    title: bad\n    tp: 4\n    pp: 2\n    decode: {decode}\n",
    )
    with pytest.raises(MatrixError, match=message):
        load_matrix(matrix_dir.root)

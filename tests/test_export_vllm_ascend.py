"""`ppconf export vllm-ascend-nightly`: every supported PP cell of the shipped Ascend suites written
as vllm-ascend's multi-node nightly config, checked against the keys their loader reads, and
imported back through ppconf's own importer to the same launches (argv flags, env, nodes) and
gates. Pure: no vLLM, no devices."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from harness.cases.expand import expand, select
from harness.cli import main
from harness.export.vllm_ascend_nightly import (
    ExportError,
    NotExported,
    benchmarks,
    check_keys,
    dump,
    export_case,
    export_suite,
    planned,
)
from harness.importers.vllm_ascend import ENGINE_READY_ENV, import_configs
from harness.launch import Deployment
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from harness.outcomes import Kind
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan

ASCEND_SUITES = ("nightly-ascend", "release-ascend")
CLUSTER = load_cluster("a3-pd")


@pytest.fixture(scope="module")
def shipped():
    return load_matrix()


def flags(argv: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """`vllm serve MODEL` and the flags after it, by name, each with its values (the order of
    flags is not the launch's meaning: ppconf's merge orders them by layer, and an imported family
    is another layer; --lora-modules takes several values)."""
    head, out = argv[:3], {}
    rest = list(argv[3:])
    while rest:
        name = rest.pop(0)
        assert name.startswith("--"), (name, argv)
        values = []
        while rest and not rest[0].startswith("--"):
            values.append(rest.pop(0))
        out[name] = tuple(values)
    return head, out


def launches(d: Deployment) -> dict[str, tuple]:
    return {
        launch.name: (
            launch.role,
            launch.node,
            flags(launch.argv) if launch.argv[1:2] == ("serve",) else (launch.argv, {}),
            launch.env_dict(),
            launch.port,
        )
        for launch in d.launches
    }


def import_back(tmp_path: Path, shipped, files: dict[str, dict]):
    """The exported files imported in one batch by `ppconf import vllm-ascend-nightly`'s own code,
    layered over the shipped matrices: that matrix, and the one case each file makes, by file."""
    paths = []
    for name, config in files.items():
        paths.append(tmp_path / name)
        paths[-1].write_text(dump(config))  # the text the command writes
    out = tmp_path / "imported"
    imported = import_configs(paths, shipped, None)
    imported.write(out)
    m = load_matrix([DEFAULT_MATRICES, out])
    cases = {}
    for name, sections in imported.files.items():
        (suite,) = sections["suites"]
        (cases[Path(imported.sources[name]).name],) = expand(m, suite).cases
    return m, cases


def supported_pp_cells(m, suite):
    return [c for c in select(expand(m, suite).cases, expr="pp > 1") if c.expectation.kind is Kind.SUPPORTED]


@pytest.mark.parametrize("suite", ASCEND_SUITES)
def test_every_exported_cell_imports_back_to_the_same_launches_and_gates(tmp_path, shipped, suite):
    exported = export_suite(shipped, suite, CLUSTER)
    cells = supported_pp_cells(shipped, suite)
    assert cells, suite
    by_case = {case: name for name, case in exported.cases.items()}
    ray = [c.id for c in cells if shipped.topologies[c.topology].backend == "ray"]
    # every supported PP cell is exported, but for the Ray ones their runner cannot start
    assert sorted(by_case) == sorted(c.id for c in cells if c.id not in ray)
    assert {case for case, _ in exported.skipped} >= set(ray)
    m, back = import_back(tmp_path, shipped, exported.files)
    differ = {}
    for case in (c for c in cells if c.id in by_case):
        config, imported = exported.files[by_case[case.id]], back[by_case[case.id]]
        before, after = launches(planned(shipped, case, CLUSTER)), launches(planned(m, imported, CLUSTER))
        for role, *_, env, _port in before.values():  # their runner exports it to every vllm serve (run.sh)
            if role != "proxy":
                env.setdefault(*ENGINE_READY_ENV)
        if after != before:
            differ[case.id] = diff(before, after)
        # and the gates: the re-imported case's benchmarks are the ones exported
        if benchmarks(m, imported) != config["benchmarks"]:
            differ[case.id] = ("benchmarks", benchmarks(m, imported), config["benchmarks"])
    assert not differ, "\n".join(f"{case}: {d}" for case, d in differ.items())


def diff(before: dict, after: dict) -> list:
    """What differs, launch by launch and part by part (a readable failure)."""
    out: list = [("launches", sorted(before), sorted(after))] if before.keys() != after.keys() else []
    for name in before.keys() & after.keys():
        (role, node, (head, fl), env, port), (role2, node2, (head2, fl2), env2, port2) = before[name], after[name]
        out += [(name, "head", head, head2)] if head != head2 else []
        out += [(name, "flag", k, fl.get(k), fl2.get(k)) for k in sorted(fl | fl2) if fl.get(k) != fl2.get(k)]
        out += [(name, "env", k, env.get(k), env2.get(k)) for k in sorted(env | env2) if env.get(k) != env2.get(k)]
        if (role, node, port) != (role2, node2, port2):
            out.append((name, "place", (role, node, port), (role2, node2, port2)))
    return out


def test_claimed_rejections_and_ray_are_listed_with_why(shipped):
    exported = export_suite(shipped, "nightly-ascend", CLUSTER)
    why = dict(exported.skipped)
    assert "no expected failure" in why["bge-m3/tp8-pp2-2node-mp/auto/none"]
    assert "ray start" in why["deepseek-v4/text/tp8-pp2-2node-ray/auto/none"]
    note = exported.note()
    assert "bge-m3/tp8-pp2-2node-mp/auto/none" in note and "partition oracle" in note
    assert all(name in note for name in exported.files)


def test_addresses_and_port_are_the_runners_variables(shipped):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["guide-61-layer/tp8-pp2-2node-mp/32,29/none"])
    config = export_case(shipped, case, CLUSTER)
    head, worker = (e["server_cmd"].split() for e in config["deployment"])
    assert head[head.index("--master-addr") + 1] == "$MASTER_IP" == worker[worker.index("--master-addr") + 1]
    assert head[head.index("--port") + 1] == "$SERVER_PORT" and "--port" not in worker and "--headless" in worker
    for entry in config["deployment"]:
        # the interface variables are their runner's (DistEnvBuilder); the partition travels
        assert "HCCL_IF_IP" not in entry["envs"] and entry["envs"]["VLLM_PP_LAYER_PARTITION"] == "32,29"
        assert entry["envs"]["SERVER_PORT"] == "8080"
    assert (config["num_nodes"], config["npu_per_node"]) == (2, 8)


def test_a_pd_pair_is_disaggregated_prefill_and_each_side_on_its_own_master(shipped):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none"])
    config = export_case(shipped, case, CLUSTER)
    assert config["disaggregated_prefill"] == {"enabled": True, "prefiller_host_index": [0], "decoder_host_index": [1]}
    assert all("--port $SERVER_PORT" in e["server_cmd"] for e in config["deployment"])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("npu_per_node"), "missing ['npu_per_node']"),
        (lambda c: c.update(nodes=2), "not read by vllm-ascend's loader ['nodes']"),
        (lambda c: c["deployment"][1].pop("envs"), "deployment[1]: missing ['envs']"),
    ],
)
def test_a_file_their_loader_would_not_read_is_refused(shipped, mutate, message):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["guide-61-layer/tp8-pp2-2node-mp/auto/none"])
    config = export_case(shipped, case, CLUSTER)
    mutate(config)
    with pytest.raises(ExportError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_keys(config)


def test_a_rejected_case_is_not_exported(shipped):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["bge-m3/tp8-pp2-2node-mp/auto/none"])
    with pytest.raises(NotExported, match="claimed rejected"):
        export_case(shipped, case, CLUSTER)


def test_the_command_writes_the_configs_and_the_note(tmp_path, capsys):
    assert main(["export", "vllm-ascend-nightly", "--suite", "nightly-ascend", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.glob("*.yaml"))
    assert "guide-61-layer-tp8-pp2-2node-mp-32-29-none.yaml" in files
    assert (tmp_path / "README.md").read_text().startswith("# nightly-ascend: PP cells")
    assert f"{len(files)} configs" in capsys.readouterr().out


def their_argv(config: dict, index: int, ips: list[str]) -> list[str]:
    """What vllm-ascend's runner starts on node ``index``: the node's envs with its own variables
    (MultiNodeConfig: LOCAL_IP, MASTER_IP — the decode side's first node for a decode host),
    ``$VAR`` and ``${VAR}`` in server_cmd replaced from them (``_expand_env``), split by shlex."""
    pd = config.get("disaggregated_prefill") or {}
    decode = pd.get("decoder_host_index", [])
    master = ips[decode[0]] if index in decode else ips[0]
    env = {**{k: str(v) for k, v in config["deployment"][index]["envs"].items()}, "LOCAL_IP": ips[index]}
    env["MASTER_IP"] = master
    text = re.sub(
        r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], m[0]), config["deployment"][index]["server_cmd"]
    )
    return shlex.split(text)


@pytest.mark.parametrize(
    "case_id", ["guide-61-layer/tp8-pp2-2node-mp/32,29/none", "guide-61-layer/pd-p-tp8pp2-d-tp1/auto/none"]
)
def test_their_runner_starts_the_launches_ppconf_plans(shipped, case_id):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=[case_id])
    config = export_case(shipped, case, CLUSTER)
    d = plan(shipped, case, CLUSTER)
    ips = [CLUSTER.node(name).address for name, _ in d.placement.nodes]
    serving = [launch for launch in d.launches if launch.role != "proxy"]
    for index, launch in enumerate(serving):
        head, given = flags(tuple(their_argv(config, index, ips)))
        want_head, want = flags(launch.argv)
        if launch.port is not None:  # where their runner waits for the API
            want["--port"] = ("8080",)
        assert (head, given) == (want_head, want)
        # and the env: the node's envs and what their DistEnvBuilder adds (its address and NIC)
        nic = CLUSTER.node(launch.node).nic
        env = {k: str(v) for k, v in config["deployment"][index]["envs"].items() if k != "SERVER_PORT"}
        env |= {"HCCL_IF_IP": ips[index], **dict.fromkeys(("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"), nic)}
        env["TP_SOCKET_IFNAME"] = nic
        assert env == launch.env_dict()


def test_an_imported_configs_gates_export_as_their_benchmarks(tmp_path, shipped):
    """The other way round: a vllm-ascend config's AISBench benchmarks, imported as ppconf's gates,
    are written back as the same benchmarks, the dataset config's folder (`gsm8k/`) and the data the
    baseline was measured on (`dataset_path`, here gsm8k-lite, which their runner reads in place of
    gsm8k) included."""
    config = yaml.safe_load((Path(__file__).parent / "data" / "vllm-ascend" / "Qwen3-235B-A22B.yaml").read_text())
    config["benchmarks"]["acc"]["dataset_path"] = "vllm-ascend/gsm8k-lite"
    source = tmp_path / "Qwen3-235B-A22B.yaml"
    source.write_text(yaml.safe_dump(config))
    import_configs([source], shipped, None).write(tmp_path / "imported")
    m = load_matrix([DEFAULT_MATRICES, tmp_path / "imported"])
    (case,) = expand(m, "qwen3-235b-a22b").cases
    written = benchmarks(m, case)
    assert written == config["benchmarks"]
    assert written["acc"]["dataset_path"] == "vllm-ascend/gsm8k-lite"
    assert written["perf"]["dataset_conf"] == "gsm8k/gsm8k_gen_0_shot_cot_str_perf"


def test_a_prefill_partition_the_connector_and_the_env_disagree_on_is_an_error(tmp_path, shipped):
    (case,) = select(expand(shipped, "nightly-ascend").cases, ids=["guide-61-layer/pd-p-tp8pp2-d-tp1/32,29/none"])
    config = export_case(shipped, case, CLUSTER)
    assert '"pp_layer_partition":"32,29"' in config["deployment"][0]["server_cmd"]
    config["deployment"][0]["envs"]["VLLM_PP_LAYER_PARTITION"] = "31,30"
    (tmp_path / "pd.yaml").write_text(dump(config))
    with pytest.raises(MatrixError, match=r"pp_layer_partition '32,29': the prefill host's VLLM_PP_LAYER_PARTITION"):
        import_configs([tmp_path / "pd.yaml"], shipped, None)


def test_a_slack_gate_exports_as_their_threshold_with_the_same_bound():
    from harness.export.vllm_ascend_nightly import _threshold
    from harness.matrix.schema import PerfGate

    assert _threshold(PerfGate(output_tokens_per_s=1000.0, ratio=0.95), 1000.0) == 0.95
    # max(0.02 x 1000, 50) = 50 tok/s below the baseline: their 0.95 x 1000
    gate = PerfGate(output_tokens_per_s=1000.0, rel_slack=0.02, abs_slack={"output_tokens_per_s": 50})
    assert _threshold(gate, 1000.0) == pytest.approx(0.95)
    assert _threshold(PerfGate(output_tokens_per_s=1000.0, rel_slack=0.1), 1000.0) == pytest.approx(0.9)

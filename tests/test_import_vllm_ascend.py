"""`ppconf import vllm-ascend-nightly`: vllm-ascend's own nightly configs (tests/data/vllm-ascend,
their source and commit in its README.txt) as matrices that layer over the shipped ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.importers.vllm_ascend import import_configs
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.matrix.source import MatrixError
from harness.plan.cluster import load_cluster
from harness.plan.deployment import plan

DATA = Path(__file__).parent / "data" / "vllm-ascend"
MULTI = DATA / "Qwen3-235B-A22B.yaml"
PD = DATA / "Qwen3-235B-disagg-pd.yaml"
EAGLE3 = DATA / "Qwen3-32B-QuaRot-eagle3.yaml"
INT8 = DATA / "Qwen3-32B-Int8.yaml"
EXTERNAL_DP = DATA / "generic_dp_smoke.yaml"
EXTERNAL_DP_PD = DATA / "disaggregated_prefill_smoke.yaml"
KEPT = [MULTI, PD, EAGLE3, INT8, EXTERNAL_DP, EXTERNAL_DP_PD]
A3_PD = Path(__file__).parents[1] / "clusters" / "a3-pd.yaml"


@pytest.fixture(scope="module")
def shipped():
    return load_matrix()


def imported(tmp_path: Path, shipped, *paths: Path) -> Path:
    out = tmp_path / "imported"
    import_configs(list(paths), shipped, None).write(out)
    return out


def variant(m, family):
    return m.variant(family, "nightly")


def planned(m, suite):
    cluster = load_cluster(str(A3_PD))
    return {c.id: plan(m, c, cluster) for c in expand(m, suite).cases}


def test_a_multi_node_config_becomes_family_topology_and_suite(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, MULTI)])
    v = variant(m, "qwen3-235b-a22b-multi-dp")
    assert v.model == "Qwen/Qwen3-235B-A22B"
    # the flags ppconf plans itself (sizes, addresses, ports, headless) left to the topology
    assert v.serve_args[:2] == ["--seed", "1024"] and "--no-enable-prefix-caching" in v.serve_args
    assert not {"--port", "--host", "--headless", "--tensor-parallel-size"} & set(v.serve_args)
    assert not any(a.startswith("--data-parallel") for a in v.serve_args)
    # env_common as every node's env, $SERVER_PORT's variable left out (ppconf picks ports)
    assert v.env["HCCL_BUFFSIZE"] == "1024" and v.env["VLLM_USE_MODELSCOPE"] == "True"
    assert "SERVER_PORT" not in v.env
    (group,) = m.suites["qwen3-235b-a22b"].groups
    topology = m.topologies[group.topologies[0]]
    assert (topology.tp, topology.pp, topology.dp, topology.nnodes, topology.dp_mode) == (8, 1, 4, 2, "internal")
    assert group.features == ["expert-parallel"]
    # accuracy: AISBench's gsm8k within 3 points of 95, both ways; performance: >= 0.97 x baseline
    score = v.reference.score
    assert (score.tool, score.dataset_config, score.baseline, score.threshold) == (
        "aisbench",
        "gsm8k/gsm8k_gen_0_shot_cot_chat_prompt",  # the folder of AISBench's configs kept
        95.0,
        3.0,
    )
    assert (score.dataset, score.baseline_dataset) == (None, "vllm-ascend/gsm8k")
    perf = next(p for p in group.workload if p.label == "perf")
    assert (perf.kind, perf.requests, perf.max_tokens) == ("concurrent", 700, 1500)
    assert (perf.perf_baseline.output_tokens_per_s, perf.perf_baseline.ratio) == (2209.9211, 0.97)
    # measured as the nightly measures it: AISBench in perf mode with the benchmark's configs and load
    ais = perf.perf_baseline.aisbench
    assert (ais.dataset_config, ais.request_config) == ("gsm8k/gsm8k_gen_0_shot_cot_str_perf", "vllm_api_stream_chat")
    assert (ais.num_prompts, ais.max_out_len, ais.batch_size, ais.request_rate) == (2800, 1500, 700, 11.2)
    # on the benchmark's dataset: no local copy yet (ppconf lint says so), its source named
    assert (ais.dataset, ais.baseline_dataset) == (None, "vllm-ascend/GSM8K-in3500-bs2800")


def test_lint_names_the_data_an_imported_accuracy_baseline_was_measured_on(tmp_path, shipped):
    from harness.cases.lint import _scores_without_dataset

    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, MULTI)])
    (finding,) = _scores_without_dataset(m)
    assert "gsm8k/gsm8k_gen_0_shot_cot_chat_prompt's default data, not the baseline's (vllm-ascend/gsm8k)" in (
        finding.message
    )
    assert finding.where is not None and finding.where.file.endswith("qwen3-235b-a22b.yaml")


def test_timeouts_are_vllm_ascends_own_unless_the_config_sets_the_engines(tmp_path, shipped):
    import yaml

    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path / "a", shipped, MULTI)])
    suite = m.suites["qwen3-235b-a22b"]
    # their runner's health wait (max_wait_seconds=2800) and client timeout (600)
    assert (suite.startup_timeout_s, suite.request_timeout_s) == (2800, 600)
    assert variant(m, "qwen3-235b-a22b-multi-dp").env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"  # run.sh's export
    config = yaml.safe_load(MULTI.read_text())
    for node in config["deployment"]:
        node["envs"]["VLLM_ENGINE_READY_TIMEOUT_S"] = 3000
    own = tmp_path / "Qwen3-235B-A22B.yaml"
    own.write_text(yaml.safe_dump(config))
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path / "b", shipped, own)])
    assert variant(m, "qwen3-235b-a22b-multi-dp").env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3000"


def test_plans_carry_the_configs_flags_and_env_on_every_node(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, MULTI)])
    (deployment,) = planned(m, "qwen3-235b-a22b").values()
    api, headless = deployment.launches
    for launch in (api, headless):
        argv = list(launch.argv)
        for flag, value in (("--seed", "1024"), ("--max-num-seqs", "32"), ("--tensor-parallel-size", "8")):
            assert argv[argv.index(flag) + 1] == value, argv
        assert "--enable-expert-parallel" in argv and argv[argv.index("serve") + 1] == "Qwen/Qwen3-235B-A22B"
        assert launch.env_dict()["HCCL_OP_EXPANSION_MODE"] == "AIV"
        assert launch.env_dict()["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert "--headless" in headless.argv and "--headless" not in api.argv


def test_single_node_test_cases_each_become_a_family_with_their_features(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, EAGLE3, INT8)])
    groups = {g.families[0]: g for s in ("qwen3-32b-int8", "qwen3-32b-quarot-eagle3") for g in m.suites[s].groups}
    assert groups["qwen3-32b-w8a8-aclgraph-a3"].features == ["graph-mode"]
    assert groups["qwen3-32b-w8a8-single-a3"].features == ["enforce-eager"]
    assert groups["qwen3-32b-quarot"].features == ["enforce-eager+eagle3"]
    # server_cmd_extra is part of the launch; the capture sizes the graph-mode feature does not set stay
    graph = variant(m, "qwen3-32b-w8a8-aclgraph-a3").serve_args
    config = graph[graph.index("--compilation-config") + 1]
    assert '"cudagraph_capture_sizes":[1,12,16' in config and "--block-size" in graph
    eagle = variant(m, "qwen3-32b-quarot")
    spec = eagle.serve_args[eagle.serve_args.index("--speculative-config") + 1]
    assert '"model":"RedHatAI/Qwen3-32B-speculator.eagle3"' in spec
    topology = m.topologies[groups["qwen3-32b-quarot"].topologies[0]]
    assert (topology.tp, topology.backend, topology.nnodes) == (2, "mp", 1)
    # the two test cases of one file share their TP4 layout
    assert groups["qwen3-32b-w8a8-aclgraph-a3"].topologies == groups["qwen3-32b-w8a8-single-a3"].topologies
    plans = planned(m, "qwen3-32b-quarot-eagle3")
    (launch,) = next(iter(plans.values())).launches
    assert launch.env_dict()["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert '"num_speculative_tokens":3' in " ".join(launch.argv)


def test_a_feature_that_would_change_the_configs_value_leaves_it_to_the_suite_group(tmp_path, shipped):
    text = EAGLE3.read_text().replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 2')
    config = tmp_path / "eagle3-two.yaml"
    config.write_text(text)
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, config)])
    (group,) = m.suites["eagle3-two"].groups
    assert group.args[0] == "--speculative-config" and '"num_speculative_tokens":2' in group.args[1]
    (deployment,) = planned(m, "eagle3-two").values()
    argv = " ".join(deployment.launches[0].argv)
    assert '"num_speculative_tokens": 2' in argv or '"num_speculative_tokens":2' in argv, argv


def test_pd_from_disaggregated_prefill_gives_each_instance_its_own_flags_and_env(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, PD)])
    (group,) = m.suites["qwen3-235b-disagg-pd"].groups
    topology = m.topologies[group.topologies[0]]
    assert (topology.tp, topology.dp, topology.connector) == (8, 2, "MooncakeConnectorV1")
    assert (topology.decode.tp, topology.decode.dp) == (4, 4)
    # the decode instance's graph mode is recognised as the case's feature too
    assert group.features == ["expert-parallel+graph-mode"]
    # the decode-only graph mode is the decode instance's own; the rest both share
    v = variant(m, "qwen3-235b-a22b-disaggregated_prefill")
    assert v.decode.args == ["--compilation-config", '{"cudagraph_mode":"FULL_DECODE_ONLY"}']
    assert v.prefill is None and "--compilation-config" not in v.serve_args
    (deployment,) = planned(m, "qwen3-235b-disagg-pd").values()
    launches = {launch.role: launch for launch in deployment.launches}
    for role, tp, dp in (("prefill", "8", "2"), ("decode", "4", "4")):
        argv = list(launches[role].argv)
        assert argv[argv.index("--tensor-parallel-size") + 1] == tp
        assert argv[argv.index("--data-parallel-size") + 1] == dp
        for flag, value in (("--seed", "1024"), ("--max-num-batched-tokens", "8192")):
            assert argv[argv.index(flag) + 1] == value, argv
        assert "--enable-expert-parallel" in argv and "--no-enable-prefix-caching" in argv
        assert launches[role].env_dict()["HCCL_OP_EXPANSION_MODE"] == "AIV"
        kv = argv[argv.index("--kv-transfer-config") + 1]
        assert '"kv_connector":"MooncakeConnectorV1"' in kv
        assert '"decode":{"dp_size":4,"tp_size":4,"pp_size":1}' in kv
    # the prefill instance runs without graph mode, as the config has it: the group's prefill side
    # skips the feature, so no compilation config reaches that launch
    assert group.prefill is not None and group.prefill.skip_features == ["graph-mode"] and group.decode is None
    assert "--compilation-config" not in launches["prefill"].argv
    decode = list(launches["decode"].argv)
    assert decode[decode.index("--compilation-config") + 1] == '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
    # where the flag came from: the variant's decode side, at its line of the imported file
    origin = dict(launches["decode"].origins)["--compilation-config"]
    assert any("on the decode instance" in o for o in origin), origin


def test_one_instances_json_flag_a_feature_would_change_decides_over_the_feature(tmp_path, shipped):
    # decode-only PIECEWISE graphs: the graph-mode feature (FULL_DECODE_ONLY) must not replace them
    config = tmp_path / "pd-piecewise.yaml"
    config.write_text(PD.read_text().replace('"cudagraph_mode":"FULL_DECODE_ONLY"', '"cudagraph_mode":"PIECEWISE"'))
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, config)])
    (group,) = m.suites["pd-piecewise"].groups
    assert group.features == ["expert-parallel+graph-mode"]
    assert group.decode.args == ["--compilation-config", '{"cudagraph_mode":"PIECEWISE"}']
    assert group.prefill is not None and group.prefill.skip_features == ["graph-mode"]
    assert variant(m, "qwen3-235b-a22b-disaggregated_prefill").decode is None
    (deployment,) = planned(m, "pd-piecewise").values()
    launches = {launch.role: list(launch.argv) for launch in deployment.launches}
    decode = launches["decode"]
    assert decode[decode.index("--compilation-config") + 1] == '{"cudagraph_mode":"PIECEWISE"}'
    # the prefill instance had no compilation config in the config, and gets none
    assert "--compilation-config" not in launches["prefill"]


def test_env_one_instance_of_a_pd_pair_sets_is_that_instances_own(tmp_path, shipped):
    text = PD.read_text().replace('--compilation-config \'{"cudagraph_mode":"FULL_DECODE_ONLY"}\'', "")
    head, decode = text.rsplit("    envs:\n      <<: *env_common\n", 1)
    config = tmp_path / "pd-env.yaml"
    config.write_text(
        f"{head}    envs:\n      <<: *env_common\n      HCCL_BUFFSIZE: 512\n      ONLY_DECODE: 1\n{decode}"
    )
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, config)])
    v = variant(m, "qwen3-235b-a22b-disaggregated_prefill")
    assert v.decode.env == {"HCCL_BUFFSIZE": "512", "ONLY_DECODE": "1"} and v.decode.args == []
    assert v.prefill.env == {"HCCL_BUFFSIZE": "1024"} and "HCCL_BUFFSIZE" not in v.env
    (deployment,) = planned(m, "pd-env").values()
    env = {launch.role: launch.env_dict() for launch in deployment.launches if launch.role != "proxy"}
    assert (env["prefill"]["HCCL_BUFFSIZE"], env["decode"]["HCCL_BUFFSIZE"]) == ("1024", "512")
    assert env["decode"]["ONLY_DECODE"] == "1" and "ONLY_DECODE" not in env["prefill"]
    assert env["prefill"]["OMP_NUM_THREADS"] == env["decode"]["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize(
    "edit, where, message",
    [
        # a KV-transfer setting ppconf's P/D plan would not write: lost, so refused at its key
        (
            ('"kv_role": "kv_consumer",', '"kv_role": "kv_consumer", "kv_buffer_device": "npu",'),
            '"kv_buffer_device"',
            "--kv-transfer-config key 'kv_buffer_device': not mapped",
        ),
        # sizes the connector is told that are not the pair's
        (
            ('"dp_size": 4,', '"dp_size": 8,'),
            '"dp_size": 8',
            "kv_connector_extra_config.decode.dp_size 8: the decode instance has dp=4",
        ),
        # the two sides on different connectors: ppconf's pair has one
        (
            (
                '"kv_connector": "MooncakeConnectorV1",\n        "kv_role": "kv_consumer"',
                '"kv_connector": "MooncakeConnectorV2",\n        "kv_role": "kv_consumer"',
            ),
            "MooncakeConnectorV2",
            "kv_connector 'MooncakeConnectorV2' on a decode host, 'MooncakeConnectorV1' on the prefill host",
        ),
        # one instance's own flags are checked as the shared ones are
        (
            (
                '--compilation-config \'{"cudagraph_mode":"FULL_DECODE_ONLY"}\'',
                '--speculative-config \'{"method":"bogus_method"}\'',
            ),
            "bogus_method",
            "speculative method 'bogus_method': no feature expresses it",
        ),
    ],
)
def test_what_a_pd_pair_cannot_map_is_an_error_at_its_line(tmp_path, shipped, edit, where, message):
    config = tmp_path / "bad-pd.yaml"
    text = PD.read_text()
    assert edit[0] in text
    # the decode host's copy: the second occurrence
    at = text.rindex(edit[0])
    config.write_text(text[:at] + edit[1] + text[at + len(edit[0]) :])
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert message in str(e)
    line = int(re.match(rf"{re.escape(str(config))}:(\d+):", str(e)).group(1))
    assert where in config.read_text().splitlines()[line - 1], (line, e)


def test_two_hosts_of_one_pd_instance_with_different_flags_is_an_error_at_its_line(tmp_path, shipped):
    # a second decode host whose graph mode differs from the first's: one instance, one set of flags
    text = (
        PD.read_text()
        .replace("num_nodes: 2", "num_nodes: 3")
        .replace("decoder_host_index: [1]", "decoder_host_index: [1, 2]")
    )
    decode = text[text.index("  -\n    envs:", text.index("deployment:") + 20) : text.index("benchmarks:")]
    second = decode.replace("FULL_DECODE_ONLY", "PIECEWISE")
    config = tmp_path / "pd-three.yaml"
    config.write_text(text.replace(decode, decode + second))
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert "--compilation-config is" in str(e) and "on host 2: ppconf gives every launch of one instance" in str(e)
    line = int(re.match(rf"{re.escape(str(config))}:(\d+):", str(e)).group(1))
    assert "PIECEWISE" in config.read_text().splitlines()[line - 1]


@pytest.mark.parametrize(
    "source, edit, message",
    [
        (EAGLE3, ('"method": "eagle3"', '"method": "eagle"'), "speculative method 'eagle': no feature expresses it"),
        (EAGLE3, ('- "8192"', '- "$MAX_LEN"'), "a shell variable ppconf cannot fill"),
        (
            EAGLE3,
            ("    benchmarks:", "    benchmark:\n      {}\n    benchmarks:"),
            "'benchmark': not mapped (did you mean",
        ),
        (EAGLE3, ("request_rate: 0", "request_rat: 0"), "not mapped (did you mean 'request_rate'?)"),
        # a benchmark's numbers, checked where they are written
        (
            EAGLE3,
            ("request_rate: 0", "request_rate: null"),
            "request_rate: Value error, a number is expected, not null",
        ),
        (EAGLE3, ("request_rate: 0", "request_rate: .nan"), "request_rate: Input should be a finite number, got nan"),
        (EAGLE3, ("batch_size: 20", "batch_size: 0"), "batch_size: Input should be greater than or equal to 1, got 0"),
        (EAGLE3, ("max_out_len: 1500", "max_out_len: [1500]"), "max_out_len: Input should be a valid integer"),
        # a multi-node config's too (a P/D pair's)
        (PD, ("request_rate: 11.2", "request_rate: null"), "benchmarks.perf.request_rate: Value error, a number"),
        (PD, ("max_out_len: 7680", "max_out_len: null"), "benchmarks.acc.max_out_len: Value error, a number"),
        (PD, ("baseline: 97", "baseline: 'high'"), "benchmarks.acc.baseline: Input should be a valid number"),
    ],
)
def test_what_cannot_be_mapped_is_an_error_at_its_line(tmp_path, shipped, source, edit, message):
    config = tmp_path / "bad.yaml"
    config.write_text(source.read_text().replace(*edit, 1))
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert message in str(e)
    line = int(re.match(rf"{re.escape(str(config))}:(\d+):", str(e)).group(1))
    written = config.read_text().splitlines()[line - 1]
    assert any(part.strip('"- ') and part.strip('"- ') in written for part in edit[1].split("\n")), (written, e)


def test_a_pp_topology_in_a_private_layer_gives_pp_cases_of_their_own_test(tmp_path, shipped):
    out = imported(tmp_path, shipped, MULTI)
    private = tmp_path / "private"
    private.mkdir()
    # the imported suite again, with the shipped two-node TP8 x PP2 layout beside the config's own
    (private / "pp.yaml").write_text(
        """suites:
  qwen3-235b-a22b:
    title: test Qwen3-235B-A22B multi-dp, and with PP
    platform: ascend
    groups:
      - families: [qwen3-235b-a22b-multi-dp]
        topologies: [tp8-dp4-2node-internal-nightly, tp8-pp2-2node-mp]
        features: [expert-parallel]
"""
    )
    m = load_matrix([DEFAULT_MATRICES, out, private])
    cases = {c.id: c for c in expand(m, "qwen3-235b-a22b").cases}
    pp = cases["qwen3-235b-a22b-multi-dp/nightly/tp8-pp2-2node-mp/auto/expert-parallel"]
    assert pp.attrs["pp"] == 2 and pp.family == "qwen3-235b-a22b-multi-dp"
    assert cases["qwen3-235b-a22b-multi-dp/nightly/tp8-dp4-2node-internal-nightly/auto/expert-parallel"]
    deployment = plan(m, pp, load_cluster(str(A3_PD)))
    for launch in deployment.launches:
        argv = list(launch.argv)
        assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
        assert argv[argv.index("--seed") + 1] == "1024" and "--no-enable-prefix-caching" in argv
        assert launch.env_dict()["HCCL_BUFFSIZE"] == "1024"


@pytest.fixture
def vllm_parser():
    from harness.plan.validate import engine

    eng = engine()
    if isinstance(eng, str):  # marked needs_vllm: an installed vLLM without a parser is a failure
        pytest.fail(eng)
    return eng.parser


def test_an_external_dp_config_plans_a_server_per_dp_rank_with_its_flags_devices_and_port(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, EXTERNAL_DP)])
    v = variant(m, "generic-external-dp")
    assert v.serve_args == ["--trust-remote-code"] and v.env["OMP_NUM_THREADS"] == "10"
    assert not {"SERVER_PORT", "ASCEND_RT_VISIBLE_DEVICES"} & set(v.env)
    (group,) = m.suites["generic_dp_smoke"].groups
    topology = m.topologies[group.topologies[0]]
    assert (topology.tp, topology.pp, topology.dp, topology.nnodes, topology.dp_mode) == (1, 1, 4, 2, "external")
    (d,) = planned(m, "generic_dp_smoke").values()
    # as their runner starts them: ranks 0, 1 on the first node, 2, 3 on the second, each on
    # its own device (its local rank's slice) and its own API port
    assert [(launch.name, launch.node) for launch in d.launches] == [
        ("dp0", "node0"),
        ("dp1", "node0"),
        ("dp2", "node1"),
        ("dp3", "node1"),
        ("proxy", "node0"),  # the cluster's DP proxy over all four, where the client connects
    ]
    assert d.api == "proxy"
    proxy = list(d.launch("proxy").argv)
    assert proxy[proxy.index("--dp-ports") + 1 :] == [str(launch.port) for launch in d.launches[:4]]
    for rank, launch in enumerate(d.launches[:4]):
        argv = " ".join(launch.argv)
        assert f"--data-parallel-size 4 --data-parallel-rank {rank} " in argv and "--trust-remote-code" in argv
        assert "--data-parallel-address 192.0.2.10" in argv and "--headless" not in argv
        assert launch.env_dict()["ASCEND_RT_VISIBLE_DEVICES"] == str(rank % 2)
        assert launch.env_dict()["OMP_NUM_THREADS"] == "10"
    assert len({launch.port for launch in d.launches}) == 5


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("dp_rank_start: 2", "dp_rank_start: 1"),
            "DP ranks 1..2 of 4 on node 1: ppconf plans dp_size / (its nodes) ranks per node",
        ),
        (("    tp_size: 1\n    pp_size: 1\n    dp_address", "    tp_size: 2\n    pp_size: 1\n    dp_address"), "sizes"),
        (("  dp_rpc_port: 12321", "  dp_rpc_port: 12321\n  cp_size: 2"), "cp_size 2: not mapped"),
        (("      - ${TP_SIZE}", "      - 2"), "--tensor-parallel-size 2 but the node's tp_size is 1"),
        (
            ("dp_size_local: 2\n    dp_rank_start: 2", "dp_size_local: two\n    dp_rank_start: 2"),
            "dp_size_local 'two': a whole",
        ),
        (('type: "generic_dp"', 'type: "round_robin"'), "routing.type 'round_robin'"),
    ],
)
def test_what_an_external_dp_config_cannot_map_is_an_error_at_its_line(tmp_path, shipped, edit, message):
    config = tmp_path / "bad.yaml"
    config.write_text(EXTERNAL_DP.read_text().replace(*edit, 1))
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert message in str(e)
    assert re.match(rf"{re.escape(str(config))}:\d+:\d+: ", str(e)), e


def test_pd_over_external_dp_ranks_plans_a_server_per_rank_on_each_side_and_a_proxy_over_all(tmp_path, shipped):
    m = load_matrix([DEFAULT_MATRICES, imported(tmp_path, shipped, EXTERNAL_DP_PD)])
    (group,) = m.suites["disaggregated_prefill_smoke"].groups
    topology = m.topologies[group.topologies[0]]
    assert (topology.tp, topology.dp, topology.nnodes, topology.dp_mode) == (1, 2, 1, "external")
    assert topology.decode is not None and (topology.decode.dp, topology.decode.dp_mode) == (2, "external")
    (d,) = planned(m, "disaggregated_prefill_smoke").values()
    # as their runner starts them: the prefiller group's node runs prefill ranks 0 and 1, the
    # decoder group's node decode ranks 0 and 1, each rank on its own device and API port
    serving = [launch for launch in d.launches if launch.role != "proxy"]
    assert [(launch.name, launch.role, launch.node) for launch in serving] == [
        ("prefill-dp0", "prefill", "node0"),
        ("prefill-dp1", "prefill", "node0"),
        ("decode-dp0", "decode", "node1"),
        ("decode-dp1", "decode", "node1"),
    ]
    kv_ports = {}
    for launch in serving:
        argv = list(launch.argv)
        rank = int(launch.name[-1])
        assert argv[argv.index("--data-parallel-size") + 1] == "2"
        assert argv[argv.index("--data-parallel-rank") + 1] == str(rank)
        # each side's ranks meet at its own first node
        head = "192.0.2.10" if launch.role == "prefill" else "192.0.2.11"
        assert argv[argv.index("--data-parallel-address") + 1] == head
        assert launch.env_dict()["ASCEND_RT_VISIBLE_DEVICES"] == str(rank)
        kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert kv["kv_role"] == ("kv_producer" if launch.role == "prefill" else "kv_consumer")
        assert kv["kv_connector_extra_config"]["decode"] == {"dp_size": 2, "tp_size": 1, "pp_size": 1}
        kv_ports.setdefault(launch.role, set()).add(kv["kv_port"])
    # the ranks of a side share its kv_port (the connector offsets each rank's own), the sides do not
    assert all(len(ports) == 1 for ports in kv_ports.values()) and kv_ports["prefill"] != kv_ports["decode"]
    assert len({launch.port for launch in serving}) == 4
    proxy = list(d.launch("proxy").argv)
    at = proxy.index("--prefiller-ports")
    assert proxy[at + 1 : at + 3] == [str(serving[0].port), str(serving[1].port)]
    at = proxy.index("--decoder-hosts")
    assert proxy[at + 1 : at + 3] == ["192.0.2.11", "192.0.2.11"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (("    decoder: [1]", "    decoder: [0]"), "groups.decoder [0]: node indexes 0..1, each node in one group"),
        (("    decoder: [1]", "    decode: [1]"), "disaggregated_prefill routing needs groups prefiller and decoder"),
        (
            ("    dp_group: decode", "    dp_group: prefill"),
            "dp_group 'prefill' on a node routing.groups puts in decode",
        ),
        (('type: "disaggregated_prefill"', 'type: "pd"'), "routing.type 'pd': not mapped"),
    ],
)
def test_what_an_external_dp_pd_config_cannot_map_is_an_error_at_its_line(tmp_path, shipped, edit, message):
    config = tmp_path / "bad.yaml"
    text = EXTERNAL_DP_PD.read_text()
    assert edit[0] in text
    config.write_text(text.replace(*edit, 1))
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert message in str(e)
    assert re.match(rf"{re.escape(str(config))}:\d+:\d+: ", str(e)), e


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_the_kept_configs_import_with_vllms_parser_and_pass_lint_plans(tmp_path, vllm_parser):
    from harness.cli import main

    out = tmp_path / "imported"
    assert main(["import", "vllm-ascend-nightly", *map(str, KEPT), "--out", str(out)]) == 0
    suites = [s for f in sorted(out.glob("*.yaml")) if f.name != "topologies.yaml" for s in ("--suite", f.stem)]
    assert len(suites) == 2 * len(KEPT)
    args = ["lint", "--plans", "--matrices", str(DEFAULT_MATRICES), "--matrices", str(out), *suites]
    assert main([*args, "--cluster", str(A3_PD)]) == 0


@pytest.mark.slow  # builds vLLM's own serve parser (imports vLLM)
@pytest.mark.needs_vllm
def test_an_option_vllm_does_not_have_is_named_at_its_line(tmp_path, vllm_parser):
    config = tmp_path / "typo.yaml"
    config.write_text(EAGLE3.read_text().replace('"--max-model-len"', '"--max-model-length"'))
    with pytest.raises(MatrixError) as err:
        import_configs([config], load_matrix(), vllm_parser)
    assert "has no option '--max-model-length' (did you mean '--max-model-len'?)" in str(err.value)
    line = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if "--max-model-length" in t)
    assert f"{config}:{line}:" in str(err.value)
    # the parser knows -tp is --tensor-parallel-size, and that --enforce-eager takes no value
    short = tmp_path / "short.yaml"
    short.write_text(EAGLE3.read_text().replace('"--tensor-parallel-size"', '"-tp"'))
    m = load_matrix([DEFAULT_MATRICES, imported_with(tmp_path, vllm_parser, short)])
    assert m.topologies[m.suites["short"].groups[0].topologies[0]].tp == 2
    assert m.variant("qwen3-32b-quarot", "nightly").serve_args[:2] == ["--enforce-eager", "--no-enable-prefix-caching"]


def imported_with(tmp_path: Path, parser, *paths: Path) -> Path:
    out = tmp_path / "imported"
    import_configs(list(paths), load_matrix(), parser).write(out)
    return out


def _with_request_tests(tmp_path: Path, lines: str) -> Path:
    """INT8's first test case with request-test keys of vllm-ascend's single-node format."""
    config = tmp_path / "requests.yaml"
    anchor = '  - name: "Qwen3-32B-W8A8-aclgraph-a3"\n    model: "vllm-ascend/Qwen3-32B-W8A8"\n'
    text = INT8.read_text()
    assert anchor in text
    config.write_text(text.replace(anchor, anchor + lines, 1))
    return config


def test_a_test_cases_prompts_and_test_content_become_its_explicit_requests(tmp_path, shipped):
    config = _with_request_tests(
        tmp_path,
        "    service_mode: openai\n"
        '    prompts: ["San Francisco is a", "The capital of France is"]\n'
        "    api_keyword_args: {max_tokens: 10}\n"
        '    test_content: ["completion", "chat_completion"]\n',
    )
    out = tmp_path / "imported"
    import_configs([config], shipped, None).write(out)
    m = load_matrix([DEFAULT_MATRICES, out])
    (group,) = [g for g in m.suites["requests"].groups if g.families == ["qwen3-32b-w8a8-aclgraph-a3"]]
    (phase,) = [p for p in group.workload if p.kind == "explicit"]
    sent = [r.model_dump(exclude_none=True) for r in phase.explicit]
    assert [(r["endpoint"], r["max_tokens"], r["seed"]) for r in sent] == [("completions", 10, 0)] * 2 + [
        ("chat", 10, 0)
    ] * 2
    assert sent[0]["prompt"] == "San Francisco is a"
    assert sent[3]["messages"][0]["content"] == "The capital of France is"
    # the other test case of the file says nothing of requests: no explicit phase
    (other,) = [g for g in m.suites["requests"].groups if g.families == ["qwen3-32b-w8a8-single-a3"]]
    assert all(p.kind != "explicit" for p in other.workload or [])


def test_an_empty_test_content_is_benchmarks_only(tmp_path, shipped):
    config = _with_request_tests(tmp_path, "    test_content: []\n")
    out = tmp_path / "imported"
    import_configs([config], shipped, None).write(out)
    m = load_matrix([DEFAULT_MATRICES, out])
    (group,) = [g for g in m.suites["requests"].groups if g.families == ["qwen3-32b-w8a8-aclgraph-a3"]]
    assert [p.kind for p in group.workload] == ["sequential", "concurrent"]  # the perf benchmark's phase


@pytest.mark.parametrize(
    "lines, message",
    [
        ('    test_content: ["image"]\n    prompts: ["a"]\n', "test_content 'image': not mapped"),
        ('    test_content: ["completion"]\n', "test_content without prompts"),
        ("    service_mode: epd\n", "service_mode 'epd': only 'openai' is mapped"),
    ],
)
def test_request_tests_ppconf_cannot_send_are_errors_at_their_line(tmp_path, shipped, lines, message):
    config = _with_request_tests(tmp_path, lines)
    with pytest.raises(MatrixError) as err:
        import_configs([config], shipped, None)
    (e,) = err.value.errors
    assert message in str(e)
    line = int(re.match(rf"{re.escape(str(config))}:(\d+):", str(e)).group(1))
    assert line > 50  # in the test case, not the file's head


def test_a_batch_with_one_bad_file_writes_the_others_and_says_which_failed(tmp_path, capsys, monkeypatch):
    from harness.cli import main

    # the plain split into flags: this test is about the batch, not vLLM's parser
    monkeypatch.setattr("harness.commands.imports.engine", lambda: "vLLM's parser left out")

    bad = tmp_path / "bad.yaml"
    bad.write_text(EAGLE3.read_text().replace('"method": "eagle3"', '"method": "eagle"', 1))
    out = tmp_path / "imported"
    assert main(["import", "vllm-ascend-nightly", str(INT8), str(bad), str(MULTI), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"not imported: {bad}" in err and "speculative method 'eagle'" in err
    assert "1 of 3 configs failed" in err
    written = sorted(p.name for p in out.glob("*.yaml"))
    assert written == sorted([INT8.name.lower(), MULTI.name.lower(), "topologies.yaml"])
    m = load_matrix([DEFAULT_MATRICES, out])
    assert "qwen3-32b-int8" in m.suites and "bad" not in m.suites
    # every file bad: nothing written
    out2 = tmp_path / "none"
    assert main(["import", "vllm-ascend-nightly", str(bad), "--out", str(out2)]) == 1
    assert not out2.exists() or not list(out2.glob("*.yaml"))

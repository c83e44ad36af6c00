"""A P/D pair whose KV transfer is broken cannot PASS on recomputed text, for real on vLLM-CPU.

The features-cpu 1P1D case (ExampleConnector, ppconf's proxy) with its decode instance's connector
pointed at another store: the decode side finds no KV, computes every prompt token itself and
answers the same greedy text as the counterpart, so the accuracy check passes, and the case must
still end FAIL on the kv-transferred check, with the decode side's prompt-token sources as the
reason. The suite asks what features-cpu asks of its P/D case (flags and workload copied from the
shipped matrix), so with the features run's reference cache (``PPCONF_REFERENCE_CACHE``, as in CI)
this is one launch of the pair and no reference launch."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

pytest.importorskip("vllm", reason="launches vLLM-CPU servers")

from harness.matrix.load import DEFAULT_MATRICES, load_matrix  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.run import RunConfig, SuiteRun  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

TOPOLOGY = "pd-p-pp1-d-pp1"
CASE = f"qwen3-tiny/{TOPOLOGY}/auto/none"


def broken_matrix(elsewhere: Path) -> str:
    """pd-broken-cpu: features-cpu's P/D case, its decode side reading another store."""
    features = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "suites.yaml").read_text())["suites"]["features-cpu"]
    (group,) = [g for g in features["groups"] if TOPOLOGY in g["topologies"]]
    suite = {k: v for k, v in features.items() if k not in ("title", "groups")}
    suite["title"] = "a P/D pair with its KV transfer broken"
    store = {"kv_connector_extra_config": {"shared_storage_path": str(elsewhere)}}
    suite["groups"] = [{**group, "decode": {"configs": {"kv-transfer-config": store}}}]
    return yaml.safe_dump({"suites": {"pd-broken-cpu": suite}}, sort_keys=False)


def test_a_pair_whose_decode_side_reads_another_store_fails_on_the_transfer_not_the_text(tmp_path):
    root = tmp_path / "matrices"
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "pd-broken.yaml").write_text(broken_matrix(tmp_path / "another-store"))
    m = load_matrix(root)
    run_dir = tmp_path / "run"
    cache = os.environ.get("PPCONF_REFERENCE_CACHE")
    cfg = RunConfig(m, "pd-broken-cpu", load_cluster(None), run_dir, reference_cache=Path(cache) if cache else None)
    SuiteRun(cfg).run()
    (record,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert record["case"] == CASE
    assert record["outcome"] == "FAIL", record["reason"]
    assert "kv-transferred check failed" in record["reason"]
    assert "0 prompt tokens received over the KV connector" in record["reason"]
    # the recomputed text equals the counterpart's: the transfer check alone tells
    assert record["observation"]["accuracy"]["equal"] is True, record["observation"]["accuracy"]
    decode = (run_dir / record["observation"]["logs"]["decode"]).read_text()
    assert "Inject KV cache" not in decode

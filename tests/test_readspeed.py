"""The read rate measured on this host, kept, and used for its local nodes that declare none."""

import json
import socket

from harness.cli import main
from harness.commands.claims import with_measured_reads
from harness.plan.cluster import load_cluster
from harness.plan.cost import read_gb_s
from harness.target import readspeed


def test_a_measured_rate_is_kept_and_given_to_local_nodes_that_declare_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model-00001.safetensors").write_bytes(b"\0" * 3_000_000)
    (model / "config.json").write_text("{}")
    (model / "link").symlink_to(tmp_path / "elsewhere")  # never followed, never read
    gb_s, nbytes = readspeed.measure(model)
    assert nbytes == 3_000_002 and gb_s > 0
    assert readspeed.measure(model, limit_bytes=1_000_000)[1] == 1_000_000
    kept = readspeed.record(gb_s, model, nbytes)
    entry = json.loads(kept.read_text())[socket.gethostname()]
    assert entry["gb_s"] == round(gb_s, 3) and entry["read_bytes"] == nbytes
    local = load_cluster(None)
    assert read_gb_s(local) == (1.0, False)  # the default, said to be assumed
    assert read_gb_s(with_measured_reads(local)) == (round(gb_s, 3), True)
    # a declared rate wins over the measured one
    declared = local.model_copy(update={"nodes": [local.nodes[0].model_copy(update={"read_gb_s": 0.25})]})
    assert read_gb_s(with_measured_reads(declared)) == (0.25, True)


def test_schedule_measures_on_request_and_says_what_it_read(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\1" * 2_000_000)
    assert main(["schedule", "--suite", "smoke-cpu", "--measure-read", str(model), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "read 0.00 GB under" in captured.err and "GB/s; kept in" in captured.err
    assert json.loads(captured.out)["deployments"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["schedule", "--suite", "smoke-cpu", "--measure-read", str(empty)]) == 2
    assert "no file to read" in capsys.readouterr().err


def test_a_damaged_cache_is_no_rate(tmp_path, monkeypatch):
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path))
    (tmp_path / "read-bandwidth.json").write_text(json.dumps({socket.gethostname(): {"gb_s": "fast"}, "x": 3}))
    assert readspeed.this_host() is None
    (tmp_path / "read-bandwidth.json").write_text("[[[")
    assert readspeed.recorded() == {}

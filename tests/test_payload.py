"""The stage probe travels with the launch: every serving launch carries it as a payload, each
runner writes it into the launch's own directory and puts that directory first on the launch's
PYTHONPATH, and a printed command writes it inline. Real shells and processes, no vLLM."""

import ast
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.check.serving.instrument import PROBE_CLASS, SERVE_ROLES, instrument, probe_payload
from harness.check.verdict.repro import bundle_dir, write_bundle
from harness.launch import Deployment, LaunchSpec, Payload, PlanError
from harness.matrix.source import MatrixError
from harness.plan.cluster import load_cluster
from runners.local import LocalNodeRunner
from runners.ssh import env_block, payload_block, remote_command
from tests.records import result

PROBE = Path(__file__).resolve().parents[1] / "harness" / "target" / "worker_probe.py"
MODULE = Payload("ppconf_payload_mod.py", "VALUE = 'a b;$(c)'\n")
SHOW = "import os, ppconf_payload_mod as m; print('GOT', m.VALUE, '|', os.environ['PYTHONPATH'])"


def spec(role: str = "api", argv=("vllm", "serve", "m"), **kw) -> LaunchSpec:
    return LaunchSpec(f"n-{role}", role, "node0", "h", tuple(argv), (), **kw)


def test_the_probe_imports_nothing_of_ppconf():
    """It runs on nodes where only vLLM is installed: the standard library, torch and vLLM only."""
    tree = ast.parse(PROBE.read_text())
    roots = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.level)  # a relative import would need a package
    }
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))
    assert roots and roots <= set(sys.stdlib_module_names) | {"__future__", "torch", "vllm"}, roots


def test_every_serving_launch_carries_the_probe_and_loads_it_from_its_own_directory():
    roles = (*SERVE_ROLES, "ray-head", "ray-worker", "proxy")
    d = instrument(Deployment(("c",), tuple(spec(r) for r in roles), "n-api"))
    for launch in d.launches:
        if launch.role in SERVE_ROLES:
            assert launch.payload == (probe_payload(),), launch.role
            assert launch.argv[-2:] == ("--worker-extension-cls", PROBE_CLASS)
            assert ("VLLM_SERVER_DEV_MODE", "1") in launch.env
        else:
            assert launch == spec(launch.role), launch.role
    assert probe_payload().content == PROBE.read_text()
    assert PROBE_CLASS == f"{probe_payload().name.removesuffix('.py')}.StageProbe"
    # a matrix's own extension is kept, and nothing is shipped for it
    (own,) = instrument(Deployment(("c",), (spec(argv=("vllm", "--worker-extension-cls", "x.Y")),), "n-api")).launches
    assert own.argv == ("vllm", "--worker-extension-cls", "x.Y") and own.payload == ()
    # the payload is part of what was launched, so of the deployment's key; no payload, no change
    plain = Deployment(("c",), (spec(),), "n-api")
    assert instrument(plain).key != plain.key
    assert plain.key == Deployment(("c",), (spec(),), "n-api").key
    assert d.to_json()["launches"][0]["payload"] == [{"name": probe_payload().name, "sha256": probe_payload().sha256}]


@pytest.mark.parametrize("name", ["", "../x.py", "a/b.py", ".hidden", "x y.py", "-x.py"])
def test_a_payload_name_must_be_a_plain_file_name(name):
    with pytest.raises(PlanError, match="plain file name"):
        Payload(name, "")


def test_a_printed_launch_writes_its_payload_inline_and_puts_it_first_on_pythonpath(tmp_path):
    launch = spec(argv=(sys.executable, "-c", SHOW), payload=(MODULE,))
    out = subprocess.run(
        ["bash", "-c", launch.shell()],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/kept", "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    value, pythonpath = out.stdout.strip().removeprefix("GOT ").split(" | ")
    assert value == "a b;$(c)"
    first, kept = pythonpath.split(":")
    assert kept == "/kept" and Path(first).parent == tmp_path and (Path(first) / MODULE.name).is_file()


def _run_local(tmp_path: Path, launch: LaunchSpec) -> str:
    log = tmp_path / "logs" / "key" / f"{launch.name}.log"
    h = LocalNodeRunner().start(launch, log)
    end = time.monotonic() + 30
    while h.returncode() is None and time.monotonic() < end:
        time.sleep(0.05)
    h.stop(grace_s=1.0)
    assert h.returncode() == 0, log.read_text()
    return next(l for l in log.read_text().splitlines() if l.startswith("GOT ")).removeprefix("GOT ")


def test_the_local_runner_writes_the_payload_beside_the_launchs_log(tmp_path):
    launch = replace(spec(argv=(sys.executable, "-c", SHOW), payload=(MODULE,)), env=(("PYTHONPATH", "/from/launch"),))
    got = _run_local(tmp_path, launch)
    directory = tmp_path / "logs" / "key" / "n-api.payload"
    assert got == f"a b;$(c) | {directory}:/from/launch"
    assert (directory / MODULE.name).read_text() == MODULE.content


def test_under_a_set_env_script_the_payload_still_comes_first(tmp_path):
    script = tmp_path / "set_env.sh"
    script.write_text("export PYTHONPATH=/from/set_env\n")  # as CANN's set_env adds its own paths
    got = _run_local(tmp_path, spec(argv=(sys.executable, "-c", SHOW), payload=(MODULE,), set_env=str(script)))
    assert got == f"a b;$(c) | {tmp_path / 'logs' / 'key' / 'n-api.payload'}:/from/set_env"


def test_the_ssh_runners_remote_side_writes_the_payload_and_its_watchdog_removes_it(tmp_path):
    """The remote command as the node's login shell runs it, fed the session's stdin (no sshd)."""
    launch = spec(
        argv=(sys.executable, "-c", SHOW + "; print('EMPTY', os.path.getsize(os.path.dirname(m.__file__) + '/e'))"),
        payload=(MODULE, Payload("e", "")),
    )
    proc = subprocess.Popen(
        ["sh", "-c", remote_command(launch, "ppconf-0123", 1)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=False,
        env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(env_block(launch) + payload_block(launch))
    proc.stdin.flush()
    lines = []
    while not (line := proc.stdout.readline().decode()).startswith("ppconf-0123 exit="):
        assert line, b"".join(l.encode() for l in lines)
        lines.append(line)
    (directory,) = list(tmp_path.glob("ppconf-launch.*"))
    got = next(l for l in lines if l.startswith("GOT ")).strip()
    assert got == f"GOT a b;$(c) | {directory}" and "EMPTY 0\n" in lines
    proc.stdin.close()  # as stop() ends the session: the watchdog takes the group down, then the directory
    proc.wait(10)
    end = time.monotonic() + 10
    while directory.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not directory.exists()


def test_without_a_payload_the_remote_side_makes_no_directory(tmp_path):
    launch = spec(argv=("sh", "-c", 'echo "PP=${PYTHONPATH-unset}"'))
    done = subprocess.run(
        ["sh", "-c", remote_command(launch, "ppconf-0123", 1)],
        input=env_block(launch) + payload_block(launch),
        capture_output=True,
        env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)},
        timeout=10,
    )
    assert b"PP=unset\n" in done.stdout and list(tmp_path.iterdir()) == []


def test_ppconf_true_in_an_inventory_is_refused_with_why(tmp_path):
    inventory = tmp_path / "old.yaml"
    inventory.write_text(
        "name: old\nplatform: cpu\nnodes:\n  - name: n0\n    host: h\n    address: 10.0.0.1\n"
        "    devices: [0]\n    ppconf: true\n"
    )
    with pytest.raises(MatrixError) as err:
        load_cluster(inventory)
    text = str(err.value)
    assert f"{inventory}:8" in text and "nodes.0.ppconf: 'ppconf' is no longer a setting" in text
    assert "travels with every serving launch" in text


def test_a_repro_bundle_writes_the_probe_inline(tmp_path):
    d = instrument(Deployment(("c/1",), (spec(argv=(sys.executable, "-c", "print(1)")),), "n-api"))
    write_bundle(tmp_path, result("c/1", "FAIL", reason="boom"), d, tmp_path / "matrices", {})
    script = (bundle_dir(tmp_path, "c/1") / "commands.sh").read_text()
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    assert "cat > \"$payload\"/ppconf_stage_probe.py <<'PPCONF_PAYLOAD_END'" in script
    assert probe_payload().content.rstrip("\n") in script
    assert script.index('export PYTHONPATH="$payload') < script.rindex(PROBE_CLASS)

"""Ctrl-C of a real `ppconf run` while vLLM is starting: every process it started is gone."""

import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.needs_vllm]


def test_sigint_during_a_real_launch_leaves_nothing_and_loses_nothing(tmp_path):
    import psutil  # comes with vLLM, not with ppconf: imported here so collection never needs it

    out = tmp_path / "run"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--suite",
            "smoke-cpu",
            "--case",
            "bert-tiny/pp2-tp1-mp/auto/none",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    me = psutil.Process(p.pid)
    started: set[int] = set()
    end = time.monotonic() + 120
    # wait until vLLM itself is running (its process tree under ppconf)
    while time.monotonic() < end and p.poll() is None:
        kids = me.children(recursive=True)
        started |= {k.pid for k in kids}
        if any("harness.target.vllm_cpu" in " ".join(k.cmdline()) for k in kids if k.is_running()):
            break
        time.sleep(0.2)
    assert started, "vLLM never started"
    time.sleep(3)
    started |= {k.pid for k in me.children(recursive=True)}
    interrupt_and_check(p, out, started)


def interrupt_and_check(p: subprocess.Popen, out, started: set[int]) -> None:
    """Ctrl-C to a running `ppconf run` (``p``, writing to ``out``): it exits 130 saying how to
    resume, none of the ``started`` processes lives on, and no case was recorded."""
    import psutil

    p.send_signal(signal.SIGINT)
    output, _ = p.communicate(timeout=120)
    assert p.returncode == 130, output
    assert f"Resume with: ppconf run --resume {out}" in output
    alive = [pid for pid in started if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"left running: {alive}"
    assert not (out / "results.jsonl").exists() or (out / "results.jsonl").read_text() == ""

"""Under `pytest -n 2 --dist loadgroup` the workers' runs end as one run: merged results, a
run.json naming the workers, and the report. Nothing launches: the private suite's cases are
claimed unsupported on this platform (recorded without a launch), but each worker starts its run
as `ppconf run` does (plans checked, the nodes' stack probed), which takes seconds."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.matrix.load import DEFAULT_MATRICES
from harness.results import store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PRIVATE = """
families:
  tiny:
    title: tiny
    variants:
      default:
        architecture: Qwen3ForCausalLM
        hidden_layers: 4
        supports_pp: true
        model: /models/tiny
        platforms: [cpu]
suites:
  s:
    title: private suite
    platform: cpu
    groups:
      - {families: [tiny], topologies: [pp1-tp1, pp2-tp1-mp]}
rules:
  - when: 'family == "tiny"'
    expect: unsupported-on-platform
    reason: no kernel for it here
    why: a test claim
"""


def test_xdist_workers_runs_merge_into_one_run(tmp_path):
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "p.yaml").write_text(textwrap.dedent(PRIVATE))
    (tmp_path / "test_pp.py").write_text("from conformance.test_conformance import test_case  # noqa: F401\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "--ppconf-matrices",
            str(DEFAULT_MATRICES),
            "--ppconf-matrices",
            "private",
            "--ppconf-suite",
            "s",
            "--ppconf-out",
            "out",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        # this session's own PPCONF_* settings (CI resumes its smoke run through PPCONF_RESUME) are
        # not the inner session's: it runs its private suite into its own directory
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PPCONF_")}, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / "out"
    assert sorted(r.case for r in store.read_all(run)) == ["tiny/pp1-tp1/auto/none", "tiny/pp2-tp1-mp/auto/none"]
    meta = json.loads((run / "run.json").read_text())
    # which worker gets which item is xdist's choice; every worker that ran a case is named
    ran = sorted(p.name for p in run.glob("gw*") if (p / "results.jsonl").is_file())
    assert meta["suite"] == "s" and meta["workers"] == ran and ran
    assert "tiny/pp2-tp1-mp/auto/none" in (run / "report" / "support.html").read_text()

"""The planted failing case ``ppconf shrink`` is shown on: smoke-cpu's dense PP2 case with a
worker extension that skews the last stage's picks only when several sequences are sampled in a
step that reaches a long context (tests/perturb_long_batched.py), and a workload larger than the
fault needs: the suite's sequential requests and four concurrent requests of up to 192 prompt
tokens. The sequential requests pass; the concurrent phase fails against the PP=1 counterpart.

    python -m tests.shrink_planted DIR   # DIR: the shipped matrices plus cpu/planted.yaml
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml

from harness.matrix.load import DEFAULT_MATRICES

SUITE = "shrink-planted-cpu"
CASE = "qwen3-tiny/pp2-tp1-mp/auto/long-batched-fault"
FEATURE = {
    "title": "the last stage's picks skewed in steps of several sequences reaching a long context (a test's "
    "worker extension)",
    "args": ["--worker-extension-cls", "tests.perturb_long_batched.LongBatchedFaultProbe"],
    # vLLM's compile cache is keyed without the worker extension
    "env": {"VLLM_DISABLE_COMPILE_CACHE": "1"},
    "preserves_output": True,
    "why": "a worker extension that only reads what each stage built (so it says)",
}
WORKLOAD = [
    {"kind": "sequential"},
    {"kind": "concurrent", "requests": 4, "prompt_tokens": 192, "max_tokens": 16, "deadline_s": 180},
]


def planted_matrix() -> str:
    smoke = yaml.safe_load((DEFAULT_MATRICES / "cpu" / "suites.yaml").read_text())["suites"]["smoke-cpu"]
    suite = {k: v for k, v in smoke.items() if k not in ("title", "groups", "workload", "stage_bounds")}
    suite["title"] = "a fault seen only with several requests in flight and a long context, for ppconf shrink"
    suite["workload"] = WORKLOAD
    suite["groups"] = [{"families": ["qwen3-tiny"], "topologies": ["pp2-tp1-mp"], "features": ["long-batched-fault"]}]
    return yaml.safe_dump({"features": {"long-batched-fault": FEATURE}, "suites": {SUITE: suite}}, sort_keys=False)


def write(root: Path) -> Path:
    """The shipped matrices with the planted suite, in ``root`` (which must not exist)."""
    shutil.copytree(DEFAULT_MATRICES, root)
    (root / "cpu" / "planted.yaml").write_text(planted_matrix())
    return root


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))

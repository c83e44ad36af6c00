"""This host's cores as one-core nodes: the inventory with which deployments of one core each can
run side by side (``ppconf run --max-parallel``), for the parallel benchmark and its test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

SERVED = """\
  - when: suite == "parallel-cpu"
    expect: supported
    why: one-core deployments, checked side by side on one-core nodes
"""

LAYER = """\
rules:
{rules}suites:
  parallel-cpu:
    title: one-core deployments side by side
    platform: cpu
    max_devices: 1
    startup_timeout_s: 300
    request_timeout_s: 60
    groups:
      - families: [qwen3-tiny]
        topologies: [pp1-tp1]
        features: [{features}]
"""


def inventory(path: Path, nodes: int = 2) -> Path:
    """An inventory of ``nodes`` one-core nodes on this host (its first cores); written to ``path``."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < nodes:
        raise SystemExit(f"this host has {len(cores)} core(s); {nodes} one-core nodes need {nodes}")
    doc = {
        "name": f"local-{nodes}x1core",
        "platform": "cpu",
        "network": "loopback",
        "nodes": [
            {
                "name": f"core{c}",
                "host": "localhost",
                "address": "127.0.0.1",
                "nic": "lo",
                "devices": [c],
                "python": sys.executable,
                "bind": "127.0.0.1",
            }
            for c in cores[:nodes]
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def layer(directory: Path, features: list[str], rules: str = "") -> Path:
    """A matrix layer with the suite parallel-cpu: qwen3-tiny on one rank with each of
    ``features``; ``rules`` (YAML list items) come before the one claiming them supported."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "parallel.yaml").write_text(LAYER.format(features=", ".join(features), rules=rules + SERVED))
    return directory

"""Stopping the process groups a killed ppconf left running, on whichever node they run.

Groups on this host are reaped directly; groups on other nodes by sending the reaper's own source
to the node's Python, through the node's own reach (SSH or Ray). Only groups whose every member
carries the run's marker are signalled (``runners.reaper``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.plan.cluster import Cluster
from runners import reaper
from runners.nodes import run_on_nodes

REAPER_SOURCE = Path(reaper.__file__).read_text()  # sent to other nodes' Python as a -c program


def reap_left_behind(run_dir: Path, cluster: Cluster, groups: list[Any]) -> tuple[list[int], list[str]]:
    """(the group ids stopped, problems worth telling the user)."""
    by_node: dict[str, list[int]] = {}
    for g in groups:
        if isinstance(g, int):  # the older format: local groups only
            g = {"node": None, "reach": "local", "pgid": g}
        if not isinstance(g, dict) or "pgid" not in g:
            continue
        by_node.setdefault(g["node"] if g.get("reach") != "local" else "", []).append(int(g["pgid"]))
    reaped: list[int] = reaper.reap(str(run_dir), by_node.pop("", []))
    problems = []
    calls = []
    for name, pgids in by_node.items():
        node = next((n for n in cluster.nodes if n.name == name), None)
        if node is None:
            problems.append(f"node {name} is no longer in the inventory; left its groups {pgids} alone")
            continue
        calls.append((node, [node.python, "-c", REAPER_SOURCE, str(run_dir), *map(str, pgids)]))
    for (node, _), out in zip(calls, run_on_nodes(cluster, calls, timeout_s=60) if calls else [], strict=True):
        try:
            reaped += json.loads(out.stdout.strip().splitlines()[-1]) if out.ok else []
        except (ValueError, IndexError):
            pass
        if not out.ok:
            problems.append(f"could not reap on {node.name}: {out.error or out.stderr.strip()[-300:]}")
    return reaped, problems

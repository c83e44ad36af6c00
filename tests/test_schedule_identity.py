"""The scheduler's speed-ups change no schedule: the schedules it gives for frozen inputs are the
ones it gave before they were made.

``data/schedules/shipped.json`` holds what ``schedule_suite`` handed the simulation for the shipped
nightly on the three shipped inventories (with and without references) and for the release on
a3-pd, with the SHA-256 of each schedule's JSON as the scheduler gave it then. Keys and names are
replaced by their rank (the same order, so the same tie-breaks) and cases by their count, so the
file stays small and does not follow later edits of the matrices. The synthetic nightlies pin
larger inputs: many shapes, packed gangs, 2 to 64 nodes.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from harness.plan.cluster import Cluster, Node
from harness.plan.schedule import Need, Schedule, simulate
from tests.test_schedule import cluster, need, random_nightly

SHIPPED = json.loads((Path(__file__).parent / "data" / "schedules" / "shipped.json").read_text())


def digest(s: Schedule) -> str:
    """The schedule's JSON as it was when the digests were taken (without the fields added since:
    the device-hours and each entry's estimate parts, which place nothing)."""
    data = s.to_json()
    data.pop("device_hours")
    for entry in data["entries"]:
        entry.pop("estimate")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("frozen", SHIPPED, ids=[f["name"] for f in SHIPPED])
def test_shipped_suites_schedule_as_before(frozen):
    c = Cluster(
        name=frozen["name"].split(" on ")[1].split()[0],
        platform="ascend",
        nodes=[Node(name=n["name"], host=n["name"], address=n["name"], devices=n["devices"]) for n in frozen["nodes"]],
    )
    needs = [
        Need(key, tuple(slots), spread, tuple(f"{label}/{j}" for j in range(cases)), label, reference, asks)
        for key, slots, spread, cases, label, reference, asks in frozen["needs"]
    ]
    assert digest(simulate(needs, c, None)) == frozen["schedule"]


@pytest.mark.parametrize(
    ("seed", "nodes", "expected"),
    [(1, 3, "4c0d7a39e4d93ec9"), (2, 8, "141fe5164a1f4dd6"), (3, 64, "9721430c7688e07a")],
)
def test_synthetic_nightlies_schedule_as_before(seed, nodes, expected):
    needs, durations = random_nightly(seed, 1500)
    assert digest(simulate(needs, cluster(nodes), durations))[:16] == expected


@pytest.mark.parametrize(("nodes", "expected"), [(2, "bb5b6fea1ec1deb4"), (5, "aff3eceec8ac8c3e")])
def test_packed_gangs_schedule_as_before(nodes, expected):
    # gangs whose ranks may share a node go through the general node choice, not the fast one
    rng = random.Random(4)
    shapes = [(2,), (4,), (8,), (8, 8), (4, 4), (6, 2), (16, 8)]
    needs = [
        need(f"d{i}", s, spread=(len(s) > 1 and i % 2 == 0))
        for i, s in enumerate(rng.choice(shapes) for _ in range(600))
    ]
    durations = {x.key: rng.uniform(60, 3600) for x in needs}
    assert digest(simulate(needs, cluster(nodes), durations))[:16] == expected

"""`ppconf shard`: disjoint shards of whole deployments, balanced, the same in every job."""

import json

from harness.cases.expand import expand
from harness.cli import main
from harness.plan.cluster import load_cluster
from harness.plan.shard import ShardUnit, split, units


def test_every_unit_lands_in_exactly_one_shard_heaviest_first():
    all_units = [ShardUnit(f"d{i}", (f"c{i}a", f"c{i}b"), w, True) for i, w in enumerate([50, 40, 30, 20, 10, 10])]
    shards = split(all_units, 3, "seconds")
    assert sorted(c for s in shards for c in s.cases) == sorted(c for u in all_units for c in u.cases)
    assert [s.weight for s in shards] == [60, 50, 50]
    assert [[u.key for u in s.units] for s in shards] == [["d0", "d5"], ["d1", "d4"], ["d2", "d3"]]
    assert split(all_units, 3, "seconds") == shards  # every job computes the same split


def test_more_shards_than_deployments_leaves_some_empty():
    shards = split([ShardUnit("d", ("a", "b"), 2.0, True)], 3, "cases")
    assert [s.cases for s in shards] == [["a", "b"], [], []]


def test_cases_sharing_a_deployment_are_never_split(shipped):
    cluster = load_cluster(None)
    cases = list(expand(shipped, "smoke-cpu").cases)
    twin = cases[0].model_copy(update={"id": "qwen3-tiny/twin"})  # the same launches as the first case
    found = units(shipped, [*cases, twin], cluster, None)
    [shared] = [u for u in found if twin.id in u.cases]
    assert shared.cases == (cases[0].id, twin.id) and shared.weight == 2.0
    for of in (2, 3, 5):
        holders = [s.index for s in split(found, of, "cases") if twin.id in s.cases or cases[0].id in s.cases]
        assert len(holders) == 1


def test_durations_weigh_deployments_by_seconds(shipped):
    cluster = load_cluster(None)
    cases = list(expand(shipped, "smoke-cpu").cases)[:3]
    found = units(shipped, cases, cluster, {cases[0].id: 900.0})
    assert {u.cases[0]: u.weight for u in found}[cases[0].id] == 900.0


def test_the_shards_of_a_suite_cover_it_once(capsys):
    seen: list[str] = []
    for index in (1, 2):
        assert main(["shard", "--suite", "smoke-cpu", "--of", "2", "--index", str(index), "--format", "json"]) == 0
        out = capsys.readouterr()
        shard = json.loads(out.out)
        assert shard["index"] == index and shard["balanced_by"] == "cases"
        assert f"shard {index} of 2:" in out.err
        seen += shard["cases"]
    assert len(seen) == len(set(seen)) == 11
    assert main(["shard", "--suite", "smoke-cpu", "--of", "3", "--index", "4"]) == 2
    assert "--index 4: give a shard from 1 to 3" in capsys.readouterr().err

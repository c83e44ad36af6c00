"""The scheduler: gangs whole, no device shared in time, LPT, unplaceable reported, bounds."""

import itertools
import random

import pytest

from harness.cases.expand import expand, select
from harness.plan.cluster import Cluster, Node, load_cluster
from harness.plan.deployment import plan
from harness.plan.schedule import (
    Need,
    Schedule,
    duration_of,
    durations_from_results,
    estimate_s,
    load_durations,
    need_of,
    schedule_suite,
    simulate,
)
from harness.results import store as results
from tests.records import record


def cluster(nodes: int, devices: int = 16) -> Cluster:
    return Cluster(
        name=f"sim-{nodes}",
        platform="ascend",
        nodes=[
            Node(name=f"n{i}", host=f"n{i}", address=f"10.0.0.{i + 1}", devices=list(range(devices)))
            for i in range(nodes)
        ],
    )


def need(key, slots, spread=None, cases=1):
    return Need(
        key, tuple(slots), len(slots) > 1 if spread is None else spread, tuple(f"{key}/c{i}" for i in range(cases)), key
    )


def check_whole(s: Schedule, c: Cluster) -> None:
    """Every rank on real devices of its node, the right count, spread ranks on distinct nodes,
    and no (node, device) in two deployments at overlapping times."""
    devices = {n.name: set(n.devices) for n in c.nodes}
    spans: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
    for e in s.entries:
        assert len(e.placement.nodes) == len(e.need.slots)
        for (node, devs), wanted in zip(e.placement.nodes, e.need.slots, strict=True):
            assert len(devs) == wanted and len(set(devs)) == wanted and set(devs) <= devices[node]
        names = [node for node, _ in e.placement.nodes]
        if e.need.spread:
            assert len(set(names)) == len(names), f"{e.need.name}: ranks share a node"
        used = [(node, d) for node, devs in e.placement.nodes for d in devs]
        assert len(set(used)) == len(used), f"{e.need.name}: two ranks on one device"
        for node, d in used:
            spans.setdefault((node, d), []).append((e.start, e.end, e.need.name))
    for where, mine in spans.items():
        mine.sort()
        for (s1, e1, a), (s2, e2, b) in itertools.pairwise(mine):
            assert s2 >= e1, f"{where} used by {a} [{s1}, {e1}) and {b} [{s2}, {e2})"


def random_nightly(seed: int, n: int = 120):
    rng = random.Random(seed)
    shapes = [(2,), (4,), (8,), (16,), (8, 8), (16, 16), (16, 8), (4, 4)]
    needs = [need(f"d{i}", rng.choice(shapes), cases=rng.randint(1, 3)) for i in range(n)]
    return needs, {x.key: rng.uniform(60, 3600) for x in needs}


def test_gang_ranks_start_together_on_distinct_whole_nodes():
    c = cluster(2, 8)
    # a long single-node deployment holds n0; the gang must wait for it, then take both nodes at once
    needs = [need("solo", [8]), need("gang", [8, 8])]
    s = simulate(needs, c, {"solo": 100.0, "gang": 50.0})
    by = {e.need.key: e for e in s.entries}
    assert by["gang"].start == 100.0 and by["gang"].end == 150.0
    assert sorted(node for node, _ in by["gang"].placement.nodes) == ["n0", "n1"]
    check_whole(s, c)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("nodes", [2, 3, 8])
def test_no_device_in_two_deployments_at_once(seed, nodes):
    c = cluster(nodes)
    needs, durations = random_nightly(seed)
    s = simulate(needs, c, durations)
    assert len(s.entries) == len(needs) and not s.unplaceable
    check_whole(s, c)
    assert s.makespan >= s.lower_bound - 1e-9
    assert s.lower_bound >= max(durations.values()) - 1e-9
    assert s.lower_bound >= sum(durations[x.key] * x.devices for x in needs) / c_devices(c) - 1e-6


def c_devices(c: Cluster) -> int:
    return sum(len(n.devices) for n in c.nodes)


def test_longest_first():
    c = cluster(1, 8)
    durations = {"a": 10.0, "b": 50.0, "c": 30.0, "d": 40.0}
    s = simulate([need(k, [8]) for k in durations], c, durations)  # one at a time
    assert [e.need.key for e in s.entries] == ["b", "d", "c", "a"]
    assert s.makespan == s.lower_bound == 130.0
    # with room for two at a time the two longest start at once
    s = simulate([need(k, [4]) for k in durations], c, durations)
    assert {e.need.key for e in s.entries if e.start == 0} == {"b", "d"}


def test_small_deployments_do_not_starve_a_wide_gang():
    # a whole-cluster gang behind a long solo deployment: shorter ones fill the gap but only
    # while they cannot delay it, so it starts the moment the solo one ends
    c = cluster(2, 8)
    needs = [need("solo", [8]), need("wide", [8, 8])] + [need(f"s{i}", [2]) for i in range(60)]
    durations = {"solo": 100.0, "wide": 90.0} | {f"s{i}": 10.0 for i in range(60)}
    s = simulate(needs, c, durations)
    by = {e.need.key: e for e in s.entries}
    assert by["wide"].start == 100.0
    assert any(by[f"s{i}"].start < 100.0 for i in range(60))  # the gap was used
    check_whole(s, c)


def test_too_big_is_reported_not_dropped():
    c = cluster(2, 8)
    needs = [need("ok", [8, 8]), need("three-nodes", [8, 8, 8]), need("fat-node", [16]), need("fits", [4])]
    s = simulate(needs, c, None)
    assert {e.need.key for e in s.entries} == {"ok", "fits"}
    why = {u.name: u.reason for u in s.unplaceable}
    assert set(why) == {"three-nodes", "fat-node"}
    assert "3 distinct nodes" in why["three-nodes"] and "has 2" in why["three-nodes"]
    assert "16 device(s)" in why["fat-node"] and "nodes of 8, 8" in why["fat-node"]
    assert "unplaceable on sim-2 (2):" in s.render()


def test_packed_ranks_share_a_node_when_allowed():
    # the local host plays two nodes on disjoint cores: plan packs, so the schedule may too
    c = cluster(1, 4)
    s = simulate([need("two-ranks", [2, 2], spread=False)], c, None)
    (e,) = s.entries
    assert e.placement.nodes == (("n0", (0, 1)), ("n0", (2, 3)))


def test_durations_by_key_then_case_then_estimate(tmp_path):
    x = need("k", [8, 8], cases=2)
    assert duration_of(x, {"k": 12.0, "k/c0": 99.0}) == (12.0, True)
    assert duration_of(x, {"k/c0": 20.0, "k/c1": 30.0}) == (30.0, True)
    assert duration_of(x, {}) == (estimate_s(x), False)
    assert estimate_s(x) > estimate_s(need("small", [2]))  # bigger topologies take longer
    path = tmp_path / "durations.json"
    path.write_text('{"k": 5}')
    assert load_durations(path) == {"k": 5.0}


def test_durations_from_an_earlier_run(tmp_path):
    results.append(tmp_path, record("a", "PASS", duration_s=40.0, plan_key="K"))
    results.append(tmp_path, record("b", "PASS", duration_s=42.0, plan_key="K"))
    results.append(tmp_path, record("c", "SKIP", duration_s=0.0, plan_key=None))
    assert durations_from_results(tmp_path) == {"a": 40.0, "b": 42.0, "K": 42.0}
    assert load_durations(tmp_path) == durations_from_results(tmp_path)


def test_deterministic():
    c = cluster(3)
    needs, durations = random_nightly(7)
    assert simulate(needs, c, durations) == simulate(list(reversed(needs)), c, durations)


def test_render_reads_as_a_table():
    c = cluster(2, 8)
    s = simulate([need("gang", [4, 4]), need("solo", [4])], c, {"gang": 3600.0})
    text = s.render()
    assert "makespan 1:00:00" in text and "lower bound 1:00:00 (x1.00)" in text
    assert "1 from earlier runs, 1 estimated" in text
    rows = {line.split()[-1]: line.split() for line in text.splitlines()[3:]}
    assert rows["gang"][:4] == ["0:00:00", "1:00:00", "3600s", "n0:0-3"] and rows["gang"][4] == "n1:0-3"
    assert rows["solo"][2].startswith("~")  # an estimate is marked as one


def test_shipped_nightly_on_two_8_npu_nodes(shipped):
    c = load_cluster("a3-2node")
    s = schedule_suite(shipped, "nightly-ascend", c, None)
    assert s.entries, "nothing scheduled"
    check_whole(s, c)
    assert s.makespan >= s.lower_bound
    # every case is accounted for: scheduled, unplaceable, or recorded without a launch
    cases = expand(shipped, "nightly-ascend").cases
    scheduled = {cid for e in s.entries for cid in e.need.cases if "/reference/" not in cid}
    unplaceable = {cid for u in s.unplaceable for cid in u.cases}
    assert scheduled | unplaceable | set(s.no_launch) == {x.id for x in cases}
    # each served case's reference is scheduled too (the nightly compares on the case's own devices)
    assert any("/reference/" in cid for e in s.entries for cid in e.need.cases)
    assert not scheduled & unplaceable
    # the P/D layouts with a 16-NPU prefill instance need more than two 8-NPU nodes give
    assert unplaceable
    by_id = {x.id: x for x in cases}
    for cid in unplaceable:
        topo = shipped.topologies[by_id[cid].topology]
        assert by_id[cid].attrs["devices"] > 16 or by_id[cid].attrs["devices"] // topo.nnodes > 8
    assert all("a3-2node" in u.reason for u in s.unplaceable)
    # two-node layouts get both nodes at once
    two_node = [
        e
        for e in s.entries
        if e.need.cases[0] in by_id and shipped.topologies[by_id[e.need.cases[0]].topology].nnodes == 2
    ]
    assert two_node and all({n for n, _ in e.placement.nodes} == {"node0", "node1"} for e in two_node)
    text = s.render()
    assert "schedule on a3-2node" in text and "unplaceable on a3-2node" in text


def test_a_scheduled_placement_plans(shipped):
    # the runner follows the schedule by planning each case with the placement it was given
    c = load_cluster("a3-pd")
    s = schedule_suite(shipped, "nightly-ascend", c, None)
    cases = {x.id: x for x in expand(shipped, "nightly-ascend").cases}
    for e in [e for e in s.entries if e.need.cases[0] in cases][:20]:
        d = plan(shipped, cases[e.need.cases[0]], c, placement=e.placement)
        assert d.placement == e.placement
        assert need_of(d).slots == e.need.slots


def test_simulate_takes_planned_deployments(shipped):
    c = load_cluster("a3-pd")
    cid = "guide-61-layer/tp8-pp2-2node-mp/32,29/none"
    d = plan(shipped, select(expand(shipped, "nightly-ascend").cases, ids=[cid])[0], c)
    s = simulate([d], c, {d.key: 600.0})
    (e,) = s.entries
    assert e.need.slots == (8, 8) and e.need.spread and e.known and e.duration == 600.0


def test_cases_and_references_are_counted_apart(shipped):
    c = load_cluster("a3-pd")
    s = schedule_suite(shipped, "nightly-ascend", c, None)
    cases = expand(shipped, "nightly-ascend").cases
    launched = [x for x in cases if x.expectation.kind not in ("unsupported-on-platform", "unspecified")]
    scheduled = {cid for e in s.entries if not e.need.reference for cid in e.need.cases}
    unplaceable = {cid for u in s.unplaceable for cid in u.cases}
    assert s.cases == len(scheduled) and scheduled | unplaceable == {x.id for x in launched}
    assert s.references == sum(e.need.reference for e in s.entries) > 0
    assert not any("/reference/" in cid for e in s.entries if not e.need.reference for cid in e.need.cases)
    first = s.render().splitlines()[0]
    assert f"{s.cases} case(s) in {s.launches - s.references} deployment(s), {s.references} reference" in first


def test_the_nightly_shares_references_and_they_cost_little(shipped):
    """nightly-ascend on a3-pd: references of output-preserving stacks shared, known issues that
    never serve asking none, and the plain cases of a variant with a reference_drafter sharing the
    reference of its cases whose acceptance is bounded against that drafter."""
    s = schedule_suite(shipped, "nightly-ascend", load_cluster("a3-pd"), None)
    assert s.references <= 20  # 61 before references left their output-preserving features out, 22 before drafters
    # a reference reads the whole checkpoint on one node (PP folded away) and serves all its cases'
    # traffic, while claimed rejections read no weights: with both in the estimates references
    # cost more than the topology-size estimates said (x1.108 then, x1.21 now)
    assert s.makespan_without_references and s.makespan <= 1.25 * s.makespan_without_references
    names = {e.need.name for e in s.entries if e.need.reference}
    assert "deepseek-v4/text/reference/pp1-tp16/mtp" in names
    assert "deepseek-v4/text/reference/pp1-tp16/none" not in names  # the plain cases draft with mtp
    assert "glm-5.2/text/reference/pp1-tp16/dspark" in names  # a second drafter keeps its own
    assert not any("expert-parallel" in n or "pp1-tp4" in n for n in names)  # known issues that fail first


def test_references_do_not_lengthen_a_schedule_by_their_case_count(shipped):
    # a reference answers each distinct set of requests once, not once per case that needs it
    s = schedule_suite(shipped, "smoke-cpu", load_cluster(None), None)
    # the dense model's counterpart: the auto case's requests (its explicit phases too) and the
    # other cases' (the suite's phases), two sets of requests on one launch
    (shared,) = [e for e in s.entries if e.need.reference and "qwen3-tiny/" in e.need.name]
    assert len(shared.need.cases) > 2 and shared.need.asks == 2
    costs = {e.need.name: e.need.cost for e in s.entries}
    auto, custom = (costs[f"qwen3-tiny/pp2-tp1-mp/{p}/none"] for p in ("auto", "1,4"))
    assert shared.need.cost is not None and auto is not None and custom is not None
    assert auto.traffic_s > custom.traffic_s  # the explicit phases cost more
    assert shared.need.cost.traffic_s == pytest.approx(auto.traffic_s + custom.traffic_s)  # each ask once


def test_a_shape_that_would_delay_the_head_is_passed_over_for_the_gap_only():
    c = cluster(1, 8)
    seconds = {"L": 800.0, "H": 500.0, "X": 460.0, "Y": 450.0, "Y2": 440.0, "Z": 300.0}
    slots = {"L": [6], "H": [8]}
    s = simulate([need(k, slots.get(k, [2])) for k in seconds], c, seconds)
    start = {e.need.key: e.start for e in s.entries}
    # H waits for L (its reservation at 800); X ends before it, so does Z in the gap X leaves;
    # Y and Y2 would still hold two devices at 800, so they wait until H is done
    assert start == {"L": 0.0, "X": 0.0, "Z": 460.0, "H": 800.0, "Y": 1300.0, "Y2": 1300.0}
    check_whole(s, c)


def test_schedule_json_holds_the_same_figures(shipped, capsys):
    import json

    from harness.cli import main

    assert main(["schedule", "--suite", "smoke-cpu", "--format", "json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    s = schedule_suite(shipped, "smoke-cpu", load_cluster(None), None)
    assert (data["cases"], data["references"], data["makespan_s"]) == (s.cases, s.references, s.makespan)
    assert data["makespan_without_references_s"] == s.makespan_without_references
    assert out.err == ""


def test_schedule_old_options_still_work_with_a_notice(capsys):
    import json

    from harness.cli import main

    assert main(["schedule", "--suite", "smoke-cpu", "--simulate", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["cases"] == 11
    assert "--simulate is deprecated" in out.err and "--json is deprecated, use --format json" in out.err
    assert main(["schedule", "--suite", "smoke-cpu"]) == 0  # no --simulate needed
    assert capsys.readouterr().out.startswith("schedule on local")


def test_every_schedule_option_has_help():
    from harness.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    p = sub.choices["schedule"]
    assert all(a.help for a in p._actions), [a.dest for a in p._actions if not a.help]

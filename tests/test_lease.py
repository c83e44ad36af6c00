"""Device leases across real processes: no overlap, crash release, gangs all or nothing."""

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harness.launch import Placement
from harness.plan.devices import pick_devices
from runners.lease import Leases, default_root

REPO = Path(__file__).resolve().parents[1]


def python(script: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env, text=True, **kw)


# A worker like one pytest-xdist worker would be: lease, hold, record when, release; several rounds.
COMPETITOR = """
    import json, sys, time
    from runners.lease import Leases
    root, out, wanted, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    leases = Leases(root, holder=f"competitor-{wanted}")
    spans = []
    for _ in range(rounds):
        with leases.acquire("node0", wanted, [0, 1], timeout_s=120) as lease:
            start = time.monotonic()  # system-wide clock: comparable across processes
            time.sleep(0.02)
            spans.append([list(lease.devices), start, time.monotonic()])
    open(out, "w").write(json.dumps(spans))
"""


@pytest.mark.slow  # over 1 s: six processes compete for the devices
def test_competing_processes_never_share_a_device(tmp_path):
    root = tmp_path / "leases"
    wants = [1, 1, 1, 2, 1, 2]
    procs = [python(COMPETITOR, str(root), str(tmp_path / f"w{i}.json"), str(w), "8") for i, w in enumerate(wants)]
    for p in procs:
        assert p.wait(timeout=180) == 0
    spans = [s for i in range(len(wants)) for s in json.loads((tmp_path / f"w{i}.json").read_text())]
    assert len(spans) == 8 * len(wants)
    for device in (0, 1):
        mine = sorted((start, end) for devices, start, end in spans if device in devices)
        assert mine, f"device {device} was never leased"
        for (s1, e1), (s2, e2) in itertools.pairwise(mine):
            assert s2 >= e1, f"device {device} held twice at once: [{s1}, {e1}) and [{s2}, {e2})"
    assert all(len(d) == w for (d, _, _), w in zip(spans, [w for w in wants for _ in range(8)], strict=True))


def test_sigkilled_holder_frees_its_devices(tmp_path):
    root = tmp_path / "leases"
    victim = python(
        """
        import sys, time
        from runners.lease import Leases
        lease = Leases(sys.argv[1], holder="victim").acquire("node0", 2, [0, 1], timeout_s=10)
        print("held", *lease.devices, flush=True)
        time.sleep(600)
    """,
        str(root),
        stdout=subprocess.PIPE,
    )
    try:
        assert victim.stdout.readline().split() == ["held", "0", "1"]
        with pytest.raises(TimeoutError) as err:
            Leases(root).acquire("node0", 1, [0, 1], timeout_s=0)
        assert f"pid={victim.pid}" in str(err.value) and "victim" in str(err.value)
        os.kill(victim.pid, signal.SIGKILL)  # no clean-up runs: only the kernel drops its locks
        victim.wait(timeout=10)
        with Leases(root).acquire("node0", 2, [0, 1], timeout_s=10) as lease:
            assert lease.devices == (0, 1)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def test_gang_is_all_or_nothing(tmp_path):
    leases = Leases(tmp_path)
    blocker = leases.acquire("node1", 1, [0], timeout_s=0)
    with pytest.raises(TimeoutError) as err:
        leases.acquire_many([("node0", 2, [0, 1]), ("node1", 1, [0])], timeout_s=0.2)
    assert "node 'node1'" in str(err.value) and "all or none" in str(err.value)
    # nothing of the failed gang is still held on node0
    with leases.acquire("node0", 2, [0, 1], timeout_s=0) as lease:
        assert lease.devices == (0, 1)
    blocker.release()
    with leases.acquire_many([("node0", 2, [0, 1]), ("node1", 1, [0])], timeout_s=0) as gang:
        assert [(l.node, l.devices) for l in gang] == [("node0", (0, 1)), ("node1", (0,))]
        assert gang.placement() == Placement((("node0", (0, 1)), ("node1", (0,))))


def test_gang_waits_for_the_missing_node_then_takes_all(tmp_path):
    leases = Leases(tmp_path)
    blocker = leases.acquire("node1", 4, range(4), timeout_s=0)
    got = {}

    def waiter():
        got["gang"] = leases.acquire_many([("node0", 4, range(4)), ("node1", 4, range(4))], timeout_s=60)

    t = threading.Thread(target=waiter)
    t.start()
    # while it waits, node0 is not held by the half-leased gang for good: it can be leased
    lease = leases.acquire("node0", 4, range(4), timeout_s=30)
    lease.release()
    blocker.release()
    t.join(60)
    assert [l.devices for l in got["gang"]] == [(0, 1, 2, 3), (0, 1, 2, 3)]
    got["gang"].release()


# Two gangs over the same two nodes, asking in opposite orders: ordered, non-blocking tries
# cannot deadlock, so both finish every round.
GANG = """
    import sys
    from runners.lease import Leases
    root, first, second = sys.argv[1:4]
    leases = Leases(root)
    for _ in range(30):
        with leases.acquire_many([(first, 1, [0]), (second, 1, [0])], timeout_s=120):
            pass
    print("done", flush=True)
"""


def test_opposite_gangs_do_not_deadlock(tmp_path):
    a = python(GANG, str(tmp_path), "nodeA", "nodeB", stdout=subprocess.PIPE)
    b = python(GANG, str(tmp_path), "nodeB", "nodeA", stdout=subprocess.PIPE)
    assert a.communicate(timeout=180)[0].strip() == "done"
    assert b.communicate(timeout=180)[0].strip() == "done"


def test_two_requests_on_one_node_get_disjoint_devices(tmp_path):
    # a P/D pair packed on one host
    with Leases(tmp_path).acquire_many([("local", 2, range(4)), ("local", 2, range(4))], timeout_s=0) as gang:
        assert set(gang[0].devices).isdisjoint(gang[1].devices)
        assert gang.placement().nodes == (("local", (0, 1)), ("local", (2, 3)))


def test_timeout_names_the_node_and_the_count(tmp_path):
    leases = Leases(tmp_path, holder="case-a")
    held = leases.acquire("npu-node0", 6, range(8), timeout_s=0)
    with pytest.raises(TimeoutError) as err:
        Leases(tmp_path).acquire("npu-node0", 4, range(8), timeout_s=0.1)
    text = str(err.value)
    assert "node 'npu-node0'" in text and "wanted 4 device(s) of 0-7" in text and "2 free (6-7)" in text
    assert "case-a" in text
    held.release()
    with pytest.raises(ValueError, match="node 'npu-node0' has 8 candidate"):
        leases.acquire("npu-node0", 9, range(8), timeout_s=0)


def test_separate_lease_objects_in_one_process_exclude_each_other(tmp_path):
    first = Leases(tmp_path).acquire("n", 1, [3], timeout_s=0)
    with pytest.raises(TimeoutError):
        Leases(tmp_path).acquire("n", 1, [3], timeout_s=0)
    first.release()
    first.release()  # idempotent
    assert first.released
    Leases(tmp_path).acquire("n", 1, [3], timeout_s=0).release()


def test_lease_prefers_a_contiguous_aligned_range(tmp_path):
    leases = Leases(tmp_path)
    holes = [leases.acquire("n", 1, [d], timeout_s=0) for d in (2, 7)]
    # free: 0-1, 3-6, 8-15; four devices: the tightest run that holds them is 3-6
    with leases.acquire("n", 4, range(16), timeout_s=0) as lease:
        assert lease.devices == (3, 4, 5, 6)
    with leases.acquire("n", 8, range(16), timeout_s=0) as lease:
        assert lease.devices == tuple(range(8, 16))
    for h in holes:
        h.release()


def test_pick_devices():
    assert pick_devices([0, 1, 3, 4, 5, 6], 2) == [0, 1]  # best fit keeps the longer run whole
    assert pick_devices(list(range(16)), 8) == list(range(8))
    assert pick_devices([1, 2, 3, 4, 5, 6, 7, 8], 4) == [4, 5, 6, 7]  # aligned inside the run
    assert pick_devices([0, 2, 4, 6], 2) == [0, 2]  # no run: lowest ids


def test_pick_devices_is_the_best_of_every_choice():
    """The choice pick_devices documents, found by trying every start: among the contiguous runs
    that hold ``wanted``, the shortest run, then an aligned start, then the lowest id; without
    one, the lowest ids. (It finds that best without listing every start.)"""
    rng = random.Random(5)
    for _ in range(3000):
        free = sorted(rng.sample(range(32), rng.randint(0, 32)))
        wanted = rng.randint(1, 17)
        starts = [
            (run, d % wanted != 0, d)
            for d in free
            if all(d + k in free for k in range(wanted))
            for run in [
                next(n for n in itertools.count(1) if d + n not in free)
                + next(n for n in itertools.count(0) if d - n - 1 not in free)
            ]
        ]
        best = min(starts, default=None)
        expected = list(range(best[2], best[2] + wanted)) if best else free[:wanted]
        assert pick_devices(free, wanted) == expected, (free, wanted)


def test_node_names_are_safe_path_components(tmp_path):
    for name in ("../evil/node", "..", ".", ""):
        with Leases(tmp_path / "leases").acquire(name, 1, [0], timeout_s=0):
            pass
    locks = list((tmp_path / "leases").rglob("*.lock"))
    assert len(locks) == 4 and all(p.parent.parent == tmp_path / "leases" for p in locks)


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.delenv("PPCONF_LEASES", raising=False)
    monkeypatch.setenv("PPCONF_CACHE", str(tmp_path))
    assert default_root() == tmp_path / "leases"
    monkeypatch.setenv("PPCONF_LEASES", str(tmp_path / "elsewhere"))
    assert default_root() == tmp_path / "elsewhere"


def test_a_device_lock_planted_as_a_link_is_refused_and_its_target_kept(tmp_path):
    """The lock file is truncated and written with its holder: through a planted link that would
    empty whatever file the link points at."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (tmp_path / "leases" / "node0").mkdir(parents=True)
    (tmp_path / "leases" / "node0" / "device-0.lock").symlink_to(precious)
    with pytest.raises(OSError, match="is a link"):
        Leases(tmp_path / "leases").acquire("node0", 1, [0], timeout_s=0)
    assert precious.read_text() == "keep me\n"

import json

from harness.results import store as results
from tests.records import record


def test_append_read_and_later_record_wins(tmp_path):
    results.append(tmp_path, record("a", "FAIL"))
    results.append(tmp_path, record("b", "PASS"))
    results.append(tmp_path, record("a", "PASS"))
    got = {r["case"]: r["outcome"] for r in results.read(tmp_path)}
    assert got == {"a": "PASS", "b": "PASS"}
    assert [r["case"] for r in results.read(tmp_path)] == ["a", "b"]


def test_torn_last_line_is_dropped_and_repaired(tmp_path):
    results.append(tmp_path, record("a", "PASS"))
    with open(tmp_path / results.RESULTS, "a") as f:
        f.write('{"case": "b", "outc')
    assert [r["case"] for r in results.read(tmp_path)] == ["a"]
    assert results.repair(tmp_path)
    results.append(tmp_path, record("b", "PASS"))
    lines = (tmp_path / results.RESULTS).read_text().splitlines()
    assert [json.loads(l)["case"] for l in lines] == ["a", "b"]

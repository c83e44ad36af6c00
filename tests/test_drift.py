from harness.cases.expand import expand
from reports.drift import docs_drift, published_symbol, read_tables

DOC = """\
Some prose.

| Feature stacked with PP | Support |
|---|---|
| Prefix caching | ✅ |
| Pooling | Not supported. |
| MTP |  |
| Warp drive | Supported. |

Feature stacked with PP\tSupport
PCP (Prefill Context Parallel)\tSupported.
EAGLE3\tSupported only for MiniMax-M3 sparse models.
"""


def test_reads_pipe_and_tab_tables():
    rows = read_tables(DOC)
    assert [(r.line, r.name) for r in rows] == [(5, "Prefix caching"), (6, "Pooling"), (7, "MTP"), (8, "Warp drive"),
                                                (11, "PCP (Prefill Context Parallel)"), (12, "EAGLE3")]
    assert [published_symbol(r.text) for r in rows] == ["✅", "❌", None, "✅", "✅", "✅"]


def test_drift_against_the_ascend_claims(shipped, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    cases = list(expand(shipped, "nightly-ascend").cases)
    found = {d.name: d.message for d in docs_drift(doc, shipped, cases)}
    assert "blank cell" in found["MTP"]
    assert "no feature or family" in found["Warp drive"]
    assert "no case of the matrix exercises feature 'pooling'" in found["Pooling"]
    assert "the matrix claims ❌" in found["PCP (Prefill Context Parallel)"]
    # EAGLE3 is claimed for MiniMax-M3 only: "Supported only for ..." agrees with that
    assert "EAGLE3" not in found and "Prefix caching" not in found


def test_drift_against_a_run(shipped, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("| Feature | Support |\n|---|---|\n| Prefix caching | ✅ |\n")
    cases = [c for c in expand(shipped, "nightly-ascend").cases if "prefix-caching" in c.features
             and c.expectation.kind == "supported"]
    records = [{"case": c.id, "expectation": c.expectation.to_json(), "outcome": "FAIL"} for c in cases]
    (d,) = docs_drift(doc, shipped, cases, records)
    assert "the run observed ❌" in d.message

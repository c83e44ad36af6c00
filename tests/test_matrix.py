import pytest

from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


def test_shipped_matrix_loads(shipped):
    assert {"smoke-cpu", "nightly-ascend"} <= set(shipped.suites)
    assert shipped.rules, "rules are loaded in order"
    assert [r.index for r in shipped.rules] == list(range(len(shipped.rules)))


def test_unknown_key_names_file_line_and_closest_key(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        features:
          my-feature:
            title: x
            argz: [--foo]
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("extra.yaml:4:5" in e and "unknown key 'argz'" in e and "did you mean 'args'" in e for e in errs), errs


def test_a_suite_cannot_pick_the_partition_rule_set(matrix_dir):
    # each case carries both partition checks and the rules choose; a suite-level choice that
    # nothing reads is refused, pointing at the line and at where the choice lives
    matrix_dir(
        "extra.yaml",
        """\
        suites:
          mine:
            title: x
            platform: ascend
            partition_rules: ascend-doc
            groups:
              - families: [guide-61-layer]
                topologies: [tp8-pp2]
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any(
        "extra.yaml:5:5" in e
        and "suites.mine.partition_rules: 'partition_rules' is no longer a setting" in e
        and "partition_doc_error" in e
        and "did you mean" not in e
        for e in errs
    ), errs


def test_unknown_feature_in_suite_is_an_error_not_an_empty_selection(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        suites:
          mine:
            title: x
            platform: cpu
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
                features: [prefix-cachin]
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any(
        "extra.yaml:2:3" in e and "unknown feature 'prefix-cachin'" in e and "did you mean 'prefix-caching'" in e
        for e in errs
    ), errs


def test_bad_literal_value_suggests(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        suites:
          mine:
            title: x
            platform: cpu
            mode: pairwse
            groups:
              - families: [qwen3-tiny]
                topologies: [pp2-tp1-mp]
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("extra.yaml:5:11" in e and "'pairwse'" in e and "did you mean 'pairwise'" in e for e in errs), errs


def test_condition_error_points_at_the_column(matrix_dir):
    matrix_dir(
        "zz-rules.yaml",
        """\
        rules:
          - when: 'pp > 1 && familly == "qwen3-tiny"'
            expect: supported
            why: x
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any(
        "zz-rules.yaml:2:11" in e and "familly" in e and "did you mean 'family'" in e and "^" in e for e in errs
    ), errs


def test_typo_in_a_compared_value_is_caught(matrix_dir):
    matrix_dir(
        "zz-rules.yaml",
        """\
        rules:
          - when: 'family == "qwen3-tny"'
            expect: supported
            why: x
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("qwen3-tny" in e and "qwen3-tiny" in e for e in errs), errs


def test_rule_fields_depend_on_the_outcome(matrix_dir):
    matrix_dir(
        "zz-rules.yaml",
        """\
        rules:
          - when: 'pp > 1'
            expect: rejected
            why: x
          - when: 'pp > 2'
            expect: known-issue
            why: y
            link: https://example.invalid/1
          - when: 'pp > 3'
            expect: rejected
            error: '(unclosed'
            phase: startup
            why: z
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("zz-rules.yaml:2:5" in e and "needs error, phase" in e for e in errs), errs
    assert any("zz-rules.yaml:5:5" in e and "needs owner, until, waives" in e for e in errs), errs
    assert any("zz-rules.yaml:9:5" in e and "regular expression" in e for e in errs), errs


def test_duplicate_names_across_files(matrix_dir):
    matrix_dir(
        "zz-dupe.yaml",
        """\
        topologies:
          pp2-tp1:
            pp: 2
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("zz-dupe.yaml:2:3" in e and "already defined at matrices/topologies.yaml" in e for e in errs), errs


def test_invalid_yaml_names_position(matrix_dir):
    matrix_dir("broken.yaml", "features:\n  a: [1, 2\n  b: 3\n")
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/broken.yaml:") and "invalid YAML" in e for e in errs), errs


def test_unknown_section(matrix_dir):
    matrix_dir("extra.yaml", "featurs: {}\n")
    errs = errors_of(matrix_dir.root)
    assert any("extra.yaml:1:1" in e and "did you mean 'features'" in e for e in errs), errs


def test_files_in_eval_folders_are_data_not_matrix_files(matrix_dir):
    # an lm-eval task file is YAML with sections the matrix does not know
    matrix_dir("cpu/eval/task.yaml", "task: t\ndoc_to_text: x\n")
    load_matrix(matrix_dir.root)
    matrix_dir("cpu/evaluation.yaml", "doc_to_text: x\n")  # only a folder of that name is data
    assert any("evaluation.yaml:1:1" in e for e in errors_of(matrix_dir.root))


def test_all_errors_reported_at_once(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        features:
          a:
            title: x
            requires: [nope]
          b:
            titel: y
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert len([e for e in errs if "extra.yaml" in e]) >= 2, errs


def test_bad_regex_in_a_feature_is_a_positioned_error(matrix_dir):
    matrix_dir(
        "extra.yaml",
        """\
        features:
          x:
            title: t
            silent_disable: ['(unclosed']
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("extra.yaml:4:" in e and "not a valid regular expression" in e for e in errs), errs


def test_a_waiver_names_the_checks_it_covers(matrix_dir):
    matrix_dir(
        "zz-rules.yaml",
        """\
        rules:
          - when: 'pp > 2'
            expect: flaky
            link: https://example.invalid/1
            waives: [accuracy, everything]
            why: y
          - when: 'pp > 3'
            expect: supported
            waives: [accuracy]
            why: z
        """,
    )
    errs = errors_of(matrix_dir.root)
    assert any("zz-rules.yaml" in e and "everything" in e for e in errs), errs
    assert any("zz-rules.yaml:7:5" in e and "waives only applies" in e for e in errs), errs


@pytest.mark.slow  # over 2 s: it lints or expands every shipped suite
def test_lint_warns_when_a_claimed_rejection_is_a_crash(matrix_dir):
    from harness.cases.lint import lint

    matrix_dir(
        "cpu/zz-crash.yaml",
        """\
        rules:
          - when: 'platform == "cpu" && partition_doc_error != "" && "prefix-caching" in features'
            expect: rejected
            error: "ZeroDivisionError: integer division or modulo by zero"
            phase: startup
            why: a crash claimed as a rejection
          - when: 'platform == "cpu" && pp > 1 && "enforce-eager" in features && backend == "mp"'
            expect: rejected
            error: "'CPUModelRunner' object has no attribute 'drafter'"
            phase: startup
            why: another
        """,
    )
    text = (matrix_dir.root / "cpu/rules.yaml").read_text()
    # ahead of the shipped rules, so both decide some case
    (matrix_dir.root / "cpu/rules.yaml").unlink()
    (matrix_dir.root / "cpu/zz-rules.yaml").write_text(text)
    report = lint(load_matrix(matrix_dir.root))
    crashes = [w for w in map(str, report.warnings) if "matches a crash" in w]
    assert any("ZeroDivisionError" in w and "zz-crash.yaml:2:5" in w for w in crashes), report.warnings
    assert any("AttributeError" in w and "zz-crash.yaml:7:5" in w for w in crashes), report.warnings
    shipped_report = lint(load_matrix())
    assert not [w for w in map(str, shipped_report.warnings) if "matches a crash" in w]

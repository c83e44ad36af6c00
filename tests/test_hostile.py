"""Hostile matrices and arguments: each gets a clean, positioned error or a bounded run."""

import time

import pytest

from harness.check import logs
from harness.check.diagnose import diagnose
from harness.matrix.load import load_matrix
from harness.matrix.schema import Diagnosis
from harness.matrix.source import MatrixError


def errors_of(root):
    with pytest.raises(MatrixError) as err:
        load_matrix(root)
    return [str(e) for e in err.value.errors]


@pytest.mark.parametrize("where,body", [
    ("rules", 'rules:\n  - when: family == "qwen3-tiny"\n    expect: rejected\n    phase: startup\n'
              '    why: x\n    error: "^(\\\\w+\\\\s?)+$"\n'),
    ("features", "features:\n  evil:\n    title: x\n    silent_disable: ['(a+)+b']\n"),
    ("diagnosis", "diagnosis:\n  - symptom: x\n    advice: y\n    patterns: ['(x+x+)+y']\n"),
])
def test_nested_quantifiers_are_refused_at_load(matrix_dir, where, body):
    matrix_dir("evil.yaml", body)
    errs = errors_of(matrix_dir.root)
    assert any(e.startswith("matrices/evil.yaml:") and "nested quantifiers" in e for e in errs), errs


def test_a_backtracking_pattern_cannot_hang_a_log_search(tmp_path, monkeypatch):
    # (a|aa)+$ has no nested quantifier, so it passes the lint; matching still has a deadline
    monkeypatch.setattr(logs, "PATTERN_BUDGET_S", 0.5)
    log = tmp_path / "api.log"
    log.write_text("WARNING " + "a" * 80 + "b\n")
    t0 = time.monotonic()
    with pytest.raises(logs.PatternTimeout, match=r"\(a\|aa\)\+\$"):
        logs.search({"api": log}, r"(a|aa)+$")
    with pytest.raises(logs.PatternTimeout):
        logs.warnings_matching({"api": log}, [r"(a|aa)+$"])
    with pytest.raises(logs.PatternTimeout):
        diagnose([Diagnosis(symptom="s", advice="a", patterns=[r"(a|aa)+$"])], ["a" * 80 + "b"], {})
    assert time.monotonic() - t0 < 10

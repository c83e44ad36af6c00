"""Any matrix file gives a clear error with file:line, or loads: never a traceback, never a hang."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.matrix.load import load_matrix
from harness.matrix.source import MatrixError

KEYS = [
    "platforms",
    "families",
    "features",
    "topologies",
    "suites",
    "rules",
    "title",
    "when",
    "expect",
    "why",
    "variants",
    "groups",
    "pp",
    "tp",
    "args",
    "configs",
    "error",
    "phase",
    "- ",
    ": ",
    "\n",
    "  ",
    "[",
    "]",
    "{",
    "}",
    "'",
    '"',
    "&&",
    "!",
    "|",
    ">",
    "&",
    "*",
    "#",
    "\t",
    "\x00",
    "é",
]
yaml_soup = st.lists(st.one_of(st.sampled_from(KEYS), st.text(string.printable, max_size=6)), max_size=60).map("".join)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=yaml_soup)
def test_any_extra_file_loads_or_fails_cleanly(matrix_dir, text):
    path = matrix_dir("zz-fuzz.yaml", "")
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        load_matrix(matrix_dir.root)
    except MatrixError as err:
        assert err.errors
        for e in err.errors:
            # every message names a file and a position, or is about the directory as a whole
            assert e.where is None or (e.where.file and e.where.line >= 1 and e.where.column >= 1)
            assert str(e)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(when=st.text(max_size=80))
def test_any_rule_condition_loads_or_fails_cleanly(matrix_dir, when):
    import json

    matrix_dir("zz-rule.yaml", f"rules:\n  - when: {json.dumps(when)}\n    expect: supported\n    why: x\n")
    try:
        load_matrix(matrix_dir.root)
    except MatrixError as err:
        assert any("zz-rule.yaml:2:" in str(e) for e in err.errors), [str(e) for e in err.errors]

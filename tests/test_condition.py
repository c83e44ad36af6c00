"""Tests for harness.matrix.condition: the rule-condition parser and evaluator."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.matrix.condition import MAX_DEPTH, Condition, ConditionError, MissingAttributeError, parse

ATTRS = {
    "pp": int,
    "tp": int,
    "nnodes": int,
    "supports_pp": bool,
    "eager": bool,
    "family": str,
    "platform": str,
    "feature": str,
    "partition_error": str,
    "features": list,
}
DOMAINS = {
    "family": {"qwen3-tiny", "llama-tiny", "minimax-m3", "deepseek-v3"},
    "feature": {"eagle3", "pcp", "lora", "mtp"},
    "features": {"eagle3", "pcp", "lora", "mtp"},
}
CASE = {
    "pp": 2,
    "tp": 8,
    "nnodes": 2,
    "supports_pp": True,
    "eager": False,
    "family": "qwen3-tiny",
    "platform": "ascend",
    "feature": "eagle3",
    "partition_error": "",
    "features": ["pcp", "lora"],
}


def ev(text: str, **overrides: object) -> bool:
    """Evaluate with full static checking against CASE (plus overrides)."""
    return parse(text, ATTRS, DOMAINS).evaluate({**CASE, **overrides})


def error(text: str, attributes=ATTRS, domains=DOMAINS) -> ConditionError:
    with pytest.raises(ConditionError) as info:
        parse(text, attributes, domains)
    return info.value


# --- examples from the matrices ------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('feature == "eagle3" && family != "minimax-m3"', True),
        ('platform == "ascend" && pp > 1 && "pcp" in features', True),
        ("!supports_pp && pp > 1", False),
        ('family in ["qwen3-tiny", "llama-tiny"] || (tp >= 8 && nnodes == 2)', True),
        ('partition_error != ""', False),
        ("true", True),
        ("false", False),
    ],
)
def test_matrix_examples(text, expected):
    assert ev(text) is expected


def test_condition_object():
    c = parse('family in ["qwen3-tiny"] || (tp >= 8 && !eager)', ATTRS, DOMAINS)
    assert str(c) == c.text == 'family in ["qwen3-tiny"] || (tp >= 8 && !eager)'
    assert c.identifiers() == frozenset({"family", "tp", "eager"})
    assert parse("true").identifiers() == frozenset()
    assert c == parse(c.text) and hash(c) == hash(parse(c.text))
    assert isinstance(c, Condition)


# --- precedence and operators --------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("true || false && false", True),  # && binds tighter than ||
        ("(true || false) && false", False),
        ("!false && false", False),  # ! binds tighter than &&
        ("!(false && false)", True),
        ("!true || true", True),  # ! binds tighter than ||
        ("!(true || true)", False),
        ("!!true", True),
        ("!pp > 1", False),  # ! applies to the whole comparison
        ("false || false || true", True),
        ("true && true && false", False),
        ("((((true))))", True),
    ],
)
def test_precedence(text, expected):
    assert ev(text) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("pp == 2", True),
        ("pp != 2", False),
        ("pp < 2", False),
        ("pp <= 2", True),
        ("pp > 1", True),
        ("pp >= 3", False),
        ("2 < tp", True),
        ("pp < tp", True),
        ('family == "qwen3-tiny"', True),
        ('"qwen3-tiny" == family', True),
        ('family != "llama-tiny"', True),
        ("supports_pp == true", True),
        ("eager != false", False),
        ("(pp > 1) == supports_pp", True),
        ('"pcp" in features', True),
        ('"mtp" in features', False),
        ('"mtp" not in features', True),
        ('"pcp" not  in features', False),
        ('family in ["llama-tiny", "qwen3-tiny"]', True),
        ('family not in ["llama-tiny"]', True),
        ("pp in [1, 2, 4]", True),
        ("pp not in [1, 4]", True),
        ("eager in [true]", False),
        ("pp in []", False),
        ("pp not in []", True),
        ('features == ["lora", "pcp"]', True),  # lists compare as multisets
        ('features == ["pcp"]', False),
        ("features != []", True),
        ("partition_error == ''", True),
    ],
)
def test_operators(text, expected):
    assert ev(text) is expected


def test_whitespace_is_optional_and_flexible():
    assert ev('pp>1&&!eager&&family=="qwen3-tiny"') is True
    assert ev("\tpp >\n 1\r\n") is True
    assert ev("supports_pp\n||\neager") is True


def test_list_attributes_may_be_any_collection():
    for features in (("pcp",), {"pcp"}, frozenset({"pcp"}), ["pcp"]):
        assert ev('"pcp" in features && features == ["pcp"]', features=features) is True
    assert ev('"pcp" in features', features=[]) is False


def test_short_circuit_skips_missing_attributes():
    c = parse("false && missing_attr")
    assert c.evaluate({}) is False
    assert parse("true || missing_attr").evaluate({}) is True


def test_not_in_needs_a_separate_word():
    assert error("pp notin [1]", None, None).reason == "unexpected token 'notin'"
    assert parse("nothing in features").identifiers() == {"nothing", "features"}
    assert parse('"a" not in inputs').evaluate({"inputs": ["b"]}) is True


# --- strings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "literal, value",
    [
        (r'"a\"b"', 'a"b'),
        (r"'a\'b'", "a'b"),
        (r'"a\\b"', "a\\b"),
        (r'"a\'b"', "a'b"),  # the other quote may be escaped too
        ("'say \"hi\"'", 'say "hi"'),  # ... or not
        ('"ünï-cödé"', "ünï-cödé"),
        ('"Mixed Case"', "Mixed Case"),
        ('""', ""),
    ],
)
def test_string_escapes(literal, value):
    assert parse(f"s == {literal}").evaluate({"s": value}) is True
    assert parse(f"s != {literal}").evaluate({"s": value + "x"}) is True


# --- syntax errors: column and caret -------------------------------------------------


def test_error_message_has_caret_under_column():
    e = error("pp > 1 && & tp")
    assert (e.column, e.reason, e.hint) == (11, "unexpected token '&'", "&&")
    assert str(e) == ("unexpected token '&' at column 11 (did you mean '&&'?)\n  pp > 1 && & tp\n            ^")
    assert isinstance(e, ValueError)


def test_caret_stays_aligned_with_tabs_and_newlines():
    e = error("pp > 1 &&\n\t$")
    assert e.column == 12
    lines = str(e).splitlines()
    assert lines[1] == "  pp > 1 &&  $"
    assert lines[2].index("^") == lines[1].index("$")


def test_caret_at_end_of_text():
    e = error("pp >")
    assert (e.column, e.reason) == (5, "unexpected end of condition")
    assert str(e).splitlines()[2] == "      ^"


@pytest.mark.parametrize(
    "text, column, reason, hint",
    [
        ("", 1, "empty condition", None),
        ("   \t\n", 1, "empty condition", None),
        ("pp > 1 | eager", 8, "unexpected token '|'", "||"),
        ("pp = 2", 4, "unexpected token '='", "=="),
        ("pp > 1 and eager", 8, "unexpected token 'and'", "&&"),
        ("eager or supports_pp", 7, "unexpected token 'or'", "||"),
        ("not eager", 1, "unexpected token 'not'", "!"),
        ("pp > 1 $", 8, "unexpected token '$'", None),
        ("pp > 1 \x00", 8, "unexpected token '\\x00'", None),
        ("pp > 1 ≥ 2", 8, "unexpected token '≥'", None),
        ("pp > 1 eager", 8, "unexpected token 'eager'", None),
        ("pp > 1)", 7, "unexpected token ')'", None),
        ("&& eager", 1, "unexpected token '&&'", None),
        ("eager &&", 9, "unexpected end of condition", None),
        ("!", 2, "unexpected end of condition", None),
        ("pp >", 5, "unexpected end of condition", None),
        ("(eager", 1, "unclosed '('", None),
        ("eager && ((eager)", 10, "unclosed '('", None),
        ("(eager eager)", 8, "expected ')' but found 'eager'", None),
        ('family in ["a"', 11, "unclosed '['", None),
        ('family in ["a",', 11, "unclosed '['", None),
        ('family in ["a" "b"]', 16, "expected ',' or ']' but found '\"b\"'", None),
        ('family in ["a",]', 16, "expected a literal but found ']'", None),
        ("family in [platform]", 12, "expected a literal but found 'platform'", None),
        ('"abc', 1, "unterminated string", None),
        ("pp == 1 && family == 'abc", 22, "unterminated string", None),
        ('family == "abc\\"', 11, "unterminated string", None),
        ('family == "a\\', 11, "unterminated string", None),
        ('family == "a\\nb"', 13, "unsupported escape '\\\\n'; only \\\", \\' and \\\\ are allowed", None),
        ("pp == 1" + "0" * 30, 7, "integer literal too long", None),
        ("pp == 1 == 1", 9, "comparisons cannot be chained; combine them with '&&'", None),
        ("pp in in", 7, "unexpected token 'in'", None),
    ],
)
def test_syntax_errors(text, column, reason, hint):
    e = error(text)
    assert (e.column, e.reason, e.hint) == (column, reason, hint)
    assert e.text == text
    caret_line = str(e).splitlines()[-1]
    assert caret_line == "  " + " " * (column - 1) + "^"


def test_syntax_errors_without_attribute_types():
    assert error("a &&", None, None).reason == "unexpected end of condition"
    assert error("a & b", None, None).hint == "&&"


def test_nesting_depth_is_capped():
    ok = "(" * MAX_DEPTH + "eager" + ")" * MAX_DEPTH
    assert ev(ok) is False
    assert ev("!" * MAX_DEPTH + "eager") is False
    assert ev("!(" * (MAX_DEPTH // 2) + "eager" + ")" * (MAX_DEPTH // 2)) is False
    for deep in ("(" * (MAX_DEPTH + 1) + "eager" + ")" * (MAX_DEPTH + 1), "!" * (MAX_DEPTH + 1) + "eager"):
        e = error(deep)
        assert (e.column, e.reason) == (MAX_DEPTH + 1, f"nesting deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize(
    "text",
    [
        "(" * 200_000,
        "!" * 200_000,
        '"' + "x" * 200_000,
        "\\" * 200_000,
        "9" * 200_000,
        " && ".join(["eager"] * 50_000),
        " || ".join(["pp > 1 && !eager"] * 20_000),
        "family in [" + ", ".join(['"qwen3-tiny"'] * 50_000) + "]",
    ],
)
def test_large_inputs_terminate_cleanly(text):
    # speed is measured by benchmarks, not asserted here; this proves no hang and no stray exception
    try:
        parse(text, ATTRS, DOMAINS).evaluate(CASE)
    except ConditionError:
        pass


def test_condition_must_be_a_string():
    with pytest.raises(TypeError, match="must be a string, not bool"):
        parse(True)  # type: ignore[arg-type]


def test_error_pickles():
    e = pickle.loads(pickle.dumps(error("pp > 1 && & tp")))
    assert (e.text, e.column, e.reason, e.hint) == ("pp > 1 && & tp", 11, "unexpected token '&'", "&&")


# --- static type errors --------------------------------------------------------------


@pytest.mark.parametrize(
    "text, column, reason, hint",
    [
        ('familly == "qwen3-tiny"', 1, "unknown attribute 'familly'", "family"),
        ("pp > 1 && suports_pp", 11, "unknown attribute 'suports_pp'", "supports_pp"),
        ("zzz", 1, "unknown attribute 'zzz'", None),
        ("True", 1, "unknown attribute 'True'", "true"),
        ("pp", 1, "a condition needs a boolean, but pp is int", None),
        ('"x"', 1, 'a condition needs a boolean, but "x" is str', None),
        ("family", 1, "a condition needs a boolean, but family is str", None),
        ("pp && eager", 1, "'&&' needs a boolean, but pp is int", None),
        ("eager && pp", 10, "'&&' needs a boolean, but pp is int", None),
        ("eager || features", 10, "'||' needs a boolean, but features is list[str]", None),
        ("!tp", 2, "'!' needs a boolean, but tp is int", None),
        ("!(tp)", 2, "'!' needs a boolean, but (tp) is int", None),
        ('pp == "2"', 4, 'cannot compare pp (int) with "2" (str)', None),
        ("eager == 1", 7, "cannot compare eager (bool) with 1 (int)", None),
        ("features == family", 10, "cannot compare features (list[str]) with family (str)", None),
        ("features == [1]", 10, "cannot compare features (list[str]) with [1] (list[int])", None),
        ('family < "z"', 1, "'<' needs integers, but family is str", None),
        ("pp >= eager", 7, "'>=' needs integers, but eager is bool", None),
        ("[1] <= 2", 1, "'<=' needs integers, but [1] is list[int]", None),
        ('"pcp" in feature', 10, "'in' needs a list on the right, but feature is str", None),
        ('"a" in "abc"', 8, "'in' needs a list on the right, but \"abc\" is str", None),
        ("features in [1]", 1, "'in' needs a single value on the left, but features is list[str]", None),
        ("pp in features", 4, "cannot look for pp (int) in features (list[str])", None),
        ('pp not in ["2"]', 4, 'cannot look for pp (int) in ["2"] (list[str])', None),
        ('[1, "a"] == []', 5, 'list elements must all be int, but "a" is str', None),
        ("[true, 0] == []", 8, "list elements must all be bool, but 0 is int", None),
    ],
)
def test_type_errors(text, column, reason, hint):
    e = error(text)
    assert (e.column, e.reason, e.hint) == (column, reason, hint)


def test_literals_are_type_checked_even_without_attribute_types():
    assert error('1 == "1"', None, None).reason == 'cannot compare 1 (int) with "1" (str)'
    assert error('"x" && true', None, None).reason == "'&&' needs a boolean, but \"x\" is str"
    assert error("x < true", None, None).reason == "'<' needs integers, but true is bool"


def test_attribute_types_must_be_supported():
    with pytest.raises(TypeError, match="unsupported attribute type"):
        parse("x", {"x": dict})


# --- domain errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, column, reason, hint",
    [
        ('family == "qwen3-tny"', 11, "unknown family 'qwen3-tny'", "qwen3-tiny"),
        ('"lama-tiny" != family', 1, "unknown family 'lama-tiny'", "llama-tiny"),
        ('family in ["qwen3-tiny", "minimax-m2"]', 26, "unknown family 'minimax-m2'", "minimax-m3"),
        ('family not in ["deepsek-v3"]', 16, "unknown family 'deepsek-v3'", "deepseek-v3"),
        ('"eagle" in features', 1, "unknown feature 'eagle'", "eagle3"),
        ('"pcpp" not in features', 1, "unknown feature 'pcpp'", "pcp"),
        ('features == ["lora", "mpt"]', 22, "unknown feature 'mpt'", "mtp"),
        ('feature == "eagle-3"', 12, "unknown feature 'eagle-3'", "eagle3"),
        ('feature == "zzz"', 12, "unknown feature 'zzz'; expected one of eagle3, lora, mtp, pcp", None),
    ],
)
def test_domain_errors(text, column, reason, hint):
    e = error(text)
    assert (e.column, e.reason, e.hint) == (column, reason, hint)


def test_domains_only_check_literals_compared_with_that_attribute():
    # platform has no domain; attribute-to-attribute comparisons have no literal.
    assert ev('platform == "anything"') is False
    assert ev("feature in features") is False
    # Domains work without attribute types too.
    e = error('family == "qwen3-tny"', None, DOMAINS)
    assert (e.column, e.hint) == (11, "qwen3-tiny")


def test_domain_suggestion_rendering():
    assert str(error('family == "qwen3-tny"')).splitlines()[0] == (
        "unknown family 'qwen3-tny' at column 11 (did you mean 'qwen3-tiny'?)"
    )


# --- evaluation errors ---------------------------------------------------------------


def test_missing_attribute_at_evaluation():
    c = parse("pp > 1 && eager")
    with pytest.raises(MissingAttributeError) as info:
        c.evaluate({"pp": 2})
    e = info.value
    assert isinstance(e, KeyError) and isinstance(e, ConditionError)
    assert (e.column, e.reason) == (11, "attribute 'eager' is not set")
    assert str(e).splitlines()[2] == "  " + " " * 10 + "^"


@pytest.mark.parametrize(
    "text, case, column, reason",
    [
        ("pp > 1", {"pp": "2"}, 1, "'>' needs integers, but pp is str"),
        ("pp == 2", {"pp": True}, 4, "cannot compare pp (bool) with 2 (int)"),
        ("eager", {"eager": 1}, 1, "a condition needs a boolean, but eager is int"),
        ("!eager", {"eager": "yes"}, 2, "'!' needs a boolean, but eager is str"),
        ('"a" in f', {"f": "abc"}, 8, "'in' needs a list on the right, but f is str"),
        ('"a" in f', {"f": [1]}, 5, 'cannot look for "a" (str) in f (list[int])'),
        ("x == 1", {"x": 1.5}, 1, "attribute 'x' has an unsupported value of type float"),
        ("x == []", {"x": [1, "a"]}, 1, "attribute 'x' has an unsupported value of type list"),
        ("x == []", {"x": {"a": 1}}, 1, "attribute 'x' has an unsupported value of type dict"),
    ],
)
def test_evaluation_type_errors(text, case, column, reason):
    with pytest.raises(ConditionError) as info:
        parse(text).evaluate(case)
    assert (info.value.column, info.value.reason) == (column, reason)


# --- property: arbitrary input only ever raises ConditionError -----------------------

TOKENS = [
    "&&",
    "||",
    "!",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "in",
    "not",
    "not in",
    "(",
    ")",
    "[",
    "]",
    ",",
    "&",
    "|",
    "=",
    "true",
    "false",
    "pp",
    "eager",
    "family",
    "features",
    "familly",
    "1",
    "007",
    '"qwen3-tiny"',
    '"x',
    "'y'",
    '"\\"',
    "\\",
    "'",
    "\x00",
    "é",
    " ",
    "\t",
    "\n",
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(),
        st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join),
        st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
    )
)
def test_arbitrary_text_only_raises_condition_error(text):
    for attributes, domains in ((None, None), (ATTRS, DOMAINS)):
        try:
            condition = parse(text, attributes, domains)
        except ConditionError as e:
            assert 1 <= e.column <= len(text) + 1
            str(e)
            continue
        assert condition.text == text
        try:
            assert condition.evaluate(CASE) in (True, False)
        except ConditionError:
            assert attributes is None  # well-typed conditions never fail on a well-typed case


# --- property: rendered random trees evaluate like a reference evaluator -------------

INT_ATTRS, BOOL_ATTRS, STR_ATTRS = ["pp", "tp", "nnodes"], ["supports_pp", "eager"], ["family", "platform"]
WORDS = ["qwen3-tiny", "Llama-Tiny", "", "it's", 'say "hi"', "back\\slash", "ünï", "a b"]

words = st.one_of(st.sampled_from(WORDS), st.text(alphabet="aB-'\"\\ é", max_size=5))
int_lit = st.builds(lambda n: ("int", n), st.integers(0, 4))
str_lit = st.builds(lambda s, q: ("str", s, q), words, st.sampled_from(['"', "'"]))
bool_lit = st.builds(lambda b: ("bool", b), st.booleans())
int_operand = st.one_of(int_lit, st.sampled_from(INT_ATTRS).map(lambda n: ("attr", n)))
str_operand = st.one_of(str_lit, st.sampled_from(STR_ATTRS).map(lambda n: ("attr", n)))
bool_leaf = st.one_of(bool_lit, st.sampled_from(BOOL_ATTRS).map(lambda n: ("attr", n)))
eq_ops, in_ops = st.sampled_from(["==", "!="]), st.sampled_from(["in", "not in"])
features = st.just(("attr", "features"))


def cmp(ops, left, right):
    return st.builds(lambda o, l, r: ("cmp", o, l, r), ops, left, right)


def list_of(items):
    return st.lists(items, max_size=3).map(lambda xs: ("list", xs))


leaves = st.one_of(
    bool_leaf,
    cmp(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), int_operand, int_operand),
    cmp(eq_ops, str_operand, str_operand),
    cmp(in_ops, str_operand, list_of(str_lit)),
    cmp(in_ops, int_operand, list_of(int_lit)),
    cmp(in_ops, str_operand, features),
    cmp(eq_ops, features, list_of(str_lit)),
    cmp(eq_ops, list_of(str_lit), features),
    # The same word quoted both ways: every escape must round-trip exactly.
    st.builds(lambda o, w: ("cmp", o, ("str", w, '"'), ("str", w, "'")), eq_ops, words),
)


def extend(children):
    bool_operand = st.one_of(bool_leaf, children.map(lambda t: ("paren", t)))
    return st.one_of(
        children.map(lambda t: ("not", t)),
        st.lists(children, min_size=2, max_size=4).map(lambda ts: ("and", ts)),
        st.lists(children, min_size=2, max_size=4).map(lambda ts: ("or", ts)),
        children.map(lambda t: ("paren", t)),
        cmp(eq_ops, bool_operand, bool_operand),
    )


trees = st.recursive(leaves, extend, max_leaves=24)
PREC = {"or": 1, "and": 2, "not": 3}


def render(t, sp: str) -> str:
    """Render with the fewest parentheses the grammar needs, so precedence is exercised."""

    def at_least(child, prec):
        text = render(child, sp)
        return f"({text})" if PREC.get(child[0], 4) < prec else text

    kind = t[0]
    if kind in ("int", "attr"):
        return str(t[1])
    if kind == "bool":
        return "true" if t[1] else "false"
    if kind == "str":
        _, s, q = t
        return q + s.replace("\\", "\\\\").replace(q, "\\" + q) + q
    if kind == "list":
        return "[" + f",{sp}".join(render(x, sp) for x in t[1]) + "]"
    if kind == "paren":
        return f"({render(t[1], sp)})"
    if kind == "not":
        return f"!{sp}{at_least(t[1], 3)}"
    if kind in ("and", "or"):
        op = "&&" if kind == "and" else "||"
        return f"{sp}{op}{sp}".join(at_least(x, PREC[kind]) for x in t[1])
    _, op, left, right = t
    space = " " if "in" in op else sp
    return f"{render(left, sp)}{space}{op}{space}{render(right, sp)}"


def reference(t, case):
    kind = t[0]
    if kind in ("int", "bool", "str"):
        return t[1]
    if kind == "attr":
        return case[t[1]]
    if kind == "list":
        return [reference(x, case) for x in t[1]]
    if kind == "paren":
        return reference(t[1], case)
    if kind == "not":
        return not reference(t[1], case)
    if kind == "and":
        return all(reference(x, case) for x in t[1])
    if kind == "or":
        return any(reference(x, case) for x in t[1])
    _, op, left, right = t
    a, b = reference(left, case), reference(right, case)
    if isinstance(a, (list, tuple, set, frozenset)):
        a, b = sorted(a), sorted(b)
    return {
        "==": lambda: a == b,
        "!=": lambda: a != b,
        "<": lambda: a < b,
        "<=": lambda: a <= b,
        ">": lambda: a > b,
        ">=": lambda: a >= b,
        "in": lambda: a in b,
        "not in": lambda: a not in b,
    }[op]()


def names(t):
    if t[0] == "attr":
        return {t[1]}
    children = [x for x in t[1:] if isinstance(x, tuple)] + [x for x in t[1:] if isinstance(x, list) for x in x]
    return set().union(*map(names, children)) if children else set()


cases = st.fixed_dictionaries(
    {
        "pp": st.integers(0, 4),
        "tp": st.integers(0, 4),
        "nnodes": st.integers(0, 4),
        "supports_pp": st.booleans(),
        "eager": st.booleans(),
        "family": words,
        "platform": words,
        "features": st.one_of(
            st.lists(words, max_size=4), st.frozensets(words, max_size=4), st.lists(words, max_size=4).map(tuple)
        ),
    }
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(trees, cases, st.sampled_from(["", " ", "  "]))
def test_random_trees_match_reference(tree, case, sp):
    text = render(tree, sp)
    condition = parse(text, {**ATTRS})
    assert condition.evaluate(case) is reference(tree, case), text
    assert condition.identifiers() == names(tree)
    assert parse(text).evaluate(case) is reference(tree, case)  # runtime checks agree


def test_a_remembered_value_is_the_one_for_the_same_values_and_types_and_errors_are_raised_again():
    c = parse("pp > 1 && features == ['a']")
    assert c.evaluate({"pp": 2, "features": ["a"]}) and c.evaluate({"pp": 2, "features": ("a",), "x": 1})
    assert not c.evaluate({"pp": 1, "features": ["a"]})
    for _ in range(2):  # a value of another type is not the remembered one: True is no integer
        with pytest.raises(ConditionError, match="needs integers"):
            c.evaluate({"pp": True, "features": ["a"]})
        with pytest.raises(MissingAttributeError):
            c.evaluate({"features": ["a"]})
    assert parse("pp > 1 || x").evaluate({"pp": 2}), "short-circuited past a missing attribute, as ever"

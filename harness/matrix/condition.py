# Boolean conditions for the expectation rules in matrix YAML files, e.g.
#
#     platform == "ascend" && pp > 1 && "pcp" in features
#
# Grammar (whitespace between tokens is ignored):
#
#     expr       := or
#     or         := and ('||' and)*
#     and        := unary ('&&' unary)*
#     unary      := '!' unary | comparison
#     comparison := operand (('==' | '!=' | '<' | '<=' | '>' | '>=' | 'in' | 'not' 'in') operand)?
#     operand    := '(' expr ')' | literal | IDENT | '[' (literal (',' literal)*)? ']'
#     literal    := STRING | INT | 'true' | 'false'
#     STRING     := '"' chars '"' | "'" chars "'"   (escapes: \" \' \\)
#     INT        := [0-9]+
#     IDENT      := [A-Za-z_][A-Za-z0-9_]*           ('true', 'false', 'in', 'not' are reserved)
#
# IDENT has no hyphens so that `a-b` can never be ambiguous; values with hyphens
# (model families, feature names) are string literals.  Note that '!' binds
# looser than a comparison: `!pp > 1` means `!(pp > 1)`.
#
# Values are typed bool, int, str or list[T].  Nothing is coerced: `pp == "2"`
# is an error rather than silently false, because a rule that can never match
# hides the very regressions the matrix exists to catch.  Types are checked at
# parse time when attribute types are known, and always again at evaluation.
"""Parse and evaluate matrix rule conditions; see the grammar above."""

from __future__ import annotations

import difflib
import operator
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace

__all__ = ["MAX_DEPTH", "MAX_TOKENS", "Condition", "ConditionError", "MissingAttributeError", "parse"]

# Each level of '(' or '!' costs at most 4 Python frames to parse and 3 to
# evaluate, so 100 levels stays well inside the default recursion limit of 1000
# even when called from deep inside pytest, hypothesis or a template.
MAX_DEPTH = 100
# Parsing and evaluating grow with the condition's length; the longest shipped condition has
# about 40 tokens, and a hostile one of 50,000 terms must fail at once, not after a minute.
MAX_TOKENS = 1000
_SHOWN = 80  # characters of a long condition shown either side of an error's column
# int() raises ValueError beyond 4300 digits; no real condition needs more than this.
_MAX_INT_DIGITS = 18

_PUNCT = ("&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "(", ")", "[", "]", ",")  # longest first
_CMP = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "not in"})
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")  # ASCII only: str.isdigit() accepts '²'
_DIGITS = frozenset("0123456789")
_SPACE = frozenset(" \t\r\n")
# Spellings people bring from Python, shells and YAML.
_HINTS = {"&": "&&", "|": "||", "=": "==", "and": "&&", "or": "||", "not": "!", "True": "true", "False": "false"}


class ConditionError(ValueError):
    """A bad condition: `reason` happened at 1-based `column` of `text`."""

    def __init__(self, text: str, column: int, reason: str, hint: str | None = None):
        super().__init__(text, column, reason, hint)  # keeps the exception picklable
        self.text, self.column, self.reason, self.hint = text, column, reason, hint

    def __str__(self) -> str:
        head = f"{self.reason} at column {self.column}"
        if self.hint:
            head += f" (did you mean '{self.hint}'?)"
        # Tabs, newlines and NULs would break the caret alignment; show each as one space. A long
        # condition is shown around the column only.
        lo, hi = 0, len(self.text)
        if hi > 2 * _SHOWN:
            lo, hi = max(0, self.column - 1 - _SHOWN), min(hi, self.column - 1 + _SHOWN)
        shown = "".join(c if c.isprintable() else " " for c in self.text[lo:hi])
        before, after = ("…" if lo else ""), ("…" if hi < len(self.text) else "")
        return f"{head}\n  {before}{shown}{after}\n  {' ' * (self.column - 1 - lo + len(before))}^"


class MissingAttributeError(ConditionError, KeyError):
    """Evaluation needed an attribute the case does not have (also a KeyError)."""


class _Token(typing.NamedTuple):
    kind: str  # 'punct', 'str', 'int', 'bool', 'name' or 'eof'
    value: object
    start: int  # 0-based offsets into the text
    end: int


def _tokenize(text: str) -> Iterator[_Token]:
    # A generator, so the parser reports whichever error comes first in the text.
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _SPACE:
            i += 1
        if i == n:
            yield _Token("eof", None, n, n)
            return
        start, c = i, text[i]
        if c in "\"'":
            chars, i = [], i + 1
            while i < n and text[i] != c:
                if text[i] == "\\" and i + 1 < n:
                    if text[i + 1] not in "\"'\\":
                        raise ConditionError(
                            text, i + 1, f"unsupported escape {text[i : i + 2]!r}; only \\\", \\' and \\\\ are allowed"
                        )
                    i += 1
                chars.append(text[i])
                i += 1
            if i >= n:
                raise ConditionError(text, start + 1, "unterminated string")
            i += 1
            yield _Token("str", "".join(chars), start, i)
        elif c in _DIGITS:
            while i < n and text[i] in _DIGITS:
                i += 1
            if i - start > _MAX_INT_DIGITS:
                raise ConditionError(text, start + 1, "integer literal too long")
            yield _Token("int", int(text[start:i]), start, i)
        elif c in _NAME_START:
            while i < n and text[i] in _NAME_CHARS:
                i += 1
            word = text[start:i]
            if word in ("true", "false"):
                yield _Token("bool", word == "true", start, i)
            elif word == "in":
                yield _Token("punct", "in", start, i)
            elif word == "not":
                j = i
                while j < n and text[j] in _SPACE:
                    j += 1
                if text.startswith("in", j) and (j + 2 == n or text[j + 2] not in _NAME_CHARS):
                    i = j + 2
                    yield _Token("punct", "not in", start, i)
                else:  # a lone 'not' is never accepted; the parser suggests '!'
                    yield _Token("punct", "not", start, i)
            else:
                yield _Token("name", word, start, i)
        else:
            op = next((p for p in _PUNCT if text.startswith(p, i)), None)
            if op is None:
                raise ConditionError(text, i + 1, f"unexpected token {c!r}", _HINTS.get(c))
            i += len(op)
            yield _Token("punct", op, start, i)


@dataclass(frozen=True)
class _Node:
    kind: str  # 'lit', 'list', 'attr', 'not', 'and', 'or' or 'cmp'
    start: int
    end: int
    value: object = None  # literal value, attribute name or comparison operator
    args: tuple[_Node, ...] = ()
    type: str | None = None  # static type; None when attribute types are unknown
    at: int = 0  # offset of a comparison's operator, where type errors point


def _scalar_type(value: object) -> str | None:
    # bool first: bool is a subclass of int.
    for t in (bool, int, str):
        if isinstance(value, t):
            return t.__name__
    return None


def _runtime_type(value: object) -> str | None:
    if isinstance(value, (list, tuple, set, frozenset)):
        kinds = {_scalar_type(x) for x in value}
        if None in kinds or len(kinds) > 1:
            return None
        return f"list[{kinds.pop() if kinds else ''}]"  # 'list[]' (empty) matches any list
    return _scalar_type(value)


def _type_name(t: object) -> str:
    if t in (bool, int, str):
        return t.__name__
    if t is list:  # list attributes hold strings (feature names and the like)
        return "list[str]"
    raise TypeError(f"unsupported attribute type {t!r}; use bool, int, str or list")


def _snippet(text: str, node: _Node) -> str:
    s = text[node.start : node.end]
    return s if len(s) <= 40 else s[:37] + "..."


def _type_problem(node: _Node, lt: str | None, rt: str | None, text: str) -> tuple[int, str] | None:
    """Why comparison `node` is ill-typed, as (offset, reason); shared by parse and evaluate."""
    op, (left, right) = node.value, node.args
    ls, rs = _snippet(text, left), _snippet(text, right)
    if op in _ORDER:
        for side, t, s in ((left, lt, ls), (right, rt, rs)):
            if t not in (None, "int"):
                return side.start, f"'{op}' needs integers, but {s} is {t}"
    elif op in ("in", "not in"):
        if rt is not None and not rt.startswith("list"):
            return right.start, f"'{op}' needs a list on the right, but {rs} is {rt}"
        if lt is not None and lt.startswith("list"):
            return left.start, f"'{op}' needs a single value on the left, but {ls} is {lt}"
        if lt and rt and rt not in ("list[]", f"list[{lt}]"):
            return node.at, f"cannot look for {ls} ({lt}) in {rs} ({rt})"
    elif lt and rt and lt != rt and not ("list[]" in (lt, rt) and lt[:4] == rt[:4] == "list"):
        return node.at, f"cannot compare {ls} ({lt}) with {rs} ({rt})"
    return None


class _Parser:
    def __init__(self, text: str, types: Mapping[str, str] | None, domains: Mapping[str, Collection[str]]):
        self.text, self.types, self.domains = text, types, domains
        self.tokens = _tokenize(text)
        self.tok = next(self.tokens)
        self.depth = 0
        self.count = 1  # tokens read

    def fail(self, offset: int, reason: str, hint: str | None = None) -> typing.NoReturn:
        raise ConditionError(self.text, offset + 1, reason, hint)

    def advance(self) -> _Token:
        tok = self.tok
        if tok.kind != "eof":
            self.tok = next(self.tokens)
            self.count += 1
            if self.count > MAX_TOKENS and self.tok.kind != "eof":
                self.fail(self.tok.start, f"condition longer than {MAX_TOKENS} tokens; split it into several rules")
        return tok

    def at(self, *values: str) -> bool:
        return self.tok.kind == "punct" and self.tok.value in values

    def unexpected(self, expected: str | None = None) -> typing.NoReturn:
        tok = self.tok
        found = "end of condition" if tok.kind == "eof" else repr(self.text[tok.start : tok.end])
        if expected:
            self.fail(tok.start, f"expected {expected} but found {found}")
        reason = "unexpected end of condition" if tok.kind == "eof" else f"unexpected token {found}"
        self.fail(tok.start, reason, _HINTS.get(self.text[tok.start : tok.end]))

    def close(self, opener: _Token, closer: str, expected: str) -> _Token:
        if self.tok.kind == "eof":  # point at the opener: that is what needs fixing
            self.fail(opener.start, f"unclosed '{opener.value}'")
        if not self.at(closer):
            self.unexpected(expected)
        return self.advance()

    def nest(self, offset: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(offset, f"nesting deeper than {MAX_DEPTH} levels")

    def want_bool(self, node: _Node, context: str) -> None:
        if node.type not in (None, "bool"):
            snippet = _snippet(self.text, node)
            self.fail(node.start, f"{context} needs a boolean, but {snippet} is {node.type}")

    def parse(self) -> _Node:
        node = self.parse_or()
        if self.tok.kind != "eof":
            self.unexpected()
        self.want_bool(node, "a condition")
        return node

    def parse_or(self) -> _Node:
        # Both precedence levels in one loop keeps each '(' to 4 Python frames.
        terms = []
        while True:
            factors = [self.parse_unary()]
            while self.at("&&"):
                self.advance()
                factors.append(self.parse_unary())
            terms.append(self.chain("&&", "and", factors))
            if not self.at("||"):
                return self.chain("||", "or", terms)
            self.advance()

    def chain(self, op: str, kind: str, args: list[_Node]) -> _Node:
        # Chains are flat n-ary nodes, so a long `a && b && ...` never deepens evaluation.
        if len(args) == 1:
            return args[0]
        for arg in args:
            self.want_bool(arg, f"'{op}'")
        return _Node(kind, args[0].start, args[-1].end, args=tuple(args), type="bool")

    def parse_unary(self) -> _Node:
        if not self.at("!"):
            return self.parse_comparison()
        bang = self.advance()
        self.nest(bang.start)
        operand = self.parse_unary()
        self.depth -= 1
        self.want_bool(operand, "'!'")
        return _Node("not", bang.start, operand.end, args=(operand,), type="bool")

    def parse_comparison(self) -> _Node:
        left = self.parse_operand()
        if not (self.tok.kind == "punct" and self.tok.value in _CMP):
            return left
        op = self.advance()
        right = self.parse_operand()
        node = _Node("cmp", left.start, right.end, op.value, (left, right), "bool", op.start)
        problem = _type_problem(node, left.type, right.type, self.text)
        if problem:
            self.fail(*problem)
        self.check_domains(node)
        if self.tok.kind == "punct" and self.tok.value in _CMP:
            self.fail(self.tok.start, "comparisons cannot be chained; combine them with '&&'")
        return node

    def check_domains(self, node: _Node) -> None:
        # A misspelt family or feature would silently match nothing, so reject it here.
        left, right = node.args
        for attr, other in ((left, right), (right, left)):
            name = str(attr.value)
            domain = self.domains.get(name) if attr.kind == "attr" else None
            if domain is None:
                continue
            # `"x" in features` names one feature, so the message uses the singular.
            is_list = (attr.type or "").startswith("list") or attr is right and node.value in ("in", "not in")
            if is_list and name.endswith("s"):
                name = name[:-1]
            for lit in other.args if other.kind == "list" else (other,) if other.kind == "lit" else ():
                if isinstance(lit.value, str) and lit.value not in domain:
                    # difflib is quadratic-ish; a huge literal is not a typo worth matching.
                    close = [] if len(lit.value) > 100 else difflib.get_close_matches(lit.value, domain, n=1)
                    reason = f"unknown {name} {lit.value!r}"
                    if not close and 0 < len(domain) <= 8:
                        reason += f"; expected one of {', '.join(sorted(domain))}"
                    self.fail(lit.start, reason, close[0] if close else None)

    def parse_operand(self) -> _Node:
        tok = self.tok
        if self.at("("):
            self.advance()
            self.nest(tok.start)
            inner = self.parse_or()
            end = self.close(tok, ")", "')'").end
            self.depth -= 1
            return replace(inner, start=tok.start, end=end)  # errors about it then quote the parens
        if self.at("["):
            return self.parse_list()
        if tok.kind in ("str", "int", "bool"):
            self.advance()
            return _Node("lit", tok.start, tok.end, tok.value, type=_scalar_type(tok.value))
        if tok.kind == "name":
            self.advance()
            return _Node("attr", tok.start, tok.end, tok.value, type=self.attr_type(tok))
        self.unexpected()

    def parse_list(self) -> _Node:
        opener = self.advance()
        items: list[_Node] = []
        while not self.at("]") and self.tok.kind != "eof":  # close() reports a missing ']'
            tok = self.tok
            if tok.kind not in ("str", "int", "bool"):
                self.unexpected("a literal")
            self.advance()
            item = _Node("lit", tok.start, tok.end, tok.value, type=_scalar_type(tok.value))
            if items and item.type != items[0].type:
                self.fail(
                    item.start,
                    f"list elements must all be {items[0].type}, but {_snippet(self.text, item)} is {item.type}",
                )
            items.append(item)
            if not self.at(","):
                break
            self.advance()
            if self.at("]"):  # the grammar has no trailing comma
                self.unexpected("a literal")
        end = self.close(opener, "]", "',' or ']'").end
        elem_type = items[0].type if items else ""
        values = tuple(item.value for item in items)
        return _Node("list", opener.start, end, values, tuple(items), f"list[{elem_type}]")

    def attr_type(self, tok: _Token) -> str | None:
        if self.types is None:
            return None
        name = str(tok.value)
        if name not in self.types:
            close = difflib.get_close_matches(name, list(self.types), n=1)
            self.fail(tok.start, f"unknown attribute {name!r}", _HINTS.get(name) or next(iter(close), None))
        return self.types[name]


_PLAIN = frozenset((bool, int, str))
_LISTS = frozenset((list, tuple, set, frozenset))
_MEMO_MAX = 4096


def _memo_key(attrs: Mapping[str, object], names: tuple[str, ...]) -> tuple[object, ...] | None:
    """The values of ``names`` in ``attrs``, each with its type (True and 1 are told apart), or
    None where one is missing or of a type a condition refuses (evaluated as ever then)."""
    key: list[object] = []
    for name in names:
        try:
            value = attrs[name]
        except KeyError:
            return None
        kind = type(value)
        if kind in _PLAIN:
            key.append((kind, value))
            continue
        if kind not in _LISTS:
            return None
        items = tuple(typing.cast(Collection[object], value))
        types = tuple(map(type, items))
        if not _PLAIN.issuperset(types):
            return None
        key.append((kind, items, types))
    return tuple(key)


@dataclass(frozen=True)
class Condition:
    """A parsed condition; equal to another exactly when the texts are equal. Its value for the
    values of the attributes it names is remembered: a suite's cases share them by the hundred,
    and every rule's condition is evaluated against every case."""

    text: str
    _root: _Node = field(repr=False, compare=False)
    _names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _memo: dict[tuple[object, ...], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_names", tuple(sorted(self.identifiers())))
        object.__setattr__(self, "_memo", {})

    def __str__(self) -> str:
        return self.text

    def identifiers(self) -> frozenset[str]:
        """The attribute names the condition mentions (whether or not evaluation reaches them)."""
        names, stack = set(), [self._root]
        while stack:
            node = stack.pop()
            if node.kind == "attr":
                names.add(str(node.value))
            stack.extend(node.args)
        return frozenset(names)

    def evaluate(self, attrs: Mapping[str, object]) -> bool:
        """Evaluate against one case; raises MissingAttributeError or ConditionError."""
        key = _memo_key(attrs, self._names)
        if key is None:
            return self._evaluate(attrs)
        value = self._memo.get(key)
        if value is None:
            value = self._evaluate(attrs)  # an error is raised again each time, not remembered
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[key] = value
        return value

    def _evaluate(self, attrs: Mapping[str, object]) -> bool:
        text = self.text

        def fail(offset: int, reason: str) -> typing.NoReturn:
            raise ConditionError(text, offset + 1, reason)

        def boolean(node: _Node, context: str) -> bool:
            value, t = ev(node)
            if t != "bool":
                fail(node.start, f"{context} needs a boolean, but {_snippet(text, node)} is {t}")
            return bool(value)

        def ev(node: _Node) -> tuple[object, str]:
            if node.kind in ("lit", "list"):
                return node.value, str(node.type)
            if node.kind == "attr":
                try:
                    value = attrs[str(node.value)]
                except KeyError:
                    reason = f"attribute {node.value!r} is not set"
                    raise MissingAttributeError(text, node.start + 1, reason) from None
                t = _runtime_type(value)
                if t is None:
                    fail(
                        node.start, f"attribute {node.value!r} has an unsupported value of type {type(value).__name__}"
                    )
                return (tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else value), t
            if node.kind == "not":
                return not boolean(node.args[0], "'!'"), "bool"
            if node.kind in ("and", "or"):  # all()/any() short-circuit like && and ||
                context = "'&&'" if node.kind == "and" else "'||'"
                combine = all if node.kind == "and" else any
                return combine(boolean(a, context) for a in node.args), "bool"
            (a, a_type), (b, b_type) = ev(node.args[0]), ev(node.args[1])
            problem = _type_problem(node, a_type, b_type, text)
            if problem:
                fail(*problem)
            op = node.value
            # _type_problem let through integers for an ordering, and lists (held as tuples) on the
            # right of 'in' and on both sides of a list comparison
            if op in _ORDER:
                return _ORDER[op](typing.cast(int, a), typing.cast(int, b)), "bool"
            if op in ("in", "not in"):
                return (a in typing.cast(tuple, b)) == (op == "in"), "bool"
            if isinstance(a, tuple):  # lists compare as multisets: cases may hold sets
                a, b = sorted(a), sorted(typing.cast(tuple, b))
            return (a == b) == (op == "=="), "bool"

        return boolean(self._root, "a condition")


def parse(
    text: str, attributes: Mapping[str, type] | None = None, domains: Mapping[str, Collection[str]] | None = None
) -> Condition:
    """Parse `text`; with `attributes` (name -> bool/int/str/list) also type-check it,
    and with `domains` (name -> valid strings) reject unknown string values."""
    if not isinstance(text, str):  # e.g. YAML turned an unquoted `true` into a bool
        raise TypeError(f"a condition must be a string, not {type(text).__name__}")
    if all(c in _SPACE for c in text):
        raise ConditionError(text, 1, "empty condition")
    types = None if attributes is None else {name: _type_name(t) for name, t in attributes.items()}
    return Condition(text, _Parser(text, types, domains or {}).parse())

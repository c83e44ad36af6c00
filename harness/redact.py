"""Keeping secrets out of everything a run writes: results, repro bundles, logs and reports.

Secrets are recognised by name (an env variable, a flag, a JSON config key that looks secret), by
form (the password of a URL, ``user:pass@host``) and then by value: a ``Redactor`` learns every
secret value from the launches of a run (their env and argv) and scrubs it from any text,
wherever it shows up again (vLLM logs its non-default args).

Plans that a person runs never carry a secret either: ``split_argv`` cuts each word of a launch
into literal text and ``Hidden`` secrets, each named by the variable that carries it where the
plan runs (a shell's environment, a Kubernetes Secret).
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import safe_write

# Names compared in upper case with "-" as "_", so `--hf-token` and `HF_TOKEN` are one name.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE_KEY|AUTHORIZATION"
    r"|_AUTH$|_PASS$|_KEY$|_PAT$|_PWD$|^AUTH$|^PASS$|^KEY$|^PAT$"
)
# Token counts and tokenizers are not secrets (--max-num-batched-tokens, --tokenizer,
# --long-prefill-token-threshold, num_experts_per_token).
NOT_SECRET = re.compile(r"TOKENS|TOKENIZ|PER_TOKEN|TOKEN_(IDS?|NUM|PROB|BUDGETS?|THRESHOLD)")
MASK = "***"
# Shorter values would mask ordinary words and numbers everywhere; such values are still masked
# by name (in env, argv and JSON configs).
MIN_SECRET = 6
# A value in free text: quoted (up to its closing quote), or one word; an HTTP authorization
# scheme keeps its word (`Bearer ***`). A word followed by `:` is the next name, not a value
# (`error: token: V`). An opening `[` is Python's list repr (`'api_key': ['…']`).
_VALUE = (
    r"""(?P<lead>\[?)(?P<value>"[^"\n]*"|'[^'\n]*'"""
    r"""|(?:(?:Bearer|Basic|Token|Digest)[ \t]+)?[^\s'",;:)\]}]++(?!:))"""
)
# NAME=value, NAME: value, "name": "value", 'name': 'value' in free text (a log line, an error).
_ASSIGN = re.compile(r"""(?P<name>(?<![\w-])[A-Za-z_][A-Za-z0-9_.-]*+)(?P<sep>['"]?[ \t]*[=:][ \t]*)""" + _VALUE)
# --name value, --name "value" (--name=value is an assignment above).
_FLAG = re.compile(r"(?P<name>--[A-Za-z0-9][A-Za-z0-9_-]*+)(?P<sep>[ \t]+)(?!-)" + _VALUE)
# scheme://user:password@host, the password alone is the secret.
_URL_PASSWORD = re.compile(r"(?P<user>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\"]*:)(?P<value>[^\s/@'\"]+)(?=@)")
URL_PASSWORD = "URL_PASSWORD"
# An HTTP authorization scheme's credentials standing alone (`--header 'Bearer V'`), no name before
# them; short words are prose ("Bearer of"), not tokens.
_SCHEME = re.compile(rf"(?<![\w-])(?:Bearer|Basic)[ \t]+(?P<value>[A-Za-z0-9._~+/=-]{{{MIN_SECRET},}})")


def secret_name(name: str) -> bool:
    name = name.lstrip("-").upper().replace("-", "_").replace(".", "_")
    return bool(SECRET_NAME.search(name)) and not NOT_SECRET.search(name)


def secret_key(name: str) -> str:
    """The variable that carries a secret flag's or JSON key's value: `--api-key` -> API_KEY."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name.lstrip("-")).strip("_").upper() or "SECRET"


def secret_env(name: str, value: str) -> bool:
    """A variable a plan must not spell out: its name looks secret, or its value holds a secret
    (a URL's password, ``Authorization: Bearer V``: anything ``spans`` finds)."""
    return bool(value) and (secret_name(name) or bool(spans(value)))


def env(values: Mapping[str, str]) -> dict[str, str]:
    """An environment with the values of secret-looking variables, and the secrets inside any
    other value, masked."""
    return {k: (MASK if secret_name(k) and v else mask(v)) for k, v in values.items()}


def _value_span(m: re.Match[str]) -> tuple[int, int]:
    """Where the secret of a NAME=value or --flag value match is: inside its quotes, after an
    authorization scheme's word (`Bearer V`: V), else the whole value."""
    start, end = m.span("value")
    value = m["value"]
    if value[:1] in "\"'":
        return start + 1, end - 1
    scheme = re.match(r"\S+[ \t]+", value) if " " in value or "\t" in value else None
    return (start + scheme.end(), end) if scheme else (start, end)


def spans(s: str) -> list[tuple[int, int, str]]:
    """Every secret in the text ``s`` by name or form, as (start, end, the name it goes by), in
    order and not overlapping: a URL's password, the value of a secret-looking ``NAME=value``,
    ``NAME: value`` (quoted or not) or ``--name value``, an authorization scheme's credentials
    (``Bearer V``). The one rule every output masks by: free text, flag values, JSON strings."""
    found = [(*m.span("value"), URL_PASSWORD) for m in _URL_PASSWORD.finditer(s)]
    for rx in (_ASSIGN, _FLAG):
        found += [
            (*_value_span(m), m["name"])
            for m in rx.finditer(s)
            if secret_name(m["name"]) and m["value"].strip("\"'") not in (MASK, "")
        ]
    found += [(*m.span("value"), "AUTHORIZATION") for m in _SCHEME.finditer(s)]
    out: list[tuple[int, int, str]] = []
    for start, end, name in sorted(found, key=lambda f: (f[0], -f[1])):
        if start >= end or s[start:end] == MASK:
            continue
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]), out[-1][2])
        else:
            out.append((start, end, name))
    return out


def mask(s: str) -> str:
    """``s`` with every secret ``spans`` finds masked."""
    at, parts = 0, []
    for start, end, _ in spans(s):
        parts += [s[at:start], MASK]
        at = end
    return "".join(parts) + s[at:]


@dataclass(frozen=True)
class Hidden:
    """A secret inside a plan's word, and the variable that carries it where the plan runs."""

    name: str
    value: str


Piece = str | Hidden


class Secrets:
    """The variables a plan's secrets travel in. A secret flag, JSON key or URL password is
    named after its flag or key (`--api-key` -> API_KEY); a name that already carries another
    value (an `HF_TOKEN` variable beside a different `--hf-token`) gets a suffix, so no two
    secrets share one variable."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def hide(self, name: str, value: str, variable: bool = False) -> Hidden:
        """The secret ``value`` of flag or key ``name`` (``variable``: of that environment variable,
        whose name is kept as it is)."""
        base = key = name if variable else secret_key(name)
        n = 2
        while self.values.get(key, value) != value:
            key, n = f"{base}_{n}", n + 1
        self.values[key] = value
        return Hidden(key, value)

    def env(self, name: str, value: str) -> Hidden | None:
        """The secret of an environment variable (its whole value), else None."""
        return self.hide(name, value, variable=True) if secret_env(name, value) else None


def json_value(word: str) -> Any:
    """The value of a JSON flag's word (``--kv-transfer-config '{...}'``), else None."""
    if not word.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(word)
    except ValueError:
        return None


_SLOT = "@@ppconf-secret@@"  # where a secret was cut out of a JSON word


def _json_pieces(word: str, secrets: Secrets) -> list[Piece] | None:
    """A JSON word with the value of each secret-looking key hidden (the JSON written compactly)."""
    found: list[Hidden] = []

    def slot(hidden: Hidden) -> str:
        found.append(hidden)
        return f"{_SLOT}{len(found) - 1}{_SLOT}"

    def hide(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if isinstance(v, str) and v and secret_name(str(k)):
                    out[k] = slot(secrets.hide(str(k), v))
                else:
                    out[k] = hide(v)
            return out
        if isinstance(value, list):
            return [hide(v) for v in value]
        if isinstance(value, str):  # a secret inside any other string: a URL's password, `Bearer V`
            return "".join(slot(p) if isinstance(p, Hidden) else p for p in _text_pieces(value, secrets))
        return value

    hidden = hide(json_value(word))
    if not found:
        return None
    parts = json.dumps(hidden, separators=(",", ":")).split(_SLOT)
    return [found[int(p)] if i % 2 else p for i, p in enumerate(parts) if p or i % 2]


def _text_pieces(word: str, secrets: Secrets) -> list[Piece]:
    """Text with each secret ``spans`` finds in it hidden."""
    pieces: list[Piece] = []
    at = 0
    for start, end, name in spans(word):
        pieces += [word[at:start], secrets.hide(name, word[start:end])]
        at = end
    return [p for p in [*pieces, word[at:]] if p != ""] or [word]


def split_argv(words: Iterable[str], secrets: Secrets | None = None) -> list[list[Piece]]:
    """Each word of argv as its literal text and the secrets in it: a secret-looking flag's value
    (``--api-key V``, ``--hf-token=V``), a secret key's value in a JSON flag value
    (``--kv-transfer-config '{"auth_token": V}'``), and any secret ``spans`` finds in a word or in
    a JSON value's strings (a URL's password, ``Authorization: Bearer V``)."""
    secrets = secrets or Secrets()
    out: list[list[Piece]] = []
    hide_next: str | None = None
    for word in words:
        if hide_next and not word.startswith("--"):
            out.append([secrets.hide(hide_next, word)] if word else [word])
            hide_next = None
            continue
        hide_next = None
        flag, eq, value = word.partition("=")
        if word.startswith("-") and eq and secret_name(flag):
            out.append([flag + "=", secrets.hide(flag, value)] if value else [word])
            continue
        if word.startswith("-") and not eq and secret_name(word):
            hide_next = word
        out.append(_json_pieces(word, secrets) or _text_pieces(word, secrets))
    return out


def argv_secrets(argv: Iterable[str]) -> list[str]:
    """The secret values in argv (as ``split_argv`` finds them)."""
    return [p.value for word in split_argv(argv) for p in word if isinstance(p, Hidden) and p.value]


def argv(words: Iterable[str]) -> list[str]:
    """argv with its secrets masked."""
    return ["".join(MASK if isinstance(p, Hidden) else p for p in word) for word in split_argv(words)]


class Redactor:
    """Every secret value of a run, learned from its launches; scrubs them from any text."""

    def __init__(self, values: Iterable[str] = ()):
        self.values: set[str] = set()
        self.add(values)

    def add(self, values: Iterable[str]) -> Redactor:
        self.values |= {v for v in values if len(v) >= MIN_SECRET and v != MASK}
        return self

    def learn_env(self, values: Mapping[str, str]) -> Redactor:
        return self.add(
            [v for k, v in values.items() if secret_name(k)]
            + [v[start:end] for v in values.values() for start, end, _ in spans(v)]
        )

    def learn_argv(self, words: Iterable[str]) -> Redactor:
        return self.add(argv_secrets(words))

    def learn(self, deployment: Any) -> Redactor:
        """Learn a Deployment's (or a LaunchSpec's) secrets from its env and argv."""
        for spec in getattr(deployment, "launches", [deployment]):
            self.learn_env(dict(spec.env))
            self.learn_argv(spec.argv)
        return self

    def text(self, s: str) -> str:
        """``s`` with every learned value masked, and any value nobody told us about (e.g. from
        a set_env script) whose name looks secret: ``NAME=value``, ``NAME: value``, quoted or
        not, ``--name value``, ``Authorization: Bearer value``; and every URL's password."""
        for value in sorted(self.values, key=len, reverse=True):
            s = s.replace(value, MASK)
        return mask(s)

    def scrub(self, value: Any) -> Any:
        """A JSON-like value with every string scrubbed (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.scrub(k) if isinstance(k, str) else k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.scrub(v) for v in value]
        return value

    def scrub_file(self, path: Path) -> None:
        """Rewrite a finished log file with its secrets masked (only when it holds any)."""
        try:
            raw = path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return
        clean = self.text(raw)
        if clean != raw:  # the launch's own log (``force``): replaced whole, never through a link
            data = clean.encode("utf-8", errors="surrogateescape")
            safe_write.write_bytes(path, data, force=True, mode=stat.S_IMODE(path.lstat().st_mode))


def text(s: str, secrets: Iterable[str] = ()) -> str:
    """``s`` with the given secret values, and secret-looking assignments and flags, masked."""
    return Redactor(secrets).text(s)

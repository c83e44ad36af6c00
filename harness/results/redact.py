"""Keeping secrets out of everything a run writes: results, repro bundles, logs and reports.

Secrets are recognised by name (an env variable, a flag, a JSON config key that looks secret) and
then by value: a ``Redactor`` learns every secret value from the launches of a run (their env and
argv) and scrubs it from any text, wherever it shows up again (vLLM logs its non-default args).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Names compared in upper case with "-" as "_", so `--hf-token` and `HF_TOKEN` are one name.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE_KEY"
    r"|_AUTH$|_PASS$|_KEY$|^AUTH$|^PASS$|^KEY$"
)
# Token counts and tokenizers are not secrets (--max-num-batched-tokens, --tokenizer,
# --long-prefill-token-threshold, num_experts_per_token).
NOT_SECRET = re.compile(r"TOKENS|TOKENIZ|PER_TOKEN|TOKEN_(IDS?|NUM|PROB|BUDGETS?|THRESHOLD)")
MASK = "***"
# Shorter values would mask ordinary words and numbers everywhere; such values are still masked
# by name (in env, argv and JSON configs).
MIN_SECRET = 6
# NAME=value and --name value / --name=value in free text (a log line, an error message).
_ASSIGN = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s'\"]+)")
_FLAG = re.compile(r"(?P<name>--[A-Za-z0-9][A-Za-z0-9_-]*)(?P<sep>=|[ \t]+)(?P<value>[^\s'\"-][^\s'\"]*)")


def secret_name(name: str) -> bool:
    name = name.lstrip("-").upper().replace("-", "_")
    return bool(SECRET_NAME.search(name)) and not NOT_SECRET.search(name)


def env(values: Mapping[str, str]) -> dict[str, str]:
    """An environment with the values of secret-looking variables masked."""
    return {k: (MASK if secret_name(k) and v else v) for k, v in values.items()}


def _json_secrets(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and secret_name(str(k)):
                yield v
            else:
                yield from _json_secrets(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_secrets(v)


def json_value(word: str) -> Any:
    """The value of a JSON flag's word (``--kv-transfer-config '{...}'``), else None."""
    if not word.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(word)
    except ValueError:
        return None


def argv_secrets(argv: Iterable[str]) -> list[str]:
    """Values of secret-looking flags (``--api-key V``, ``--hf-token=V``) and secret keys of JSON
    flag values (``--kv-transfer-config '{"auth_token": V}'``)."""
    words, found = list(argv), []
    for i, word in enumerate(words):
        if word.startswith("-") and "=" in word:
            name, value = word.split("=", 1)
            if secret_name(name):
                found.append(value)
        elif word.startswith("-") and secret_name(word) and i + 1 < len(words) and not words[i + 1].startswith("--"):
            found.append(words[i + 1])
        found += _json_secrets(json_value(word))
    return [v for v in found if v]


def argv(words: Iterable[str]) -> list[str]:
    """argv with the values of secret-looking flags masked."""
    words, out = list(words), []
    mask_next = False
    for word in words:
        if mask_next and not word.startswith("--"):
            out.append(MASK)
        elif word.startswith("-") and "=" in word and secret_name(word.split("=", 1)[0]):
            out.append(word.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(word)
        mask_next = word.startswith("-") and "=" not in word and secret_name(word)
    return out


class Redactor:
    """Every secret value of a run, learned from its launches; scrubs them from any text."""

    def __init__(self, values: Iterable[str] = ()):
        self.values: set[str] = set()
        self.add(values)

    def add(self, values: Iterable[str]) -> Redactor:
        self.values |= {v for v in values if len(v) >= MIN_SECRET and v != MASK}
        return self

    def learn_env(self, values: Mapping[str, str]) -> Redactor:
        return self.add(v for k, v in values.items() if secret_name(k))

    def learn_argv(self, words: Iterable[str]) -> Redactor:
        return self.add(argv_secrets(words))

    def learn(self, deployment: Any) -> Redactor:
        """Learn a Deployment's (or a LaunchSpec's) secrets from its env and argv."""
        for spec in getattr(deployment, "launches", [deployment]):
            self.learn_env(dict(spec.env))
            self.learn_argv(spec.argv)
        return self

    def text(self, s: str) -> str:
        """``s`` with every learned value masked, and any NAME=value / --name value whose name
        looks secret (a value nobody told us about, e.g. from a set_env script)."""
        for value in sorted(self.values, key=len, reverse=True):
            s = s.replace(value, MASK)
        s = _ASSIGN.sub(lambda m: f"{m['name']}={MASK}" if secret_name(m["name"]) else m[0], s)
        return _FLAG.sub(lambda m: f"{m['name']}{m['sep']}{MASK}" if secret_name(m["name"]) else m[0], s)

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
        if clean != raw:
            tmp = path.with_name(path.name + ".redacting")
            tmp.write_text(clean, encoding="utf-8", errors="surrogateescape")
            tmp.replace(path)


def text(s: str, secrets: Iterable[str] = ()) -> str:
    """``s`` with the given secret values, and secret-looking assignments and flags, masked."""
    return Redactor(secrets).text(s)

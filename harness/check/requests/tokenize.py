"""``tokenize``: the token ids (through the chat template, for messages) must be equal;
``detokenize``: the text must be equal."""

from __future__ import annotations

from typing import Any

from harness.check.requests.endpoint import Endpoint, RuleVerdict
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare


class _Tokenize(Endpoint):
    path = "/tokenize"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        mine, theirs = got["body"].get("tokens"), ref["body"].get("tokens")
        if mine == theirs:
            return RuleVerdict()
        first = next((i for i, (a, b) in enumerate(zip(theirs or [], mine or [], strict=False)) if a != b), None)
        at = f"differ at token {first}" if first is not None else f"{len(mine or [])} vs {len(theirs or [])} tokens"
        return RuleVerdict([f"token ids {at}"])


ENDPOINT = _Tokenize()


class _Detokenize(Endpoint):
    path = "/detokenize"

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        mine, theirs = got["body"].get("prompt"), ref["body"].get("prompt")
        return RuleVerdict() if mine == theirs else RuleVerdict([f"text {mine!r}, the reference {theirs!r}"])


DETOKENIZE = _Detokenize()

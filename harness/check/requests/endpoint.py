"""What an endpoint provides: where its requests go, the body ppconf sends (the request as
written, with the served model named), and its comparison rule. A rule sees both sides' answers
to one request and says why they disagree (nothing: they agree) and where a greedy divergence is
a near-tie (``RuleVerdict.ties``), counted apart as the other phases count them.

An answer that is not a success (HTTP 2xx) on either side disagrees, whatever the other side
said: a request the platform cannot serve is a finding to state (a claim), not a match."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.check.serving.client import Answer, Client
from harness.matrix.requests import ExplicitRequest
from harness.matrix.schema import Compare


@dataclass
class RuleVerdict:
    whys: list[str] = field(default_factory=list)  # why the answers disagree
    ties: list[dict[str, Any]] = field(default_factory=list)  # near-tie divergences (greedy sampling)


def answer_json(request: str, endpoint: str, answer: Answer, **extra: Any) -> dict[str, Any]:
    """One answer as a phase's outputs keep it."""
    return {"request": request, "endpoint": endpoint, "status": answer.status, "body": answer.body, **extra}


def brief(body: Any) -> str:
    text = body.get("error", body) if isinstance(body, dict) else body
    text = text.get("message", text) if isinstance(text, dict) else text
    return str(text)[:200]


class Endpoint:
    path = ""

    def body(self, req: ExplicitRequest, model: str) -> dict[str, Any] | None:
        return {"model": model, **req.body()}

    def params(self, req: ExplicitRequest) -> dict[str, Any] | None:
        return None

    def send(self, client: Client, model: str, req: ExplicitRequest) -> dict[str, Any]:
        answer = client.call(self.path, self.body(req, model), self.params(req))
        return answer_json(req.name or "", req.endpoint, answer)

    def compare(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        """Both answers succeeded, and then this endpoint's own rule (``agree``)."""
        whys = [
            f"{side} answered HTTP {a['status']}: {brief(a['body'])}"
            for side, a in (("the case", got), ("the reference", ref))
            if not 200 <= a["status"] < 300
        ]
        return RuleVerdict(whys) if whys else self.agree(compare, req, ref, got)

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        return RuleVerdict()

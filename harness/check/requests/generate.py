"""CompletionsRequest and chat: every choice of ``n``, in order of its index, compared by the
comparison's mode (a sampled request, ``temperature`` > 0, must match exactly: its seed makes it
repeatable); a greedy divergence that is a near-tie is a tie, as in the other phases. Beyond the
tokens: the same finish reason and stop reason (a stop string stops at the same place), the same
usage, prompt logprobs within the tolerance, the same tool calls (function names and arguments
parsed as JSON, each call's arguments valid against its function's ``parameters`` schema on both
sides, a forced ``tool_choice`` answered with a call), and structured output that validates
against its schema on both sides. ChatRequest is compared after the template: the prompt's
token ids as each server templated them must be equal.

ppconf adds ``return_token_ids`` (the ids of each choice and of the prompt) and
``return_tokens_as_token_ids`` (logprobs keyed by id) to what the request says: neither changes
what is sampled.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import regex

from harness.check.requests.endpoint import Endpoint, RuleVerdict, answer_json
from harness.check.serving.client import Answer, Client, Completion, top_by_id
from harness.check.traffic.compare import pair, tie_at
from harness.matrix.requests import ChatRequest, CompletionsRequest, ExplicitRequest, NamedToolChoice
from harness.matrix.schema import Compare

ADDED = {"return_token_ids": True, "return_tokens_as_token_ids": True}
REGEX_TIMEOUT_S = 5.0


def _choices(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(answer["body"].get("choices") or [], key=lambda c: c.get("index", 0))


def completion_choice(choice: dict[str, Any], label: str) -> Completion:
    lp = choice.get("logprobs") or {}
    ids = tuple(choice.get("token_ids") or ())
    # with echo the logprobs cover the prompt's tokens first: the generated ones are the last
    skip = max(0, len(lp.get("tokens") or ()) - len(ids))
    return Completion(
        "",
        ids,
        tuple(float(x) for x in (lp.get("token_logprobs") or ())[skip:]),
        choice.get("text") or "",
        tuple(top_by_id(t) for t in (lp.get("top_logprobs") or ())[skip:]),
        label,
        choice.get("finish_reason") or "",
    )


def chat_choice(choice: dict[str, Any], label: str) -> Completion:
    content = (choice.get("logprobs") or {}).get("content") or ()
    return Completion(
        "",
        tuple(choice.get("token_ids") or ()),
        tuple(float(c["logprob"]) for c in content),
        (choice.get("message") or {}).get("content") or "",
        tuple(top_by_id({t["token"]: t["logprob"] for t in c.get("top_logprobs") or ()}) for c in content),
        label,
        choice.get("finish_reason") or "",
    )


def _prompt_logprobs(answer: dict[str, Any], choice: dict[str, Any]) -> list[dict[str, Any] | None] | None:
    return choice.get("prompt_logprobs", answer["body"].get("prompt_logprobs"))


def prompt_logprob_diffs(ref: list[Any] | None, got: list[Any] | None, tolerance: float) -> list[str]:
    """Prompt logprobs position by position: the same tokens named, logprobs within ``tolerance``."""
    if ref is None and got is None:
        return []
    if ref is None or got is None or len(ref) != len(got):
        return [f"prompt logprobs for {len(got or [])} positions, the reference {len(ref or [])}"]
    worst, where = 0.0, None
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        a, b = a or {}, b or {}
        shared = set(a) & set(b)
        if set(a) != set(b) and not shared:
            return [f"prompt logprobs at position {i} name other tokens than the reference's"]
        for t in shared:
            d = abs(float(a[t]["logprob"]) - float(b[t]["logprob"]))
            if d > worst:
                worst, where = d, i
    return [f"prompt logprobs |Δ| {worst:.3g} at position {where} > {tolerance:g}"] if worst > tolerance else []


def _structure(req: CompletionsRequest | ChatRequest) -> tuple[str, Any] | None:
    """What the request constrains its output to, as (kind, spec): json (a schema, None for any
    JSON object), regex, choice; a grammar is enforced by the server but not checked here."""
    rf, so = req.response_format, req.structured_outputs
    if rf is not None and rf.type == "json_schema" and rf.json_schema is not None:
        return "json", rf.json_schema.json_schema
    if rf is not None and rf.type == "json_object":
        return "json", None
    if so is not None:
        if so.json_ is not None:
            return "json", json.loads(so.json_) if isinstance(so.json_, str) else so.json_
        if so.json_object:
            return "json", None
        if so.regex is not None:
            return "regex", so.regex
        if so.choice is not None:
            return "choice", so.choice
    return None


def structure_problem(kind: str, spec: Any, text: str) -> str | None:
    """Why ``text`` does not meet the request's structure (None: it does)."""
    if kind == "choice":
        return None if text in spec else f"{text!r} is none of the choices"
    if kind == "regex":
        return None if regex.fullmatch(spec, text, timeout=REGEX_TIMEOUT_S) else f"{text!r} does not match {spec!r}"
    try:
        value = json.loads(text)
    except ValueError as err:
        return f"not JSON ({err}): {text[:80]!r}"
    if spec is None:
        return None if isinstance(value, dict) else f"JSON {type(value).__name__}, not an object"
    try:
        jsonschema.validate(value, spec)
    except jsonschema.ValidationError as err:
        return f"does not validate against its schema: {err.message}"
    return None


def _head(ids: tuple[int, ...], n: int = 16) -> str:
    return f"[{', '.join(map(str, ids[:n]))}{', …' if len(ids) > n else ''}]"


def tool_calls(choice: dict[str, Any]) -> list[tuple[str, Any]]:
    """A chat choice's tool calls as (function name, arguments): the arguments parsed as JSON, so
    two calls whose arguments differ only in key order or spacing are the same call; arguments
    that are no JSON are kept as ``("not JSON", text)``. The call's id (random) is not kept."""
    out: list[tuple[str, Any]] = []
    for call in (choice.get("message") or {}).get("tool_calls") or []:
        function = call.get("function") or {}
        text = function.get("arguments", "")
        try:
            arguments: Any = json.loads(text)
        except (TypeError, ValueError):
            arguments = ("not JSON", text)
        out.append((function.get("name", ""), arguments))
    return out


def _forced(req: ChatRequest) -> str | None:
    """The function a named ``tool_choice`` names, ``"required"``, or None (none forced)."""
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        return choice.function.name
    return "required" if choice == "required" else None


def tool_problems(req: ChatRequest, choice: dict[str, Any]) -> list[str]:
    """Why a choice's tool calls are not what the request allows (none: they are): a forced
    ``tool_choice`` (a named function or ``"required"``) answered without a call, a call of
    another function than the one named or of none of the request's ``tools``, more than one
    call where ``parallel_tool_calls`` is false, arguments that are no JSON or do not validate
    against the function's ``parameters`` schema."""
    calls = tool_calls(choice)
    if not req.tools:
        return [f"{len(calls)} tool calls, but the request gives no tools"] if calls else []
    schemas = {t.function.name: t.function.parameters for t in req.tools}
    forced = _forced(req)
    out = []
    if forced is not None and not calls:
        out.append(f"no tool call, though tool_choice is {forced!r}")
    if req.parallel_tool_calls is False and len(calls) > 1:
        out.append(f"{len(calls)} tool calls, though parallel_tool_calls is false")
    for k, (name, arguments) in enumerate(calls):
        if forced not in (None, "required") and name != forced:
            out.append(f"tool call {k} calls {name!r}, though tool_choice names {forced!r}")
        elif name not in schemas:
            out.append(f"tool call {k} calls {name!r}, none of the request's tools ({', '.join(schemas)})")
            continue
        if isinstance(arguments, tuple):
            out.append(f"tool call {k} ({name}): arguments not JSON: {arguments[1][:80]!r}")
            continue
        schema = schemas.get(name)
        if schema is None:
            continue
        try:
            jsonschema.validate(arguments, schema)
        except jsonschema.ValidationError as err:
            given = json.dumps(arguments)[:80]
            why = f"do not validate against its parameters: {err.message}"
            out.append(f"tool call {k} ({name}): arguments {given} {why}")
        except jsonschema.SchemaError as err:
            out.append(f"tool call {k} ({name}): its parameters are no JSON schema: {err.message}")
    return out


def _extend(into: dict[str, Any], part: dict[str, Any]) -> None:
    """One streamed choice's logprobs added to what came before (completions' parallel lists,
    chat's ``content`` entries)."""
    for key, value in part.items():
        if isinstance(value, list):
            into.setdefault(key, []).extend(value)
        elif value is not None:
            into[key] = value


def _extend_calls(into: dict[int, dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """A streamed chat choice's tool-call deltas added to the calls so far, by the call's index:
    its id and function name as first sent, its arguments' text piece by piece (OpenAI's stream)."""
    for d in deltas:
        call = into.setdefault(int(d.get("index", 0)), {"type": "function", "function": {"arguments": ""}})
        if d.get("id"):
            call.setdefault("id", d["id"])
        function = d.get("function") or {}
        if function.get("name"):
            call["function"].setdefault("name", function["name"])
        call["function"]["arguments"] += function.get("arguments") or ""


def assemble(events: list[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """A streamed answer's events put back together as the answer would have been unstreamed:
    each choice (by its index) with its text or message (and a chat message's tool calls), token
    ids, logprobs, finish and stop reason; the prompt's token ids and the usage where an event
    carried them."""
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    choices: dict[int, dict[str, Any]] = {}
    body: dict[str, Any] = {}
    for event in events:
        for key in ("prompt_token_ids", "usage", "prompt_logprobs"):
            if event.get(key) is not None:
                body[key] = event[key]
        for c in event.get("choices") or []:
            i = int(c.get("index", 0))
            got = choices.setdefault(i, {"index": i, "token_ids": [], "logprobs": {}, "text": ""})
            got["text"] += ((c.get("delta") or {}).get("content") if chat else c.get("text")) or ""
            _extend_calls(calls.setdefault(i, {}), (c.get("delta") or {}).get("tool_calls") or [])
            got["token_ids"] += c.get("token_ids") or []
            if c.get("prompt_token_ids") is not None:
                got["prompt_token_ids"] = c["prompt_token_ids"]
            _extend(got["logprobs"], c.get("logprobs") or {})
            for key in ("finish_reason", "stop_reason"):
                if c.get(key) is not None:
                    got[key] = c[key]
    for i, got in choices.items():
        if chat:
            got["message"] = {"role": "assistant", "content": got.pop("text")}
            if calls.get(i):
                got["message"]["tool_calls"] = [calls[i][k] for k in sorted(calls[i])]
        got["logprobs"] = got["logprobs"] or None
    return {**body, "choices": [choices[i] for i in sorted(choices)]}


class _Generate(Endpoint):
    """A generating endpoint: where it is, how a choice of its answer is read, and whether it is
    chat (a streamed choice's text arrives in ``delta.content``, kept as the message's content)."""

    def __init__(self, path: str, choice: Callable[[dict[str, Any], str], Completion], chat: bool):
        self.path = path
        self.choice = choice
        self.chat = chat

    def body(self, req: ExplicitRequest, model: str) -> dict[str, Any]:
        return {"model": model, **ADDED, **req.body()}

    def send(self, client: Client, model: str, req: ExplicitRequest) -> dict[str, Any]:
        if not getattr(req, "stream", None):
            return super().send(client, model, req)
        with client.call_streamed(self.path, self.body(req, model)) as stream:
            if not stream.ok:
                return answer_json(req.name or "", req.endpoint, stream.answer())
            events = list(stream)
        answer = Answer(stream.status, assemble(events, self.chat))
        return answer_json(req.name or "", req.endpoint, answer, events=len(events))

    def agree(self, compare: Compare, req: ExplicitRequest, ref: dict[str, Any], got: dict[str, Any]) -> RuleVerdict:
        assert isinstance(req, (CompletionsRequest, ChatRequest))
        out = RuleVerdict()
        r_choices, g_choices = _choices(ref), _choices(got)
        if len(r_choices) != len(g_choices):
            out.whys.append(f"{len(g_choices)} choices, the reference {len(r_choices)} (n={req.n})")
        mode = Compare(**(compare.model_dump() | {"mode": "seeded"})) if req.sampled else compare
        structure = _structure(req)
        for i, (rc, gc) in enumerate(zip(r_choices, g_choices, strict=False)):
            r, g = self.choice(rc, f"{req.name}#{i}"), self.choice(gc, f"{req.name}#{i}")
            v = pair(mode, r, g)
            if not v["ok"]:
                tie = tie_at(compare, r, g, v["first_divergence"]) if v["first_divergence"] is not None else None
                if tie is not None and not req.sampled:
                    out.ties.append({"request": f"{req.name}#{i}", **tie})
                    continue  # what follows a tie is not compared
                out.whys.append(
                    f"choice {i}: {v['why']} (ids {_head(g.token_ids)}, the reference {_head(r.token_ids)})"
                )
                continue
            for what in ("finish_reason", "stop_reason"):
                if rc.get(what) != gc.get(what):
                    out.whys.append(f"choice {i}: {what} {gc.get(what)!r}, the reference {rc.get(what)!r}")
            if tool_calls(rc) != tool_calls(gc):
                out.whys.append(f"choice {i}: tool calls {tool_calls(gc)}, the reference {tool_calls(rc)}")
            tolerance = compare.logprob_tolerance
            out.whys += [
                f"choice {i}: {d}"
                for d in prompt_logprob_diffs(_prompt_logprobs(ref, rc), _prompt_logprobs(got, gc), tolerance)
            ]
        for side, choices in (("the case", g_choices), ("the reference", r_choices)):
            for i, c in enumerate(choices):
                problem = structure_problem(*structure, self.choice(c, "").text) if structure is not None else None
                if problem and structure is not None:
                    out.whys.append(f"{side}'s choice {i} ({structure[0]}): {problem}")
                if isinstance(req, ChatRequest):
                    out.whys += [f"{side}'s choice {i}: {p}" for p in tool_problems(req, c)]
        r_prompt, g_prompt = ref["body"].get("prompt_token_ids"), got["body"].get("prompt_token_ids")
        if isinstance(req, ChatRequest) and r_prompt != g_prompt:
            out.whys.append(f"the templated prompt differs: {len(g_prompt or [])} vs {len(r_prompt or [])} token ids")
        r_use, g_use = ref["body"].get("usage") or {}, got["body"].get("usage") or {}
        for key in ("prompt_tokens", "completion_tokens"):
            if r_use.get(key) != g_use.get(key):
                out.whys.append(f"usage {key} {g_use.get(key)}, the reference {r_use.get(key)}")
        return out


COMPLETIONS = _Generate("/v1/completions", completion_choice, chat=False)
CHAT = _Generate("/v1/chat/completions", chat_choice, chat=True)

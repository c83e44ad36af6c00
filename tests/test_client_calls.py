"""The client's calls that explicit requests are sent through: the models list and a streamed
POST (each event parsed), with the client's timeout, an error status answered rather than raised;
and the generating endpoints' senders on them, a streamed chat answer read as chat because its
endpoint says it is chat. The server is httpx's MockTransport: nothing is launched."""

from __future__ import annotations

import json

import httpx
import pytest

from harness.check.requests.generate import CHAT, COMPLETIONS, _Generate, chat_choice
from harness.check.serving.client import Answer, Client
from harness.matrix.requests import REQUEST_MODELS
from harness.registry import ENDPOINTS

TIMEOUT_S = 7.0


class Server:
    """Answers each request with ``respond(request)``, keeping what was asked."""

    def __init__(self, respond):
        self.respond = respond
        self.asked: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request)
        return self.respond(request)

    def client(self) -> Client:
        return Client("http://server:8000/", TIMEOUT_S, transport=httpx.MockTransport(self))


def sse(*events, done=True) -> httpx.Response:
    """A streamed answer as vLLM writes it: ``data: <json>`` lines, a blank line after each, read
    piece by piece."""
    pieces = [f"data: {json.dumps(e)}\n\n".encode() for e in events]
    pieces += [b": a comment line\n\n"] + ([b"data: [DONE]\n\n"] if done else [])
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(pieces))


def _timeout(request: httpx.Request) -> dict[str, float]:
    return request.extensions["timeout"]


MODELS = {"object": "list", "data": [{"id": "tiny", "root": "/models/tiny", "object": "model"}]}


def test_the_models_list_is_a_get_answered_with_its_status_and_json():
    server = Server(lambda r: httpx.Response(200, json=MODELS))
    assert server.client().models_answer() == Answer(200, MODELS)
    (asked,) = server.asked
    assert (asked.method, str(asked.url)) == ("GET", "http://server:8000/v1/models")
    assert set(_timeout(asked).values()) == {TIMEOUT_S}  # the client's timeout, as every call has


def test_an_error_status_of_the_models_list_is_an_answer_not_raised():
    server = Server(lambda r: httpx.Response(503, text="Service Unavailable"))
    assert server.client().models_answer() == Answer(503, "Service Unavailable")


def test_a_transport_failure_is_raised_as_by_every_call():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    client = Server(refuse).client()
    with pytest.raises(httpx.ConnectError):
        client.models_answer()
    with pytest.raises(httpx.ConnectError), client.call_streamed("/v1/completions", {}):
        pass


def test_a_streamed_post_yields_each_event_parsed_up_to_done():
    events = [{"choices": [{"index": 0, "text": "a"}]}, {"choices": [{"index": 0, "text": "b"}], "usage": None}]
    server = Server(lambda r: sse(*events))
    with server.client().call_streamed("/v1/completions", {"prompt": "p", "stream": True}) as stream:
        assert stream.ok and stream.status == 200
        assert list(stream) == events  # the comment line and [DONE] are not events
    (asked,) = server.asked
    assert (asked.method, str(asked.url)) == ("POST", "http://server:8000/v1/completions")
    assert json.loads(asked.content) == {"prompt": "p", "stream": True}
    assert set(_timeout(asked).values()) == {TIMEOUT_S}


def test_a_streamed_post_refused_gives_its_whole_answer():
    error = {"error": {"message": "bad n", "code": 400}}
    server = Server(lambda r: httpx.Response(400, json=error))
    with server.client().call_streamed("/v1/chat/completions", {}) as stream:
        assert not stream.ok and stream.answer() == Answer(400, error)
    server = Server(lambda r: httpx.Response(500, text="Internal Server Error"))
    with server.client().call_streamed("/v1/chat/completions", {}) as stream:
        assert stream.answer() == Answer(500, "Internal Server Error")


def test_a_sibling_talks_to_the_same_server_through_the_same_transport():
    server = Server(lambda r: httpx.Response(200, json=MODELS))
    sibling = server.client().sibling(3)
    assert sibling.models_answer().ok and len(server.asked) == 1


def _request(endpoint, **fields):
    return REQUEST_MODELS[endpoint](endpoint=endpoint, name=f"{endpoint}-streamed", **fields)


CHAT_EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "token_ids": []}]},
    {"choices": [{"index": 0, "delta": {"content": "Hel"}, "token_ids": [5]}], "prompt_token_ids": [1, 2]},
    {"choices": [{"index": 0, "delta": {"content": "lo"}, "token_ids": [6], "finish_reason": "length"}]},
]


def test_a_streamed_chat_request_is_sent_and_put_back_together_as_chat():
    server = Server(lambda r: sse(*CHAT_EVENTS))
    req = _request("chat", messages=[{"role": "user", "content": "hi"}], temperature=0, stream=True)
    got = CHAT.send(server.client(), "tiny", req)
    assert (got["request"], got["endpoint"], got["status"], got["events"]) == ("chat-streamed", "chat", 200, 3)
    (choice,) = got["body"]["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hello"} and choice["token_ids"] == [5, 6]
    assert got["body"]["prompt_token_ids"] == [1, 2] and choice["finish_reason"] == "length"
    sent = json.loads(server.asked[0].content)
    assert sent["model"] == "tiny" and sent["stream"] and sent["return_token_ids"]
    assert str(server.asked[0].url).endswith("/v1/chat/completions")


def test_a_streamed_completion_is_put_back_together_as_text():
    events = [{"choices": [{"index": 0, "text": t, "token_ids": [i]}]} for i, t in enumerate(("a", "b"))]
    server = Server(lambda r: sse(*events))
    req = _request("completions", prompt="p", temperature=0, stream=True)
    got = COMPLETIONS.send(server.client(), "tiny", req)
    (choice,) = got["body"]["choices"]
    assert choice["text"] == "ab" and "message" not in choice and got["events"] == 2


def test_a_streamed_request_refused_is_kept_with_its_status():
    error = {"error": {"message": "n must be 1 when streaming"}}
    server = Server(lambda r: httpx.Response(400, json=error))
    req = _request("completions", prompt="p", temperature=0, stream=True)
    got = COMPLETIONS.send(server.client(), "tiny", req)
    assert (got["status"], got["body"]) == (400, error) and "events" not in got


def test_whether_an_endpoint_is_chat_is_said_by_its_definition():
    assert ENDPOINTS["chat"].chat is True and ENDPOINTS["completions"].chat is False
    # not by which function reads its choices: a chat endpoint whose reader is wrapped is still chat
    wrapped = _Generate("/v1/chat/completions", lambda c, label: chat_choice(c, label), chat=True)
    server = Server(lambda r: sse(*CHAT_EVENTS))
    req = _request("chat", messages=[{"role": "user", "content": "hi"}], temperature=0, stream=True)
    assert wrapped.send(server.client(), "tiny", req)["body"]["choices"][0]["message"]["content"] == "Hello"


def test_the_models_request_is_sent_through_the_clients_models_list():
    server = Server(lambda r: httpx.Response(200, json=MODELS))
    got = ENDPOINTS["models"].send(server.client(), "tiny", _request("models"))
    assert got == {"request": "models-streamed", "endpoint": "models", "status": 200, "body": MODELS}
    assert [(r.method, r.url.path) for r in server.asked] == [("GET", "/v1/models")]
    refused = Server(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    assert ENDPOINTS["models"].send(refused.client(), "tiny", _request("models"))["status"] == 404

"""The gateway against what real CLIs send besides model calls (issue 25, item 4).

A real :class:`Gateway` on a trial's unix socket, reached with raw bytes and with h11 as a
client (the way a CLI's HTTP stack sees it): ``HEAD`` and ``OPTIONS`` per HTTP, the side
endpoints answered or refused with a typed 4xx, an exhausted faux script answered with a
410 naming the trial, faux ``custom`` tool calls in every Responses shape, and scripted
turns matched to the requests they are for.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest

from harness.gateway import FauxProvider, Gateway, TrialAccess, load_faux_script
from harness.models.catalog import ModelSpec

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"


class Faux:
    """A gateway over a faux script, with one trial open."""

    def __init__(self, tmp_path: Path, script: Any, task: str = "demo") -> None:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(script))
        spec = ModelSpec(
            provider="faux", name="demo", upstream="demo", api="openai-chat", script=path
        )
        self.gateway = Gateway(spec, FauxProvider(load_faux_script(path), "demo"))
        self.gateway.start()
        self.records = tmp_path / "evidence" / "model_calls.jsonl"
        self.access: TrialAccess = self.gateway.open_trial("trial-7", task, self.records)
        self.client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {self.access.token}"},
            timeout=15.0,
        )

    def lines(self) -> list[dict[str, Any]]:
        if not self.records.exists():
            return []
        return [json.loads(line) for line in self.records.read_text().splitlines()]

    def close(self) -> None:
        self.client.close()
        self.gateway.close()


@pytest.fixture
def faux(tmp_path: Path) -> Iterator[Faux]:
    gw = Faux(tmp_path, {"responses": [{"text": "one"}]})
    yield gw
    gw.close()


class H11Client:
    """One keep-alive connection to a trial's socket, spoken with h11 as a client."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(path))
        self.conn = h11.Connection(h11.CLIENT)

    def request(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes = b""
    ) -> tuple[h11.Response, bytes]:
        """Send one request; the response and every body byte h11 saw for it."""
        all_headers = [("host", "127.0.0.1"), *headers]
        if body or method == "POST":
            all_headers.append(("content-length", str(len(body))))
        out = self.conn.send(h11.Request(method=method, target=target, headers=all_headers))
        if body:
            out += self.conn.send(h11.Data(data=body))
        out += self.conn.send(h11.EndOfMessage())
        self.sock.sendall(out)
        response: h11.Response | None = None
        data = b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
                continue
            if isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise AssertionError(f"unexpected {event!r}")
        assert response is not None
        self.conn.start_next_cycle()
        return response, data

    def trailing(self) -> bytes:
        """Bytes the server sent past the end of its last response (there must be none)."""
        self.sock.settimeout(0.5)
        try:
            return self.sock.recv(65536)
        except TimeoutError:
            return b""

    def close(self) -> None:
        self.sock.close()


def header(response: h11.Response, name: str) -> str | None:
    for key, value in response.headers:
        if key.decode().lower() == name:
            return str(value.decode())
    return None


def test_head_gets_the_headers_of_a_get_and_no_body(
    faux: Faux, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = [("authorization", f"Bearer {faux.access.token}")]
    client = H11Client(faux.access.socket_path)
    try:
        # Claude Code's connectivity probe: no token, HEAD.
        hello, body = client.request("HEAD", "/api/hello", [])
        assert hello.status_code == 200 and body == b""
        get_hello, get_body = client.request("GET", "/api/hello", [])
        assert json.loads(get_body) == {"message": "hello"}
        assert header(hello, "content-length") == header(get_hello, "content-length")
        models, body = client.request("HEAD", "/v1/models", auth)
        assert models.status_code == 200 and body == b""
        assert int(header(models, "content-length") or 0) > 0
        # Refusals of a HEAD carry no body either: a model endpoint (405), a bad token
        # (401), a path that is none of the gateway's (404).
        for target, headers, status in (
            (CHAT, auth, 405),
            ("/v1/models", [("authorization", "Bearer hgw-wrong")], 401),
            ("/no/such/path", auth, 404),
        ):
            refused, body = client.request("HEAD", target, headers)
            assert (refused.status_code, body) == (status, b""), target
        assert header(refused, "content-type") == "application/json"
        # The connection is still in step: a model call on it is answered whole.
        chat, body = client.request(
            "POST", CHAT, [*auth, ("content-type", "application/json")], b'{"messages": []}'
        )
        assert chat.status_code == 200
        assert json.loads(body)["choices"][0]["message"]["content"] == "one"
        assert client.trailing() == b""
    finally:
        client.close()
    # Nothing went wrong inside the gateway: no traceback, no error logged.
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    lines = faux.lines()
    assert [(line["method"], line["path"], line["status"]) for line in lines] == [
        ("HEAD", "/api/hello", 200),
        ("GET", "/api/hello", 200),
        ("HEAD", "/v1/models", 200),
        ("HEAD", CHAT, 405),
        ("HEAD", "/v1/models", 401),
        ("HEAD", "/no/such/path", 404),
        ("POST", CHAT, 200),
    ]


def test_options_answers_the_methods_of_a_path_with_no_body(faux: Faux) -> None:
    client = H11Client(faux.access.socket_path)
    try:
        for target, allow in (
            (MESSAGES, "POST, OPTIONS"),
            ("/v1/messages/count_tokens", "POST, OPTIONS"),
            ("/v1/models", "GET, HEAD, OPTIONS"),
            ("*", "GET, HEAD, POST, OPTIONS"),
        ):
            # A preflight carries no token.
            response, body = client.request("OPTIONS", target, [])
            assert (response.status_code, body) == (204, b""), target
            assert header(response, "allow") == allow
            assert header(response, "content-length") is None  # RFC 9110: none on a 204
        unknown, body = client.request("OPTIONS", "/v1/elsewhere", [])
        assert unknown.status_code == 404
        assert json.loads(body)["error"]["type"] == "gateway_refused"
        assert client.trailing() == b""
    finally:
        client.close()


def test_side_endpoints_are_answered_or_refused_with_a_typed_4xx(tmp_path: Path) -> None:
    gw = Faux(tmp_path, {"responses": [{"text": "one"}]})
    try:
        c = gw.client
        listed = c.get("/v1/models").json()
        assert [m["id"] for m in listed["data"]] == ["demo"]
        assert listed["has_more"] is False  # Anthropic's list shape as well as OpenAI's
        one = c.get("/v1/models/claude-sonnet-4-5").json()
        assert one["id"] == "demo" and one["type"] == "model"
        counted = c.post(
            "/v1/messages/count_tokens",
            json={"model": "x", "messages": [{"role": "user", "content": "abcdefgh"}]},
        )
        assert counted.status_code == 200 and counted.json() == {"input_tokens": 2}
        for method, path, status in (
            ("GET", "/v1/messages/count_tokens", 405),
            ("POST", "/v1/models", 405),
            ("DELETE", "/api/hello", 405),
            ("GET", MESSAGES, 405),
            ("GET", "/v1/organizations/me", 404),
            ("POST", "/v1/embeddings", 404),
        ):
            response = c.request(method, path, json={} if method == "POST" else None)
            assert response.status_code == status, (method, path, response.text)
            assert response.json()["error"]["type"] == "gateway_refused"
            if status == 405:
                assert response.headers["allow"]
        bad = c.post("/v1/messages/count_tokens", content=b"{not json")
        assert bad.status_code == 400
        # None of them was a model call: the one scripted turn is still there.
        assert c.post(CHAT, json={"messages": []}).json()["choices"][0]["message"]["content"] == (
            "one"
        )
        usage = gw.gateway.usage("trial-7")
        assert usage is not None and usage.calls == 1
        assert all(line["status"] < 500 for line in gw.lines())
    finally:
        gw.close()


@pytest.mark.parametrize(
    ("path", "body", "message_of"),
    [
        (CHAT, {"messages": []}, lambda b: b["error"]["message"]),
        (RESPONSES, {"input": "hi"}, lambda b: b["error"]["message"]),
        (
            MESSAGES,
            {"messages": [], "max_tokens": 5},
            lambda b: b["type"] == "error" and b["error"]["message"],
        ),
    ],
    ids=["chat", "responses", "messages"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_exhausted_script_is_a_410_that_names_the_trial(
    tmp_path: Path, path: str, body: dict[str, Any], message_of: Any, stream: bool
) -> None:
    gw = Faux(tmp_path, {"responses": [{"text": "only"}]}, task="hello-file")
    try:
        assert gw.client.post(path, json={**body, "stream": stream}).status_code == 200
        dry = gw.client.post(path, json={**body, "stream": stream})
        assert dry.status_code == 410
        assert dry.headers["x-should-retry"] == "false"  # the SDKs read it before the status
        assert dry.headers["content-type"] == "application/json"
        message = message_of(dry.json())
        assert "No more faux responses queued for trial trial-7 (task hello-file)" in message
        assert "1 scripted turn(s) of script.json" in message
        kind = dry.json()["error"]["type"]
        assert kind == "invalid_request_error"
        last = gw.lines()[-1]
        assert (last["status"], last["outcome"]) == (410, "error")
        assert last["reason"] == message
        assert last["faux"] == {"exhausted": True, "turns": 1}
    finally:
        gw.close()


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch\n"


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_a_custom_tool_call_in_every_responses_shape(tmp_path: Path) -> None:
    turn = {"tool_calls": [{"name": "apply_patch", "input": PATCH, "id": "call_P"}]}
    gw = Faux(tmp_path, {"responses": [turn, turn, turn, turn]})
    try:
        whole = gw.client.post(RESPONSES, json={"input": "x"}).json()
        [item] = whole["output"]
        assert item["type"] == "custom_tool_call"
        assert (item["name"], item["input"], item["call_id"]) == ("apply_patch", PATCH, "call_P")

        events = sse_events(gw.client.post(RESPONSES, json={"input": "x", "stream": True}).content)
        kinds = [e["type"] for e in events]
        assert kinds == [
            "response.created",
            "response.output_item.added",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert events[1]["item"]["type"] == "custom_tool_call" and events[1]["item"]["input"] == ""
        assert events[2]["delta"] == PATCH and events[3]["input"] == PATCH
        assert events[4]["item"]["input"] == PATCH
        assert events[5]["response"]["output"][0]["input"] == PATCH

        # Chat completions has custom tool calls too; messages gets the text as an argument.
        chat = gw.client.post(CHAT, json={"messages": []}).json()["choices"][0]
        assert chat["message"]["tool_calls"][0]["custom"] == {
            "name": "apply_patch",
            "input": PATCH,
        }
        assert chat["finish_reason"] == "tool_calls"
        messages = gw.client.post(MESSAGES, json={"messages": [], "max_tokens": 9}).json()
        assert messages["content"][0]["input"] == {"input": PATCH}
        assert [line["usage"]["output_tokens"] for line in gw.lines()][0] == (
            -(-(len("apply_patch") + len(PATCH)) // 4)
        )
    finally:
        gw.close()


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"type": "function", "name": n, "parameters": {}} for n in names]


def test_scripted_turns_answer_only_the_requests_they_match(tmp_path: Path) -> None:
    script = {
        "when": {"tools": True},
        "background": {"text": "Fix the greeting"},
        "responses": [
            {"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]},
            {
                "when": {"tool": "apply_patch"},
                "tool_calls": [{"name": "apply_patch", "input": PATCH}],
            },
            {"when": {"last_message": "^Summar"}, "text": "summary"},
            {"text": "done"},
        ],
    }
    gw = Faux(tmp_path, script)
    try:

        def ask(body: dict[str, Any]) -> dict[str, Any]:
            response = gw.client.post(RESPONSES, json=body)
            assert response.status_code == 200, response.text
            return dict(response.json()["output"][0])

        title = {"input": [{"role": "user", "content": "Generate a title"}]}
        agent = {"input": "fix it", "tools": tools("shell")}
        assert ask(title)["content"][0]["text"] == "Fix the greeting"  # background
        assert ask(agent)["name"] == "shell"
        assert ask(agent)["content"][0]["text"] == "Fix the greeting"  # no apply_patch offered
        assert ask({**agent, "tools": tools("shell", "apply_patch")})["type"] == "custom_tool_call"
        summary = {
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Summarize"}]}]
        }
        assert ask(summary)["content"][0]["text"] == "summary"  # its own when, not the default
        assert ask(title)["content"][0]["text"] == "Fix the greeting"
        assert ask(agent)["content"][0]["text"] == "done"
        # Used up: a background call still gets its canned answer; the agent gets the 410.
        assert ask(title)["content"][0]["text"] == "Fix the greeting"
        assert gw.client.post(RESPONSES, json=agent).status_code == 410
        notes = [line["faux"] for line in gw.lines()]
        assert [n.get("turn") for n in notes] == [None, 1, None, 2, 3, None, 4, None, None]
        background = [n for n in notes if n.get("background")]
        assert len(background) == 4
        assert background[0]["reason"] == "no scripted turn for it: the request carries no tools"
        assert "does not offer the tool 'apply_patch'" in background[1]["reason"]
        assert notes[-1] == {"exhausted": True, "turns": 4}
        # Background calls are model calls of the trial all the same (recorded, counted).
        usage = gw.gateway.usage("trial-7")
        assert usage is not None and usage.calls == 9
    finally:
        gw.close()


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ({"responses": [{"when": {"tools": "yes"}}]}, "when.tools must be true or false"),
        ({"responses": [{"when": {"last_message": "("}}]}, "not a regular expression"),
        ({"responses": [{"when": {"model": "x"}}]}, "unknown key(s) model"),
        ({"when": [], "responses": []}, "must be an object"),
        (
            {"responses": [{"tool_calls": [{"name": "p", "input": "x", "arguments": {}}]}]},
            "not both",
        ),
        ({"responses": [{"tool_calls": [{"name": "p", "input": 3}]}]}, "input must be a string"),
        ({"background": {"text": "x", "when": {"tools": True}}}, "no when"),
    ],
)
def test_bad_matching_syntax_is_refused_naming_the_entry(
    tmp_path: Path, script: Any, needle: str
) -> None:
    from harness.errors import UsageError

    path = tmp_path / "s.json"
    path.write_text(json.dumps(script))
    with pytest.raises(UsageError, match=None) as caught:
        load_faux_script(path)
    assert needle in str(caught.value) and str(path) in str(caught.value)

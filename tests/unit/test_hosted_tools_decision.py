"""The one decision on hosted tools: each tool of each protocol under each network policy.

:func:`harness.gateway.hosted_tools.decide` is what every wire protocol of the gateway asks;
the gateway end to end (a real upstream that must hear nothing) is
tests/security/test_gateway_hosted_tools.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.gateway.hosted_tools import decide, error_body, hosted_tools, narrowest
from sandbox.network_policy import NetworkPolicy

NO = NetworkPolicy("no-network")
PUBLIC = NetworkPolicy("public")
LISTED = NetworkPolicy("allowlist", ("mcp.example.com", "*.tools.example.org", "203.0.113.0/24"))
UNLISTED = NetworkPolicy("allowlist", ("pypi.org",))

CHAT, RESPONSES, MESSAGES, GEMINI = (
    "openai-chat",
    "openai-responses",
    "anthropic-messages",
    "gemini",
)

#: (id, api, body, kind): a request asking the provider to reach outside for the agent.
HOSTED: list[tuple[str, str, dict[str, Any], str]] = [
    ("chat-web-search-options", CHAT, {"web_search_options": {}}, "web_search"),
    ("chat-unknown-type", CHAT, {"tools": [{"type": "retrieval"}]}, "unknown"),
    ("responses-web-search", RESPONSES, {"tools": [{"type": "web_search"}]}, "web_search"),
    (
        "responses-web-search-preview",
        RESPONSES,
        {"tools": [{"type": "web_search_preview"}]},
        "web_search",
    ),
    (
        "responses-web-search-dated",
        RESPONSES,
        {"tools": [{"type": "web_search_preview_2025_03_11"}]},
        "web_search",
    ),
    (
        "responses-code-interpreter",
        RESPONSES,
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
        "code_execution",
    ),
    ("responses-file-search", RESPONSES, {"tools": [{"type": "file_search"}]}, "file_search"),
    (
        "responses-image-generation",
        RESPONSES,
        {"tools": [{"type": "image_generation"}]},
        "image_generation",
    ),
    (
        "responses-mcp-connector",
        RESPONSES,
        {"tools": [{"type": "mcp", "connector_id": "connector_gmail"}]},
        "mcp",
    ),
    (
        "responses-in-namespace",
        RESPONSES,
        {"tools": [{"type": "namespace", "tools": [{"type": "web_search"}]}]},
        "web_search",
    ),
    ("responses-tools-not-a-list", RESPONSES, {"tools": {"type": "web_search"}}, "web_search"),
    (
        "anthropic-web-search",
        MESSAGES,
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        "web_search",
    ),
    (
        "anthropic-web-fetch",
        MESSAGES,
        {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
        "web_fetch",
    ),
    (
        "anthropic-code-execution",
        MESSAGES,
        {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
        "code_execution",
    ),
    ("anthropic-unknown", MESSAGES, {"tools": [{"type": "future_tool_2030"}]}, "unknown"),
    ("gemini-google-search", GEMINI, {"tools": [{"googleSearch": {}}]}, "web_search"),
    ("gemini-google-search-snake", GEMINI, {"tools": [{"google_search": {}}]}, "web_search"),
    (
        "gemini-search-retrieval",
        GEMINI,
        {"tools": [{"googleSearchRetrieval": {}}]},
        "web_search",
    ),
    ("gemini-url-context", GEMINI, {"tools": [{"urlContext": {}}]}, "url_context"),
    ("gemini-code-execution", GEMINI, {"tools": [{"codeExecution": {}}]}, "code_execution"),
    ("gemini-unknown", GEMINI, {"tools": [{"someFutureTool": {}}]}, "unknown"),
    # Request fields, not tools, that make the provider reach out (a red team's pass 4).
    ("openrouter-plugins", CHAT, {"plugins": [{"id": "web"}]}, "web_search"),
    ("xai-live-search", CHAT, {"search_parameters": {"mode": "on"}}, "web_search"),
    ("responses-stored-prompt", RESPONSES, {"prompt": {"id": "pmpt_1"}}, "unknown"),
    ("anthropic-container", MESSAGES, {"container": {"skills": [{"id": "x"}]}}, "code_execution"),
    ("gemini-cached-content", GEMINI, {"cachedContent": "cachedContents/x"}, "unknown"),
]

#: (id, api, body): MCP servers named by URL.
MCP: list[tuple[str, str, Any]] = [
    (
        "responses",
        RESPONSES,
        lambda url: {"tools": [{"type": "mcp", "server_label": "x", "server_url": url}]},
    ),
    (
        "anthropic",
        MESSAGES,
        lambda url: {"mcp_servers": [{"type": "url", "url": url, "name": "x"}]},
    ),
]

#: Tools the client runs itself: never refused.
LOCAL: list[tuple[str, str, dict[str, Any]]] = [
    ("chat-function", CHAT, {"tools": [{"type": "function", "function": {"name": "f"}}]}),
    (
        "responses-codex",
        RESPONSES,
        {
            "tools": [
                {"type": "function", "name": "exec_command"},
                {"type": "custom", "name": "apply_patch"},
                {"type": "local_shell"},
                {"type": "tool_search", "execution": "client"},
                {"type": "tool_search"},
                {"type": "namespace", "name": "m", "tools": [{"type": "function", "name": "g"}]},
            ]
        },
    ),
    (
        "anthropic-claude-code",
        MESSAGES,
        {
            "tools": [
                {"name": "Bash", "input_schema": {"type": "object"}},
                {"type": "custom", "name": "Edit", "input_schema": {"type": "object"}},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            ]
        },
    ),
    (
        "gemini-cli",
        GEMINI,
        {"tools": [{"functionDeclarations": [{"name": "read_file"}]}]},
    ),
    ("no-tools", RESPONSES, {"input": "hi", "tools": None, "background": False}),
]


@pytest.mark.parametrize(
    ("api", "body", "kind"), [h[1:] for h in HOSTED], ids=[h[0] for h in HOSTED]
)
def test_a_hosted_tool_is_refused_unless_the_phase_is_public(
    api: str, body: dict[str, Any], kind: str
) -> None:
    [tool] = hosted_tools(api, body)
    assert tool.kind == kind
    for policy in (NO, LISTED, UNLISTED):
        refusal = decide(api, body, policy)
        assert refusal is not None and refusal.tool == tool, policy
        assert f"network_mode = {policy.mode!r}" in refusal.reason
    assert decide(api, body, PUBLIC) is None


@pytest.mark.parametrize(("api", "body"), [x[1:] for x in LOCAL], ids=[x[0] for x in LOCAL])
def test_tools_the_client_runs_are_never_refused(api: str, body: dict[str, Any]) -> None:
    assert hosted_tools(api, body) == []
    for policy in (NO, LISTED, UNLISTED, PUBLIC):
        assert decide(api, body, policy) is None


@pytest.mark.parametrize(("api", "make"), [m[1:] for m in MCP], ids=[m[0] for m in MCP])
def test_an_mcp_server_goes_only_where_the_policy_would_let_the_phase_go(
    api: str, make: Any
) -> None:
    listed = [
        "https://mcp.example.com/sse",
        "https://a.tools.example.org:8443/mcp",
        "http://203.0.113.9/mcp",
    ]
    unlisted = ["https://evil.example.net/mcp?data=secret", "http://198.51.100.1/"]
    private = [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://api.localhost/mcp",
        "http://[::1]/mcp",
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/mcp",
        "http://[::ffff:192.168.0.1]/mcp",
        "file:///etc/passwd",
        "https:///no-host",
    ]
    for url in listed + unlisted + private:
        refusal = decide(api, make(url), NO)
        assert refusal is not None and refusal.tool is not None and refusal.tool.kind == "mcp"
        assert "no-network" in refusal.reason
    for url in listed:
        assert decide(api, make(url), LISTED) is None, url
        assert decide(api, make(url), PUBLIC) is None, url
    for url in unlisted:
        refusal = decide(api, make(url), LISTED)
        assert refusal is not None and "not in allowed_hosts" in refusal.reason, url
        assert decide(api, make(url), PUBLIC) is None, url
    for url in private:
        for policy in (LISTED, PUBLIC, NetworkPolicy("allowlist", ("10.0.0.0/8", "localhost"))):
            assert decide(api, make(url), policy) is not None, (url, policy)


def test_the_first_refusal_is_named_with_its_host() -> None:
    body = {
        "tools": [
            {"type": "function", "name": "f"},
            {"type": "mcp", "server_label": "x", "server_url": "https://evil.example.net/x"},
            {"type": "web_search"},
        ]
    }
    refusal = decide(RESPONSES, body, UNLISTED)
    assert refusal is not None and refusal.host == "evil.example.net"
    assert [t.kind for t in hosted_tools(RESPONSES, body)] == ["mcp", "web_search"]


@pytest.mark.parametrize("policy", [NO, LISTED, PUBLIC], ids=lambda p: p.mode)
@pytest.mark.parametrize("value", [True, "true", 1])
def test_background_is_refused_under_every_policy(policy: NetworkPolicy, value: Any) -> None:
    refusal = decide(RESPONSES, {"input": "hi", "background": value}, policy)
    assert refusal is not None and refusal.tool is None
    assert "budget" in refusal.reason


def test_the_refusal_is_in_each_providers_own_error_shape() -> None:
    openai = json.loads(error_body(RESPONSES, "no"))
    assert openai["error"]["type"] == "invalid_request_error"
    assert openai["error"]["code"] == "network_refused"
    anthropic = json.loads(error_body(MESSAGES, "no"))
    assert anthropic == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "no"},
    }
    gemini = json.loads(error_body(GEMINI, "no"))
    assert gemini == {"error": {"code": 400, "message": "no", "status": "INVALID_ARGUMENT"}}


def _chat_image(url: str) -> dict[str, Any]:
    part = {"type": "image_url", "image_url": {"url": url}}
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}]}


def _responses_file(url: str) -> dict[str, Any]:
    output = [{"type": "input_file", "file_url": url}]  # a tool's output may hold parts
    call = {"type": "function_call_output", "call_id": "c", "output": output}
    return {"input": [{"type": "message", "role": "user", "content": "x"}, call]}


def _anthropic_document(url: str) -> dict[str, Any]:
    block = {"type": "document", "source": {"type": "url", "url": url}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [block]}
    return {"messages": [{"role": "user", "content": [result]}]}


def _gemini_file(url: str) -> dict[str, Any]:
    part = {"fileData": {"mimeType": "text/html", "fileUri": url}}
    return {"contents": [{"role": "user", "parts": [{"text": "x"}, part]}]}


def _chat_file(url: str) -> dict[str, Any]:
    part = {"type": "file", "file": {"file_url": url}}
    return {"messages": [{"role": "user", "content": [part]}]}


def _gemini_system_file(url: str) -> dict[str, Any]:
    part = {"fileData": {"mimeType": "text/html", "fileUri": url}}
    return {"systemInstruction": {"parts": [part]}, "contents": []}


URLS: list[tuple[str, str, Any, str]] = [
    ("chat-image-url", CHAT, _chat_image, "image_url"),
    ("chat-file-url", CHAT, _chat_file, "file"),
    ("gemini-system-instruction-file-data", GEMINI, _gemini_system_file, "fileData"),
    ("responses-input-file-in-tool-output", RESPONSES, _responses_file, "input_file"),
    ("anthropic-document-in-tool-result", MESSAGES, _anthropic_document, "document"),
    ("gemini-file-data", GEMINI, _gemini_file, "fileData"),
]


@pytest.mark.parametrize(("api", "make", "name"), [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_a_url_the_provider_would_fetch_is_judged_by_its_host(
    api: str, make: Any, name: str
) -> None:
    exfil = "https://evil.example.net/x?data=secret"
    [fetched] = hosted_tools(api, make(exfil))
    assert (fetched.name, fetched.kind, fetched.url) == (name, "url_fetch", exfil)
    refused = decide(api, make(exfil), NO)
    assert refused is not None and refused.host == "evil.example.net"
    assert decide(api, make(exfil), UNLISTED) is not None
    assert decide(api, make(exfil), PUBLIC) is None
    assert decide(api, make("https://mcp.example.com/a.png"), LISTED) is None
    for private in ("http://169.254.169.254/latest", "http://localhost:8080/"):
        assert decide(api, make(private), PUBLIC) is not None
    # Inline data is not fetched: it passes everywhere.
    assert hosted_tools(api, make("data:image/png;base64,iVBORw0KGgo=")) == []


def test_an_agents_own_tool_call_arguments_are_not_content() -> None:
    call = {
        "type": "tool_use",
        "id": "t",
        "name": "WebFetch",
        "input": {"type": "image", "source": {"type": "url", "url": "https://x.example/"}},
    }
    body = {"messages": [{"role": "assistant", "content": [call]}]}
    assert hosted_tools(MESSAGES, body) == []
    assert decide(MESSAGES, body, NO) is None


def test_steps_the_gateway_cannot_follow_get_their_common_policy_or_none() -> None:
    assert narrowest([PUBLIC, NetworkPolicy("public")]) == PUBLIC
    assert narrowest([LISTED, LISTED]) == LISTED
    for differing in ([PUBLIC, NO], [PUBLIC, LISTED], [LISTED, UNLISTED], []):
        assert narrowest(differing).mode == "no-network", differing

"""Hosted tools: what a model call asks the provider to reach, and whether the phase allows it.

A provider runs some tools itself, outside the sandbox: web search and fetch, MCP servers
it connects to, code interpreters, URL context; and it fetches the URL of a content part
(an image, a file, a document) itself. Through them an agent whose phase has
``no-network`` would reach the internet by way of its model provider. :func:`decide` is the
one decision, for every wire protocol the gateway serves (docs/model-access.md §6):

- ``no-network``: every hosted tool and fetched URL is refused.
- ``allowlist``: an MCP server or a fetched URL whose host is listed (a name listed or
  under a listed wildcard, an IP listed or inside a listed CIDR; never a private,
  loopback, link-local or metadata address) is allowed; every other hosted tool is
  refused: a web search or fetch cannot be bounded to the list (the provider picks where
  it goes).
- ``public``: allowed, except an MCP server or a fetched URL at ``localhost`` or at an
  address :func:`~sandbox.egress_proxy.rules.forbidden` (a self-hosted upstream would
  connect there from the harness's own network) or at a URL that is not ``http(s)``.
  A ``data:`` URL is inline, never fetched.
- ``background: true`` (a Responses call answered later, whose usage the gateway never
  sees) is refused under every policy: it would escape the trial's budget.

Tools the client runs itself (functions, custom tools, Codex's ``local_shell``, Anthropic's
``bash``/``text_editor``/``computer``/``memory`` tools, Gemini's function declarations) are
not hosted, nor is a search over the request's own tools (Responses ``tool_search``,
Anthropic ``tool_search_tool_*``). A tool of a type not known here is treated as hosted
(fail closed): refused under ``no-network`` and ``allowlist``, allowed under ``public``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from harness.gateway import gemini
from harness.gateway.policy import Refused
from sandbox.egress_proxy.rules import Allowlist, forbidden, normalize_name, parse_ip
from sandbox.network_policy import NO_NETWORK, NetworkPolicy

#: Responses (and chat) tool types the client runs itself.
_OPENAI_LOCAL = frozenset(
    {"function", "custom", "local_shell", "shell", "apply_patch", "computer_use_preview"}
)
#: Responses tools that reach nothing outside the request: a search over the request's own
#: deferred tools (Codex sends it, run by the client or by the provider).
_OPENAI_INERT = frozenset({"tool_search"})
#: Anthropic tool types (their prefix before the version date) the client runs itself.
_ANTHROPIC_LOCAL = ("custom", "bash_", "text_editor_", "computer_", "memory_")
#: Anthropic server tools that reach nothing outside the request (a search of its own tools).
_ANTHROPIC_INERT = ("tool_search_tool_",)
#: Gemini ``Tool`` fields the client runs itself (proto JSON takes both spellings).
_GEMINI_LOCAL = frozenset(
    {"functionDeclarations", "function_declarations", "computerUse", "computer_use"}
)
#: What a hosted tool is, by its name in each protocol (prefix match where dated).
_KINDS: tuple[tuple[str, str], ...] = (
    ("web_search", "web_search"),
    ("web_fetch", "web_fetch"),
    ("googleSearch", "web_search"),
    ("googleSearchRetrieval", "web_search"),
    ("google_search", "web_search"),
    ("enterpriseWebSearch", "web_search"),
    ("enterprise_web_search", "web_search"),
    ("googleMaps", "web_search"),
    ("google_maps", "web_search"),
    ("urlContext", "url_context"),
    ("url_context", "url_context"),
    ("code_interpreter", "code_execution"),
    ("code_execution", "code_execution"),
    ("codeExecution", "code_execution"),
    ("file_search", "file_search"),
    ("fileSearch", "file_search"),
    ("image_generation", "image_generation"),
    ("mcp", "mcp"),
)


@dataclass(frozen=True)
class HostedTool:
    """One tool a request asks the provider to run.

    Attributes:
        name: The tool as the request names it (``web_search_preview``, ``googleSearch``,
            ``mcp_servers``, ``web_search_options``).
        kind: ``web_search``, ``web_fetch``, ``url_context``, ``code_execution``,
            ``file_search``, ``image_generation``, ``mcp``, ``url_fetch`` (a content
            part's URL) or ``unknown``.
        url: An MCP server's or a content part's URL (None: none given, e.g. an OpenAI
            connector).
    """

    name: str
    kind: str
    url: str | None = None


@dataclass(frozen=True)
class NetworkRefusal:
    """Why a model call is refused under the phase's network policy.

    Attributes:
        reason: The answer's message and the record's ``reason``.
        tool: The hosted tool refused (None: ``background``).
        host: The MCP server's host, when one was named.
    """

    reason: str
    tool: HostedTool | None = None
    host: str | None = None


class ToolRefused(Refused):
    """A model call refused by :func:`decide` (a 400 in the provider's own error shape)."""

    def __init__(self, refusal: NetworkRefusal) -> None:
        super().__init__(400, refusal.reason)
        self.refusal = refusal


def error_body(api: str | None, message: str) -> bytes:
    """The 400 of a refused call, as the provider of ``api`` words an invalid request."""
    payload: dict[str, Any]
    if api == "anthropic-messages":
        payload = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    elif api == "gemini":
        payload = gemini.error(400, message)
    else:
        payload = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "tools",
                "code": "network_refused",
            }
        }
    return json.dumps(payload).encode()


#: Request fields of an OpenAI-compatible call that ask the provider to reach out: chat's
#: web search, OpenRouter's plugins (``{"id": "web"}`` searches the web), xAI's live search,
#: (a Responses stored prompt, which can carry tools the request does not show, is judged
#: apart: ``prompt`` is plain text elsewhere).
_OPENAI_FIELDS = {
    "web_search_options": "web_search",
    "plugins": "web_search",
    "search_parameters": "web_search",
}
#: Anthropic: a code-execution container (its skills run at the provider).
_ANTHROPIC_FIELDS = {"container": "code_execution"}
#: Gemini: cached content made earlier (it can hold tools and files the request does not
#: show).
_GEMINI_FIELDS = {"cachedContent": "unknown", "cached_content": "unknown"}
#: Gemini request fields holding parts the provider reads (``fileData`` URIs are fetched).
_GEMINI_CONTENT = ("contents", "systemInstruction", "system_instruction")

#: Kinds that name where they go: judged by their URL's host.
_AT_A_URL = frozenset({"mcp", "url_fetch"})
#: Content parts whose URL the provider fetches, and the fields holding it.
_OPENAI_PARTS = {
    "image_url": ("image_url",),
    "input_image": ("image_url",),
    "input_file": ("file_url",),
    "file": ("file_url",),
}
_ANTHROPIC_PARTS = frozenset({"image", "document"})
#: Anthropic blocks whose fields are the agent's own tool call, not content.
_ANTHROPIC_CALLS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _url_of(value: Any) -> str | None:
    """A fetched URL: a string, or ``{"url": ...}``; a ``data:`` URL is inline, not fetched."""
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or value.strip()[:5].lower() == "data:":
        return None
    return value


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every object inside ``value`` (depth first; the body was parsed, so it is bounded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _openai_urls(payload: Mapping[str, Any]) -> Iterator[HostedTool]:
    for part in _walk([payload.get("messages"), payload.get("input")]):
        kind = part.get("type")
        if not isinstance(kind, str):
            continue
        for field in _OPENAI_PARTS.get(kind, ()):
            # A chat ``file`` part holds its URL one level down: {"file": {"file_url": ...}}.
            for holder in (part, part.get(kind)):
                url = _url_of(holder.get(field)) if isinstance(holder, dict) else None
                if url is not None:
                    yield HostedTool(str(kind), "url_fetch", url)


def _anthropic_urls(payload: Mapping[str, Any]) -> Iterator[HostedTool]:
    stack: list[Any] = [payload.get("messages"), payload.get("system")]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
            continue
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in _ANTHROPIC_CALLS:
            continue  # the agent's own tool call: its arguments are not content
        source = item.get("source")
        if kind in _ANTHROPIC_PARTS and isinstance(source, dict) and source.get("type") == "url":
            url = _url_of(source)
            if url is not None:
                yield HostedTool(str(kind), "url_fetch", url)
        stack.extend(reversed(list(item.values())))


def _gemini_urls(payload: Mapping[str, Any]) -> Iterator[HostedTool]:
    sections = [payload.get(key) for key in _GEMINI_CONTENT]
    for part in _walk(sections):
        for field, uri in (("fileData", "fileUri"), ("file_data", "file_uri")):
            data = part.get(field)
            if isinstance(data, dict):
                url = _url_of(data.get(uri))
                if url is not None:
                    yield HostedTool(field, "url_fetch", url)


def _kind(name: str) -> str:
    for prefix, kind in _KINDS:
        if name == prefix or name.startswith(prefix + "_"):
            return kind
    return "unknown"


def _tools(payload: Mapping[str, Any]) -> Iterator[Any]:
    tools = payload.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        yield tools  # not a list: the provider's to reject, but never waved through
        return
    yield from tools


def _top_level(payload: Mapping[str, Any], fields: Mapping[str, str]) -> Iterator[HostedTool]:
    """Request fields (not tools) that make the provider reach out, when present."""
    for field, kind in fields.items():
        if payload.get(field) not in (None, False):
            yield HostedTool(field, kind)


def _openai(payload: Mapping[str, Any], api: str) -> Iterator[HostedTool]:
    yield from _top_level(payload, _OPENAI_FIELDS)
    if api == "openai-responses" and isinstance(payload.get("prompt"), dict):
        yield HostedTool("prompt", "unknown")  # a stored prompt: tools the request hides
    pending = list(_tools(payload))
    while pending:
        tool = pending.pop(0)
        if not isinstance(tool, dict):
            yield HostedTool(type(tool).__name__, "unknown")
            continue
        kind = tool.get("type", "function")
        if kind == "namespace" and isinstance(tool.get("tools"), list):
            pending.extend(tool["tools"])  # a client-side group of tools: each is judged
            continue
        if kind in _OPENAI_LOCAL or kind in _OPENAI_INERT:
            continue
        name = kind if isinstance(kind, str) else repr(kind)
        url = tool.get("server_url")
        yield HostedTool(name, _kind(name), url if isinstance(url, str) else None)


def _anthropic(payload: Mapping[str, Any]) -> Iterator[HostedTool]:
    yield from _top_level(payload, _ANTHROPIC_FIELDS)
    for tool in _tools(payload):
        if not isinstance(tool, dict):
            yield HostedTool(type(tool).__name__, "unknown")
            continue
        kind = tool.get("type")
        if kind is None or (isinstance(kind, str) and kind.startswith(_ANTHROPIC_LOCAL)):
            continue  # a custom tool has no type, or "custom"
        if isinstance(kind, str) and kind.startswith(_ANTHROPIC_INERT):
            continue
        name = kind if isinstance(kind, str) else repr(kind)
        yield HostedTool(name, _kind(name))
    servers = payload.get("mcp_servers")
    if servers is not None:
        for server in servers if isinstance(servers, list) else [servers]:
            url = server.get("url") if isinstance(server, dict) else None
            yield HostedTool("mcp_servers", "mcp", url if isinstance(url, str) else None)


def _gemini(payload: Mapping[str, Any]) -> Iterator[HostedTool]:
    yield from _top_level(payload, _GEMINI_FIELDS)
    for tool in _tools(payload):
        if not isinstance(tool, dict):
            yield HostedTool(type(tool).__name__, "unknown")
            continue
        for field in tool:
            if field not in _GEMINI_LOCAL:
                yield HostedTool(field, _kind(field))


def hosted_tools(api: str, payload: Mapping[str, Any]) -> list[HostedTool]:
    """What ``payload`` asks the provider to reach for it: hosted tools, then fetched URLs.

    A content part whose URL the provider fetches (an ``image_url``, a Responses
    ``input_image``/``input_file``, an Anthropic ``url`` source, a Gemini ``fileData``)
    is one too, of kind ``url_fetch``.

    Args:
        api: The call's API (``openai-chat``, ``openai-responses``, ``anthropic-messages``,
            ``gemini``).
        payload: The request body.
    """
    if api == "anthropic-messages":
        return [*_anthropic(payload), *_anthropic_urls(payload)]
    if api == "gemini":
        return [*_gemini(payload), *_gemini_urls(payload)]
    return [*_openai(payload, api), *_openai_urls(payload)]


def _host(url: str) -> tuple[str | None, str | None]:
    """An MCP URL's host, and why it is never a destination (None: it may be one)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None, "its URL does not parse"
    if parts.scheme not in ("http", "https") or not host:
        return host, "its URL is not an http(s) URL with a host"
    address = parse_ip(host)
    if address is not None:
        why = forbidden(address)
        return host, None if why is None else f"its host is {why}"
    name = normalize_name(host)
    if name is None:
        return host, "its host is not a valid host name"
    if name == "localhost" or name.endswith(".localhost"):
        return host, "its host is loopback"
    return host, None


def _listed(host: str, allowed: tuple[str, ...]) -> bool:
    try:
        allowlist = Allowlist.parse(allowed)
    except ValueError:
        return False
    address = parse_ip(host)
    if address is not None:
        return allowlist.ip_listed(address)
    name = normalize_name(host)
    return name is not None and allowlist.name_allowed(name)


def _judge(tool: HostedTool, policy: NetworkPolicy) -> NetworkRefusal | None:
    mode = policy.mode
    said = f"the hosted tool {tool.name!r} ({tool.kind})"
    if tool.kind == "url_fetch":
        said = f"the content part {tool.name!r} (a URL the provider fetches)"
    if tool.kind not in _AT_A_URL:
        if mode == "public":
            return None
        why = (
            "it reaches outside the sandbox through the model provider"
            if mode == "no-network"
            else "the provider picks where it goes, which an allowlist cannot bound"
        )
        if tool.kind == "unknown":
            why = "the gateway does not know what it reaches (refused unless public)"
        return NetworkRefusal(f"{said} is refused under network_mode = {mode!r}: {why}", tool)
    if tool.url is None:
        if mode == "public":
            return None
        return NetworkRefusal(
            f"{said} names no server URL the gateway could check; refused under "
            f"network_mode = {mode!r}",
            tool,
        )
    host, bad = _host(tool.url)
    if mode == "no-network":
        return NetworkRefusal(
            f"{said} at {host!r} is refused under network_mode = 'no-network': the provider "
            "would connect to it for the agent",
            tool,
            host,
        )
    if bad is not None:
        return NetworkRefusal(f"{said} at {host!r} is refused: {bad}", tool, host)
    if mode == "allowlist" and (host is None or not _listed(host, policy.allowed_hosts)):
        return NetworkRefusal(
            f"{said} at {host!r} is refused under network_mode = 'allowlist': its host is "
            "not in allowed_hosts",
            tool,
            host,
        )
    return None


def decide(api: str, payload: Mapping[str, Any], policy: NetworkPolicy) -> NetworkRefusal | None:
    """Why ``payload`` is refused under the phase's ``policy`` (None: it may go upstream).

    Args:
        api: The call's API.
        payload: The request body (a JSON object).
        policy: The network policy of the phase whose agent holds the token.

    Returns:
        The first refusal: ``background`` first, then the hosted tools in order.
    """
    background = payload.get("background")
    if background is not None and background is not False:
        return NetworkRefusal(
            "background = true is refused: a background response is fetched later, outside "
            "the call, so its usage would escape the trial's budget; send the request without it"
        )
    for tool in hosted_tools(api, payload):
        refusal = _judge(tool, policy)
        if refusal is not None:
            return refusal
    return None


def narrowest(policies: Iterable[NetworkPolicy]) -> NetworkPolicy:
    """One policy for agent phases that may differ (a trial whose gateway cannot follow its steps).

    Their common policy when they all have the same, else ``no-network`` (fail closed).
    """
    listed = list(policies)
    if not listed:
        return NO_NETWORK
    first = listed[0]
    same = all(p.mode == first.mode and p.allowed_hosts == first.allowed_hosts for p in listed)
    return first if same else NO_NETWORK


__all__ = ["HostedTool", "NetworkRefusal", "ToolRefused", "decide", "error_body", "hosted_tools"]

"""Responses over chat: the OpenAI Responses API answered by an endpoint that serves only chat.

Codex speaks only the Responses API (``POST /v1/responses``); many OpenAI-compatible
servers (vLLM, ollama, proxies) serve only chat completions. For a catalog model whose
``serves`` lacks ``openai-responses`` (docs/model-access.md §6), :class:`ResponsesOverChat`
turns each Responses call into a chat completions call and the answer back: messages and
function calls and their outputs, freeform ``custom`` tools (as a function taking one
string ``input``), usage, and streams event by event. Everything else passes through to the
wrapped provider unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from typing_extensions import override

from harness.errors import ProviderError
from harness.gateway.providers import Provider, ProviderCall, ProviderReply

CHAT_PATH = "/v1/chat/completions"
#: Responses request keys a chat endpoint takes as they are.
_SAME_KEYS = ("model", "temperature", "top_p", "parallel_tool_calls", "stream", "user")
#: The argument a custom (freeform) tool gets as a chat function.
CUSTOM_INPUT = "input"


def _text_of(content: Any) -> str:
    """The text of a Responses content value (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)


def _chat_content(content: Any) -> Any:
    """A Responses message's content as chat content (text, or parts with images)."""
    if isinstance(content, str) or not isinstance(content, list):
        return _text_of(content)
    if not any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
        return _text_of(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        elif isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
    return parts


def _tool(tool: Any) -> dict[str, Any] | None:
    """A Responses tool as a chat function (None: a hosted tool chat has no form for)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return None
    function: dict[str, Any] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if tool.get("type") == "function":
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    elif tool.get("type") == "custom":
        function["parameters"] = {
            "type": "object",
            "properties": {
                CUSTOM_INPUT: {"type": "string", "description": "the tool's freeform input"}
            },
            "required": [CUSTOM_INPUT],
        }
    else:
        return None
    return {"type": "function", "function": function}


def custom_tools(body: dict[str, Any]) -> frozenset[str]:
    """Names of the request's freeform (``custom``) tools."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(
        t["name"]
        for t in tools
        if isinstance(t, dict) and t.get("type") == "custom" and isinstance(t.get("name"), str)
    )


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request body as a chat completions request body."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _chat_content(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            if kind == "function_call":
                arguments = item.get("arguments")
                arguments = arguments if isinstance(arguments, str) else "{}"
            else:
                arguments = json.dumps({CUSTOM_INPUT: item.get("input", "")})
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else _text_of(output),
                }
            )
        # Reasoning items and hosted-tool items have no chat form: dropped.
    chat: dict[str, Any] = {k: body[k] for k in _SAME_KEYS if k in body}
    chat["messages"] = messages
    tools = [t for t in (_tool(t) for t in body.get("tools") or []) if t is not None]
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, str):
            chat["tool_choice"] = choice
        elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    if chat.get("stream") is True:
        chat["stream_options"] = {"include_usage": True}
    return chat


def _usage(chat_usage: Any) -> dict[str, Any] | None:
    if not isinstance(chat_usage, dict):
        return None
    inp = chat_usage.get("prompt_tokens")
    out = chat_usage.get("completion_tokens")
    usage: dict[str, Any] = {
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": chat_usage.get("total_tokens"),
    }
    details = chat_usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        usage["input_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    return usage


def _call_item(n: int, call_id: str, name: str, arguments: str, custom: bool) -> dict[str, Any]:
    if custom:
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            parsed = None
        text = parsed.get(CUSTOM_INPUT) if isinstance(parsed, dict) else None
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{n}_{call_id}",
            "call_id": call_id,
            "name": name,
            "input": text if isinstance(text, str) else arguments,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_{n}_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _message_item(response_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{response_id}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _response(
    response_id: str,
    model: Any,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    finish: Any,
    status: str | None = None,
) -> dict[str, Any]:
    final = "incomplete" if finish == "length" else "completed"
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status or final,
        "model": model,
        "output": output,
        "incomplete_details": {"reason": "max_output_tokens"} if finish == "length" else None,
        "usage": usage,
    }


def chat_to_responses(chat: Any, custom: frozenset[str]) -> dict[str, Any]:
    """A chat completions answer as a Responses answer (``custom``: freeform tool names)."""
    if not isinstance(chat, dict):
        raise ProviderError("chat endpoint answered something that is not a JSON object")
    response_id = "resp_" + str(chat.get("id", "chat"))
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    message = message if isinstance(message, dict) else {}
    output: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        output.append(_message_item(response_id, text))
    for n, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = str(function.get("name"))
        arguments = function.get("arguments")
        output.append(
            _call_item(
                n,
                str(call.get("id") or f"call_{n}"),
                name,
                arguments if isinstance(arguments, str) else json.dumps(arguments),
                name in custom,
            )
        )
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return _response(response_id, chat.get("model"), output, _usage(chat.get("usage")), finish)


def _sse(kind: str, seq: int, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": seq, **payload})
    return f"event: {kind}\ndata: {data}\n\n".encode()


async def _chat_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """The JSON payloads of a chat SSE stream, in order (``[DONE]`` ends it)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        while b"\n\n" in pending.replace(b"\r\n", b"\n"):
            normal = pending.replace(b"\r\n", b"\n")
            block, _, rest = normal.partition(b"\n\n")
            pending = rest
            data = b"\n".join(
                line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")
            )
            if not data:
                continue
            if data == b"[DONE]":
                return
            try:
                yield json.loads(data)
            except ValueError:
                raise ProviderError("chat stream carried an event that is not JSON") from None


async def chat_stream_to_responses(  # noqa: C901
    chunks: AsyncIterator[bytes], custom: frozenset[str]
) -> AsyncIterator[bytes]:
    """A chat completions stream as a Responses event stream.

    Text is passed on as it comes (``response.output_text.delta``); tool calls, whose
    arguments chat streams in pieces, are sent whole once the stream ends, then
    ``response.completed`` with the usage (asked for with ``include_usage``).
    """
    seq = 0

    def event(kind: str, payload: dict[str, Any]) -> bytes:
        nonlocal seq
        seq += 1
        return _sse(kind, seq, payload)

    response_id = "resp_chat"
    model: Any = None
    started = False
    text = ""
    calls: dict[int, dict[str, str]] = {}
    usage: dict[str, Any] | None = None
    finish: Any = None
    async for data in _chat_data(chunks):
        if not isinstance(data, dict):
            continue
        if not started:
            started = True
            response_id = "resp_" + str(data.get("id", "chat"))
            model = data.get("model")
            opening = _response(response_id, model, [], None, None, "in_progress")
            yield event("response.created", {"response": opening})
        if data.get("usage"):
            usage = _usage(data["usage"])
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                if not text:
                    item = {**_message_item(response_id, ""), "status": "in_progress"}
                    item["content"] = []
                    yield event("response.output_item.added", {"output_index": 0, "item": item})
                    part = {"type": "output_text", "text": "", "annotations": []}
                    where = {"output_index": 0, "content_index": 0, "item_id": item["id"]}
                    yield event("response.content_part.added", {**where, "part": part})
                text += piece
                where = {"output_index": 0, "content_index": 0, "item_id": f"msg_{response_id}"}
                yield event("response.output_text.delta", {**where, "delta": piece})
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                index = call.get("index", 0)
                slot = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["name"] = function.get("name") or slot["name"]
                slot["arguments"] += function.get("arguments") or ""
    if not started:
        raise ProviderError("chat stream ended before any event")
    output: list[dict[str, Any]] = []
    if text:
        item = _message_item(response_id, text)
        where = {"output_index": 0, "content_index": 0, "item_id": item["id"]}
        yield event("response.output_text.done", {**where, "text": text})
        yield event("response.content_part.done", {**where, "part": item["content"][0]})
        yield event("response.output_item.done", {"output_index": 0, "item": item})
        output.append(item)
    for n, index in enumerate(sorted(calls)):
        slot = calls[index]
        item = _call_item(n, slot["id"] or f"call_{n}", slot["name"], slot["arguments"], False)
        if slot["name"] in custom:
            item = _call_item(n, slot["id"] or f"call_{n}", slot["name"], slot["arguments"], True)
        at = len(output)
        opening = {**item, "status": "in_progress"}
        opening["input" if item["type"] == "custom_tool_call" else "arguments"] = ""
        yield event("response.output_item.added", {"output_index": at, "item": opening})
        where = {"output_index": at, "item_id": item["id"]}
        if item["type"] == "custom_tool_call":
            yield event("response.custom_tool_call_input.delta", {**where, "delta": item["input"]})
            yield event("response.custom_tool_call_input.done", {**where, "input": item["input"]})
        else:
            args = item["arguments"]
            yield event("response.function_call_arguments.delta", {**where, "delta": args})
            yield event("response.function_call_arguments.done", {**where, "arguments": args})
        yield event("response.output_item.done", {"output_index": at, "item": item})
        output.append(item)
    final = _response(response_id, model, output, usage, finish)
    yield event("response.completed", {"response": final})


class ResponsesOverChat(Provider):
    """Answers Responses calls through a provider's chat completions endpoint.

    Args:
        inner: The provider of the chat-only endpoint (an ``HTTPProvider``).
        serves: The APIs the endpoint itself serves (``openai-chat`` among them).
    """

    def __init__(self, inner: Provider, serves: frozenset[str]) -> None:
        self.inner = inner
        self.serves = serves
        self.apis = serves | {"openai-responses"}

    @override
    def open_trial(self, trial_id: str, task_name: str) -> None:
        self.inner.open_trial(trial_id, task_name)

    @override
    def close_trial(self, trial_id: str) -> None:
        self.inner.close_trial(trial_id)

    @override
    async def aclose(self) -> None:
        await self.inner.aclose()

    @override
    async def send(self, call: ProviderCall) -> ProviderReply:
        if call.api != "openai-responses" or "openai-responses" in self.serves:
            return await self.inner.send(call)
        custom = custom_tools(call.body)
        chat_call = replace(
            call, api="openai-chat", path=CHAT_PATH, body=responses_to_chat(call.body)
        )
        reply = await self.inner.send(chat_call)
        note = {"upstream_api": "openai-chat"}
        if reply.chunks is not None:
            return ProviderReply(
                reply.status,
                "text/event-stream",
                chunks=chat_stream_to_responses(reply.chunks, custom),
                aclose=reply.aclose,
                headers=reply.headers,
                record=note,
            )
        if reply.status >= 400 or reply.body is None:
            # Chat's error shape ({"error": {...}}) is the Responses one: passed on.
            return replace(reply, record=note)
        try:
            parsed = json.loads(reply.body)
        except ValueError:
            raise ProviderError("chat endpoint answered something that is not JSON") from None
        body = json.dumps(chat_to_responses(parsed, custom)).encode()
        return ProviderReply(reply.status, "application/json", body=body, record=note)


__all__ = [
    "ResponsesOverChat",
    "chat_stream_to_responses",
    "chat_to_responses",
    "custom_tools",
    "responses_to_chat",
]

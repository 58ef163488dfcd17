"""Token usage read from provider responses (JSON bodies and server-sent event streams).

A count the provider did not report stays ``None``: missing telemetry is never 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallUsage:
    """Tokens of one model call; ``input_tokens`` includes cached ones."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        """The ``usage`` object of a model_calls.jsonl line."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
        }

    @property
    def total(self) -> int | None:
        """Input plus output, or None when either is unknown."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _openai_chat(usage: dict[str, Any]) -> CallUsage:
    details = usage.get("prompt_tokens_details") or {}
    return CallUsage(
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        _int(details.get("cached_tokens")) if isinstance(details, dict) else None,
    )


def _openai_responses(usage: dict[str, Any]) -> CallUsage:
    details = usage.get("input_tokens_details") or {}
    return CallUsage(
        _int(usage.get("input_tokens")),
        _int(usage.get("output_tokens")),
        _int(details.get("cached_tokens")) if isinstance(details, dict) else None,
    )


def _anthropic(usage: dict[str, Any]) -> CallUsage:
    base = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    created = _int(usage.get("cache_creation_input_tokens"))
    total_in = None if base is None else base + (read or 0) + (created or 0)
    return CallUsage(total_in, _int(usage.get("output_tokens")), read)


def usage_from_body(api: str, body: Any) -> CallUsage | None:
    """Usage of a non-streamed response body, or None when it has none."""
    if not isinstance(body, dict) or not isinstance(body.get("usage"), dict):
        return None
    usage = body["usage"]
    if api == "openai-chat":
        return _openai_chat(usage)
    if api == "openai-responses":
        return _openai_responses(usage)
    return _anthropic(usage)


def sse_payloads(raw: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of an event stream (``[DONE]`` and junk skipped)."""
    payloads: list[Any] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(
            line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")
        )
        if not data or data.strip() == b"[DONE]":
            continue
        try:
            payloads.append(json.loads(data))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return payloads


def usage_from_stream(api: str, payloads: Iterable[Any]) -> CallUsage | None:
    """Usage reported inside a stream's events, or None when no event carried any."""
    found: CallUsage | None = None
    input_tokens = output_tokens = cached = None
    for event in payloads:
        if not isinstance(event, dict):
            continue
        if api == "openai-chat" and isinstance(event.get("usage"), dict):
            found = _openai_chat(event["usage"])
        elif api == "openai-responses":
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                found = _openai_responses(response["usage"])
        elif api == "anthropic-messages":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                start = _anthropic(message["usage"])
                input_tokens, cached = start.input_tokens, start.cached_tokens
                output_tokens = start.output_tokens
            if event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
                output_tokens = _int(event["usage"].get("output_tokens"))
            if input_tokens is not None or output_tokens is not None:
                found = CallUsage(input_tokens, output_tokens, cached)
    return found


class StreamUsage:
    """Usage of a stream, read event by event as it is relayed.

    The recorded copy of a stream is capped, and usage usually comes last: this keeps only
    the events that mention usage, so a long stream still has its usage read.
    """

    def __init__(self, api: str) -> None:
        self.api = api
        self._pending = b""
        self._events: list[Any] = []

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        blocks = (self._pending + data).replace(b"\r\n", b"\n").split(b"\n\n")
        self._pending = blocks.pop()
        for block in blocks:
            if b"usage" in block:
                self._events.extend(sse_payloads(block))

    def usage(self) -> CallUsage | None:
        """Usage reported by the events fed so far (a last unterminated event included)."""
        events = list(self._events)
        if b"usage" in self._pending:
            events.extend(sse_payloads(self._pending))
        return usage_from_stream(self.api, events)

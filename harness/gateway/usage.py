"""Token usage read from provider responses (JSON bodies and server-sent event streams).

A count the provider did not report stays ``None``: missing telemetry is never 0. A stream
whose provider reported nothing (or that was cut before its usage came) gets an estimate
from its text, ceil(chars / 4), marked ``estimated``: the budget must see what it cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

#: A stream event longer than this is not parsed for usage (its bytes count as text).
MAX_EVENT_BYTES = 1 << 20
#: Keys of a request whose strings are the text a model reads.
_REQUEST_TEXT_KEYS = (
    "messages",
    "input",
    "system",
    "instructions",
    "contents",  # Gemini
    "systemInstruction",
)
#: Keys whose strings are names, not text (skipped when counting text).
_NOT_TEXT_KEYS = frozenset({"type", "role", "id"})


@dataclass(frozen=True)
class CallUsage:
    """Tokens of one model call; ``input_tokens`` includes cached ones."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    #: Counted by the gateway from the text (the provider reported none, or not all).
    estimated: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The ``usage`` object of a model_calls.jsonl line (``estimated`` only when true)."""
        usage: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
        }
        if self.estimated:
            usage["estimated"] = True
        return usage

    @property
    def reported(self) -> int:
        """Every token counted, on either side (what a token budget counts)."""
        return (self.input_tokens or 0) + (self.output_tokens or 0)

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


def _gemini(usage: dict[str, Any]) -> CallUsage:
    # Thinking tokens are billed as output, apart from the candidates'.
    out = _int(usage.get("candidatesTokenCount"))
    thoughts = _int(usage.get("thoughtsTokenCount"))
    if out is not None or thoughts is not None:
        out = (out or 0) + (thoughts or 0)
    return CallUsage(
        _int(usage.get("promptTokenCount")), out, _int(usage.get("cachedContentTokenCount"))
    )


def usage_from_body(api: str, body: Any) -> CallUsage | None:
    """Usage of a non-streamed response body, or None when it has none."""
    if api == "gemini":
        metadata = body.get("usageMetadata") if isinstance(body, dict) else None
        return _gemini(metadata) if isinstance(metadata, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("usage"), dict):
        return None
    usage = body["usage"]
    if api == "openai-chat":
        return _openai_chat(usage)
    if api == "openai-responses":
        return _openai_responses(usage)
    return _anthropic(usage)


def estimate_tokens(chars: int) -> int:
    """ceil(chars / 4): the estimate of the faux provider and of a stream without usage."""
    return math.ceil(chars / 4)


def text_chars(value: Any) -> int:
    """Characters of every string inside ``value`` (message texts, tool results, ...).

    Walked without recursion: a body nested as deep as the JSON parser allows is fine.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(v for k, v in item.items() if k not in _NOT_TEXT_KEYS)
        elif isinstance(item, list):
            stack.extend(item)
    return total


def request_chars(body: Mapping[str, Any]) -> int:
    """Characters of the text a request gives the model."""
    return sum(text_chars(body.get(key)) for key in _REQUEST_TEXT_KEYS)


def strict_json(data: bytes | str) -> Any:
    """``data`` parsed as strict JSON (no NaN or Infinity).

    Raises:
        ValueError: Not JSON, not UTF-8, a number too long, or nested past the parser.
    """
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def sse_data(block: bytes) -> bytes:
    """The ``data:`` lines of one event, joined (SSE)."""
    return b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))


def sse_payloads(raw: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of an event stream (``[DONE]`` and junk skipped)."""
    payloads: list[Any] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = sse_data(block)
        if not data or data.strip() == b"[DONE]":
            continue
        try:
            payloads.append(strict_json(data))
        except ValueError:
            continue
    return payloads


def _delta_chars(api: str, event: Any) -> int:
    """Characters of generated text one stream event carries."""
    if not isinstance(event, dict):
        return 0
    if api == "openai-chat":
        choices = event.get("choices")
        deltas = (
            [c.get("delta") for c in choices if isinstance(c, dict)]
            if isinstance(choices, list)
            else []
        )
        return sum(text_chars(d) for d in deltas if isinstance(d, dict))
    if api == "openai-responses":
        delta = event.get("delta")
        return len(delta) if isinstance(delta, str) else 0
    if api == "gemini":
        candidates = event.get("candidates")
        return text_chars(candidates) if isinstance(candidates, list) else 0
    if event.get("type") == "content_block_delta":
        return text_chars(event.get("delta"))
    if event.get("type") == "content_block_start":
        return text_chars(event.get("content_block"))
    return 0


def _is_final(api: str, kind: Any) -> bool:
    """Whether an event of ``kind`` that reports usage reports the stream's final usage."""
    if api == "openai-chat":
        return True  # the one usage chunk, after the last choice
    if api == "openai-responses":
        return bool(kind in ("response.completed", "response.incomplete", "response.failed"))
    return bool(kind == "message_delta")


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
        elif api == "gemini" and isinstance(event.get("usageMetadata"), dict):
            found = _gemini(event["usageMetadata"])
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
    """Usage of a stream, read event by event as it is relayed, in bounded memory.

    The recorded copy of a stream is capped, and usage usually comes last: this keeps only
    the events that reported usage (the last of each kind), so a long stream still has its
    usage read, and counts the generated text of every event for the estimate.

    Args:
        api: The stream's API.
        input_chars: Characters of the request's text (the input estimate).
    """

    def __init__(self, api: str, input_chars: int = 0) -> None:
        self.api = api
        self.input_chars = input_chars
        self.output_chars = 0
        self._pending = b""
        self._oversized = False
        #: The event that reports the stream's final usage has come.
        self._final_seen = False
        #: The events that reported usage (at most one per kind, the last).
        self._kept: dict[str, Any] = {}

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        blocks = (self._pending + data).replace(b"\r\n", b"\n").split(b"\n\n")
        self._pending = blocks.pop()
        for block in blocks:
            self._event(block)
        if len(self._pending) > MAX_EVENT_BYTES:
            # Never buffered without end: an event this long is counted as text, unparsed.
            self.output_chars += len(self._pending)
            self._pending = b""
            self._oversized = True

    def _event(self, block: bytes) -> None:
        if self._oversized:  # the tail of an event already counted
            self._oversized = False
            self.output_chars += len(block)
            return
        data = sse_data(block)
        if not data or data.strip() == b"[DONE]":
            return
        try:
            event = strict_json(data)
        except ValueError:
            return
        self.output_chars += _delta_chars(self.api, event)
        if b"usage" in block and usage_from_stream(self.api, [event]) is not None:
            kind = event.get("type") if isinstance(event, dict) else None
            self._kept[kind if isinstance(kind, str) else ""] = event
            self._final_seen = self._final_seen or _is_final(self.api, kind)

    @property
    def final_seen(self) -> bool:
        """Whether the event reporting the stream's final usage has come (generation is over)."""
        return self._final_seen

    def usage(self) -> CallUsage | None:
        """Usage reported by the events fed so far (a last unterminated event included)."""
        events = list(self._kept.values())
        if b"usage" in self._pending:
            events.extend(sse_payloads(self._pending))
        return usage_from_stream(self.api, events)

    def estimate(self) -> CallUsage:
        """The gateway's own count, from the request's and the stream's text."""
        return CallUsage(
            estimate_tokens(self.input_chars),
            estimate_tokens(self.output_chars),
            None,
            estimated=True,
        )

    def final(self, complete: bool) -> CallUsage | None:
        """What the record and the budget count for this stream.

        A complete stream's reported usage is taken as it is, and so is a stream's whose
        final usage event came; a stream that reported none, or is cut (or still running,
        ``complete`` False) before its final usage came, counts at least its estimate.
        None only for a stream that reported nothing and had no text either way.
        """
        reported = self.usage()
        if (
            (complete or self._final_seen)
            and reported is not None
            and (reported.input_tokens is not None or reported.output_tokens is not None)
        ):
            return reported
        if reported is None and self.input_chars == 0 and self.output_chars == 0:
            return None
        estimate = self.estimate()
        if reported is None:
            return estimate
        input_tokens = max(reported.input_tokens or 0, estimate.input_tokens or 0)
        output_tokens = max(reported.output_tokens or 0, estimate.output_tokens or 0)
        merged = replace(reported, input_tokens=input_tokens, output_tokens=output_tokens)
        changed = (input_tokens, output_tokens) != (reported.input_tokens, reported.output_tokens)
        return replace(merged, estimated=changed)

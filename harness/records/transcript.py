"""The trial transcript: ``transcript.jsonl`` derived from the trial's evidence.

``transcript.jsonl`` (docs/model-access.md §4) is one event per line, derived from
``session.jsonl`` (what the built-in agent saw and did, §3) and ``model_calls.jsonl`` (what
the model gateway saw, §2):

- ``message``: a user message, or an assistant message that has text;
- ``tool_call``: one per tool call of an assistant message;
- ``tool_result``: one per tool result (``error`` only on a failed one);
- ``model_call``: one per line of ``model_calls.jsonl``;
- ``parse_error``: a line of either file that is not a JSON object (``file``, ``line``).

Order: session events keep the session's order; model calls (sorted by ``started_at``) are
merged in by timestamp, after every session event at the same instant or earlier. An event
without a usable timestamp never moves a model call ahead of it; a model call without one
goes after every session event. ``parse_error`` events come last, in file and line order.

Reading never raises on bad content: evidence must not be lost because one line is bad. A
torn last line (no trailing newline, not parseable: a writer died mid-line) is dropped with
a log warning; any other malformed line becomes a ``parse_error`` event.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.records.atomic import write_bytes_atomic
from harness.records.layout import MODEL_CALLS_FILENAME, SESSION_FILENAME, TRANSCRIPT_FILENAME
from harness.records.model import Usage

__all__ = [
    "MODEL_CALLS_FILENAME",
    "SESSION_FILENAME",
    "TRANSCRIPT_FILENAME",
    "JsonlRead",
    "ModelCallUsage",
    "derive_transcript",
    "parse_timestamp",
    "read_jsonl",
    "usage_from_model_calls",
    "write_transcript",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Reading JSONL evidence
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonlRead:
    """What :func:`read_jsonl` found in one file.

    Attributes:
        lines: The JSON objects, in file order.
        errors: ``parse_error`` events (``{"type", "file", "line"}``) for malformed lines.
        torn_line: 1-based number of a torn last line that was dropped, if any.
        exists: Whether the file existed.
    """

    lines: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    torn_line: int | None = None
    exists: bool = False


def _reject_constant(name: str) -> Any:
    """Refuse ``NaN``/``Infinity``: they are not JSON, and could not be written back."""
    raise ValueError(f"non-JSON number {name}")


def _finite_float(text: str) -> float:
    """Parse a JSON number, refusing one that overflows to infinity (e.g. ``1e999``)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _parse_object(raw: bytes) -> dict[str, Any] | None:
    """One line as a JSON object, or None when it is not one."""
    try:
        value = json.loads(
            raw.decode("utf-8", errors="replace"),
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except ValueError:  # JSONDecodeError is a ValueError; so is a rejected constant.
        return None
    return value if isinstance(value, dict) else None


def read_jsonl(path: Path) -> JsonlRead:
    """Read a JSONL evidence file without ever raising on its content.

    Blank lines are skipped. The last non-blank line, when it has no trailing newline and
    does not parse, is torn (dropped, logged). Any other line that is not a JSON object is
    skipped and reported as a ``parse_error`` event naming the file (by name) and line.

    Args:
        path: The file; a missing file reads as empty.

    Returns:
        The objects, the parse errors, and the torn line number if any.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JsonlRead()
    except OSError as exc:
        logger.warning("%s: cannot read: %s", path, exc)
        return JsonlRead(errors=[_parse_error(path, 0)], exists=True)
    pieces = data.split(b"\n")
    unterminated = pieces[-1] != b""
    if not unterminated:
        pieces.pop()
    last_index = max((i for i, raw in enumerate(pieces) if raw.strip()), default=-1)
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    torn: int | None = None
    for index, raw in enumerate(pieces):
        if not raw.strip():
            continue
        value = _parse_object(raw)
        if value is not None:
            lines.append(value)
        elif index == last_index and unterminated:
            torn = index + 1
            logger.warning("%s:%d: torn last line (%d bytes) ignored", path, torn, len(raw))
        else:
            logger.warning("%s:%d: not a JSON object; skipped", path, index + 1)
            errors.append(_parse_error(path, index + 1))
    return JsonlRead(lines=lines, errors=errors, torn_line=torn, exists=True)


def _parse_error(path: Path, line: int) -> dict[str, Any]:
    return {"type": "parse_error", "file": path.name, "line": line}


# --------------------------------------------------------------------------------------------
# Deriving events
# --------------------------------------------------------------------------------------------


def parse_timestamp(value: Any) -> datetime | None:
    """Parse an ISO 8601 timestamp (``Z`` allowed; naive means UTC).

    Args:
        value: Anything; only strings can parse.

    Returns:
        An aware UTC datetime, or None when ``value`` is not an ISO 8601 timestamp.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def content_text(value: Any) -> str:
    """Message or tool-result content as text (non-string content is rendered as JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _session_events(line: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The transcript events of one ``session.jsonl`` line (none for most line types)."""
    kind = line.get("type")
    timestamp = line.get("timestamp")
    if kind == "message":
        role = line.get("role")
        content = content_text(line.get("content"))
        if role == "user":
            return [{"type": "message", "role": "user", "content": content, "timestamp": timestamp}]
        if role != "assistant":
            return []
        events: list[dict[str, Any]] = []
        if content.strip():
            events.append(
                {"type": "message", "role": "assistant", "content": content, "timestamp": timestamp}
            )
        calls = line.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, Mapping):
                continue
            events.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                    "timestamp": timestamp,
                }
            )
        return events
    if kind == "tool_result":
        content = content_text(line.get("content"))
        event: dict[str, Any] = {
            "type": "tool_result",
            "tool_call_id": line.get("tool_call_id"),
            "name": line.get("name"),
            "content": content,
        }
        if line.get("is_error") is True:
            event["error"] = {"message": content or "Tool failed"}
        event["timestamp"] = timestamp
        return [event]
    return []


def _model_call_event(line: Mapping[str, Any]) -> dict[str, Any]:
    """The ``model_call`` event of one ``model_calls.jsonl`` line."""
    return {
        "type": "model_call",
        "seq": line.get("seq"),
        "status": line.get("status"),
        "outcome": line.get("outcome"),
        "latency_ms": line.get("latency_ms"),
        "usage": line.get("usage"),
        "cost_usd": line.get("cost_usd"),
        "timestamp": line.get("started_at"),
    }


def derive_transcript(
    session_lines: Iterable[Mapping[str, Any]],
    model_call_lines: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Derive the §4 transcript events from parsed session and model-call lines.

    Session events keep the session's order; model-call events are sorted by ``started_at``
    (stable: file order on ties) and merged in by timestamp, after every session event at
    the same instant or earlier. Lines that are not objects, or of unknown type, are
    skipped; missing fields come out as ``None``.

    Args:
        session_lines: The objects of ``session.jsonl``, in file order.
        model_call_lines: The objects of ``model_calls.jsonl``, in file order.

    Returns:
        The events, in order.
    """
    session = [
        event
        for line in session_lines
        if isinstance(line, Mapping)
        for event in _session_events(line)
    ]
    calls = [_model_call_event(line) for line in model_call_lines if isinstance(line, Mapping)]
    far_future = datetime.max.replace(tzinfo=UTC)
    calls.sort(key=lambda event: parse_timestamp(event["timestamp"]) or far_future)

    merged: list[dict[str, Any]] = []
    index = 0
    for event in session:
        when = parse_timestamp(event["timestamp"])
        if when is not None:
            while index < len(calls):
                call_when = parse_timestamp(calls[index]["timestamp"])
                if call_when is None or call_when >= when:
                    break
                merged.append(calls[index])
                index += 1
        merged.append(event)
    merged.extend(calls[index:])
    return merged


# --------------------------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCallUsage:
    """Usage totals over ``model_calls.jsonl``. ``None`` means no call reported it.

    Attributes:
        input_tokens: Sum of the reported input tokens.
        output_tokens: Sum of the reported output tokens.
        cached_tokens: Sum of the reported cached (prompt-cache hit) tokens.
        cost_usd: Sum of the reported costs.
        calls: Number of requests the gateway saw (every line, whatever its outcome).
        refused_calls: How many of them it refused (``outcome`` ``refused``).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    calls: int = 0
    refused_calls: int = 0

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens, or None unless both are known."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    def to_usage(self) -> Usage:
        """As a trial record's :class:`~harness.records.Usage`.

        Returns:
            The usage model.
        """
        return Usage.model_validate(
            {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens,
                "cost_usd": self.cost_usd,
                "calls": self.calls,
                "cached_tokens": self.cached_tokens,
                "refused_calls": self.refused_calls,
            }
        )


def _add_int(total: int | None, value: Any) -> int | None:
    """Add a reported count; non-integers (null, missing, junk) are not reports."""
    if isinstance(value, bool) or not isinstance(value, int):
        return total
    return value if total is None else total + value


def usage_from_model_calls(lines: Iterable[Mapping[str, Any]]) -> ModelCallUsage:
    """Sum the usage and cost over the lines of ``model_calls.jsonl``.

    A total is ``None`` when no call reported that field (never a made-up 0); otherwise it
    is the sum over the calls that did report it.

    Args:
        lines: The parsed lines.

    Returns:
        The totals and the number of calls.
    """
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost: float | None = None
    # Defensive: a caller may hand over raw JSON values that are not objects.
    objects = [line for line in lines if isinstance(line, Mapping)]
    for line in objects:
        usage = line.get("usage")
        if isinstance(usage, Mapping):
            input_tokens = _add_int(input_tokens, usage.get("input_tokens"))
            output_tokens = _add_int(output_tokens, usage.get("output_tokens"))
            cached_tokens = _add_int(cached_tokens, usage.get("cached_tokens"))
        value = line.get("cost_usd")
        if isinstance(value, int | float) and not isinstance(value, bool):
            cost = float(value) if cost is None else cost + float(value)
    return ModelCallUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        cost_usd=cost,
        calls=len(objects),
        refused_calls=sum(1 for line in objects if line.get("outcome") == "refused"),
    )


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def write_transcript(evidence_dir: Path) -> Path | None:
    """Derive ``transcript.jsonl`` from a trial's evidence and write it atomically.

    Reads ``session.jsonl`` and ``model_calls.jsonl`` (either may be missing) with
    :func:`read_jsonl`, derives the events with :func:`derive_transcript` and appends one
    ``parse_error`` event per malformed line. Bad content never raises.

    Args:
        evidence_dir: The trial's evidence dir (``<run>/trials/<trial-id>``).

    Returns:
        The transcript's path, or None when neither source file exists (nothing written).

    Raises:
        OSError: If the transcript cannot be written.
    """
    evidence_dir = Path(evidence_dir)
    session = read_jsonl(evidence_dir / SESSION_FILENAME)
    calls = read_jsonl(evidence_dir / MODEL_CALLS_FILENAME)
    if not session.exists and not calls.exists:
        return None
    events = derive_transcript(session.lines, calls.lines)
    events.extend(session.errors)
    events.extend(calls.errors)
    text = "".join(
        json.dumps(event, ensure_ascii=False, allow_nan=False) + "\n" for event in events
    )
    target = evidence_dir / TRANSCRIPT_FILENAME
    write_bytes_atomic(target, text.encode("utf-8"))
    return target

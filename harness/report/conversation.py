"""A trial's ``session.jsonl`` as a conversation: turns, tool calls with their results, usage.

Any agent that leaves a ``session.jsonl`` (the builtin agents, an installed CLI whose own
log was converted into it) gets this view on its trial page: the user's message, each
assistant turn with its text, stop reason and usage, the tool calls it made (name and
arguments) each paired with its result, and how the session ended. The session is the
agent's: the lines are read beneath the evidence dir, bounded (at most
``Limits.events`` entries, each string clipped to ``Limits.string``) and never
interpreted; the page draws every string as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.records.layout import SESSION_FILENAME
from harness.records.transcript import content_text, read_jsonl
from harness.report.clip import Limits, clip_deep
from sandbox.beneath import is_file_beneath

__all__ = ["conversation"]


def _usage(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    usage = {k: raw.get(k) for k in ("input_tokens", "output_tokens") if raw.get(k) is not None}
    return usage or None


def _entry(line: Mapping[str, Any], calls: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    kind = line.get("type")
    if kind == "session":
        return {
            "kind": "session",
            "agent": line.get("agent"),
            "model": line.get("model"),
            "cli_version": line.get("cli_version"),
        }
    if kind == "message" and line.get("role") == "user":
        return {"kind": "user", "content": content_text(line.get("content"))}
    if kind == "message" and line.get("role") == "assistant":
        entry: dict[str, Any] = {
            "kind": "assistant",
            "content": content_text(line.get("content")),
            "stop_reason": line.get("stop_reason"),
            "usage": _usage(line.get("usage")),
            "tool_calls": [],
        }
        raw_calls = line.get("tool_calls")
        for call in raw_calls if isinstance(raw_calls, list) else []:
            if not isinstance(call, Mapping):
                continue
            shown = {
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("arguments"),
                "result": None,
            }
            entry["tool_calls"].append(shown)
            if isinstance(call.get("id"), str):
                calls[call["id"]] = shown
        return entry
    if kind == "tool_result":
        result = {
            "content": content_text(line.get("content")),
            "is_error": line.get("is_error") is True,
        }
        call_id = line.get("tool_call_id")
        paired = calls.get(call_id) if isinstance(call_id, str) else None
        if paired is not None and paired["result"] is None:
            paired["result"] = result
            return None
        # A result of no call the session shows: kept on its own, never dropped.
        return {"kind": "tool_result", "tool_call_id": call_id, "name": line.get("name"), **result}
    if kind == "end":
        return {
            "kind": "end",
            "ok": line.get("ok"),
            "error": line.get("error"),
            "turns": line.get("turns"),
        }
    return None


def conversation(directory: Path, limits: Limits) -> dict[str, Any]:
    """The conversation view of an attempt's ``session.jsonl``.

    Args:
        directory: The attempt's evidence dir.
        limits: Report limits.

    Returns:
        ``exists`` (a session was kept), ``entries`` (clipped), ``omitted`` (entries left
        out), ``unreadable`` (lines that were not JSON objects) and ``usage`` (the sums of
        the assistant turns' usage: what the agent's own log says).
    """
    if not is_file_beneath(directory, SESSION_FILENAME):
        return {"exists": False, "entries": [], "omitted": 0, "unreadable": 0, "usage": None}
    read = read_jsonl(directory / SESSION_FILENAME)
    calls: dict[str, dict[str, Any]] = {}
    entries: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    for line in read.lines:
        entry = _entry(line, calls)
        if entry is None:
            continue
        for key, value in (entry.get("usage") or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
        entries.append(entry)
    return {
        "exists": True,
        "entries": [clip_deep(entry, limits.string) for entry in entries[: limits.events]],
        "omitted": max(len(entries) - limits.events, 0),
        "unreadable": len(read.errors),
        "usage": totals or None,
    }

"""Why a sandbox agent failed, as data: its exit code, its last error line, a typed cause.

A CLI that exits non-zero ends the trial ``agent_error``; the record's error then carries
``exit_code``, ``last_error`` (the CLI's own last error, one line, capped) and ``cause``,
one of :data:`~harness.errors.AGENT_ERROR_CAUSES`:

- ``authentication``: the model's API refused the key (HTTP 401, "invalid API key").
- ``context_window``: the conversation outgrew the model's context ("prompt is too long",
  ``context_length_exceeded``).
- ``rate_limit``: the API asked it to slow down (HTTP 429, "rate limit", overloaded).
- ``refusal``: the model declined to answer (a ``refusal`` or ``content_filter`` stop, a
  usage-policy answer).
- ``budget_spent``: the trial's own model budget (``[budget]``) is spent: the gateway
  refused the call.
- ``unknown``: none of these.

These are the classes Harbor's agents sort provider errors into (authentication, context
length exceeded, rate limit, content refusal, budget/cost limit). The gateway's own record
of the trial's last model call is asked first (``cause_source = "gateway"``): it saw the
status and whether the budget refused the call, whatever the CLI made of it; otherwise the
CLI's last error line is read (``cause_source = "log"``). ``retry.on_causes`` selects
attempts to retry by cause (docs/errors.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import AGENT_ERROR_CAUSES

__all__ = ["AGENT_ERROR_CAUSES", "classify", "failure_fields", "last_gateway_call", "one_line"]

#: The longest ``last_error`` kept in a record (the CLI's text is the agent's: bounded).
LAST_ERROR_CHARS = 2000
#: How much of ``model_calls.jsonl``'s end is read to find the last call.
CALLS_TAIL_BYTES = 256 << 10

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("budget_spent", re.compile(r"budget(_exceeded| spent|\b)", re.I)),
    (
        "context_window",
        re.compile(
            r"context[ _-]?(window|length)|prompt is too long|input is too long|"
            r"maximum context|too many (input )?tokens|exceeds? the model'?s",
            re.I,
        ),
    ),
    (
        "authentication",
        re.compile(
            r"\b401\b|authenticat|unauthori[sz]ed|invalid[ _-]?(x-)?api[ _-]?key|"
            r"incorrect api key|missing (api )?(key|token)|invalid (bearer )?token|revoked token",
            re.I,
        ),
    ),
    (
        "rate_limit",
        re.compile(
            r"\b429\b|rate[ _-]?limit|too many requests|overloaded|resource_exhausted", re.I
        ),
    ),
    ("refusal", re.compile(r"refus(al|ed)|usage polic|content[ _-]?filter", re.I)),
)


def one_line(text: str | None) -> str | None:
    """The last non-empty line of ``text``, capped at :data:`LAST_ERROR_CHARS`."""
    if text is None:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= LAST_ERROR_CHARS else line[:LAST_ERROR_CHARS] + "…"


def last_gateway_call(model_calls: Path) -> dict[str, Any] | None:
    """The last line of a trial's ``model_calls.jsonl`` (None: no call, or unreadable)."""
    try:
        with model_calls.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(size - CALLS_TAIL_BYTES, 0))
            tail = fh.read()
    except OSError:
        return None
    for raw in reversed(tail.splitlines()):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            return line
    return None


def _gateway_cause(call: Mapping[str, Any] | None) -> str | None:
    if call is None:
        return None
    status = call.get("status")
    if call.get("outcome") == "budget":
        return "budget_spent"
    if status == 401 or (status == 403 and call.get("outcome") != "refused"):
        return "authentication"
    if status == 429:
        return "rate_limit"
    return None


def _text_cause(texts: Iterable[str | None]) -> str | None:
    for text in texts:
        if not text:
            continue
        for cause, pattern in _PATTERNS:
            if pattern.search(text):
                return cause
    return None


def classify(
    texts: Sequence[str | None], last_call: Mapping[str, Any] | None
) -> tuple[str, str | None]:
    """The cause of a failure and what told it.

    Args:
        texts: The CLI's own error texts, most telling first (its last error line...).
        last_call: The gateway's record of the trial's last model call, if any.

    Returns:
        ``(cause, source)``: the source is ``gateway``, ``log`` or None (``unknown``).
    """
    cause = _gateway_cause(last_call)
    if cause is not None:
        return cause, "gateway"
    cause = _text_cause(texts)
    if cause is not None:
        return cause, "log"
    return "unknown", None


def failure_fields(
    exit_code: int | None,
    last_error: str | None,
    model_calls: Path | None,
    *,
    also: Sequence[str | None] = (),
) -> dict[str, Any]:
    """The record's facts about a failed agent run (``errors[]`` fields).

    Args:
        exit_code: The CLI's exit status.
        last_error: The CLI's own last error (one line is kept).
        model_calls: The trial's ``model_calls.jsonl`` (the gateway's record), if any.
        also: Further texts the cause may be read from (its stderr's last line...).
    """
    line = one_line(last_error)
    call = last_gateway_call(model_calls) if model_calls is not None else None
    cause, source = classify([line, *also], call)
    fields: dict[str, Any] = {"exit_code": exit_code, "last_error": line, "cause": cause}
    if source is not None:
        fields["cause_source"] = source
    return fields

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
status, whether the budget refused the call and the error the provider (or a faux script)
answered, whatever the CLI made of it; otherwise the CLI's last error line is read
(``cause_source = "log"``). ``retry.on_causes`` selects attempts to retry by cause
(docs/errors.md).

Some CLIs exit 0 after a provider error (aider prints the error and ends its one-message
run): :func:`gave_up_on` finds such a run from the gateway's record, whose last model call
then failed, so that it ends ``agent_error`` with a cause like one that exits non-zero.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import AGENT_ERROR_CAUSES

__all__ = [
    "AGENT_ERROR_CAUSES",
    "FAILED_OUTCOMES",
    "classify",
    "failure_fields",
    "gave_up_on",
    "last_model_call",
    "one_line",
    "recorded_error",
]

#: The longest ``last_error`` kept in a record (the CLI's text is the agent's: bounded).
LAST_ERROR_CHARS = 2000
#: How much of ``model_calls.jsonl``'s end is read to find the last call.
CALLS_TAIL_BYTES = 256 << 10
#: A model call's ``outcome`` in the gateway's record when it got no answer the CLI could
#: use: the provider's (or a faux script's) error status, no answer at all (``error``: the
#: provider unreachable, a faux script used up), the trial's budget spent. ``refused`` is
#: not one: the gateway refuses requests a CLI makes on the side (telemetry, a host or
#: path it does not serve), and a model call's bad token is refused before any provider.
FAILED_OUTCOMES = ("upstream_error", "error", "budget")

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("budget_spent", re.compile(r"budget(_exceeded| spent|\b)", re.I)),
    (
        "context_window",
        re.compile(
            r"context[ _-]?(window|length)|prompt is too long|input is too long|"
            r"maximum context|too many (input )?tokens|exceeds? the model'?s|"
            r"input token count .*exceeds",
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


def last_model_call(model_calls: Path) -> dict[str, Any] | None:
    """The last model call in a trial's ``model_calls.jsonl`` (None: none, or unreadable).

    Only lines of a model endpoint count (their ``api`` is set): a side request a CLI
    makes after its last call (a token count, a models list, a refused telemetry post)
    says nothing about how the model answered.
    """
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
        if isinstance(line, dict) and line.get("api"):
            return line
    return None


def _error_texts(call: Mapping[str, Any]) -> list[str]:
    """The recorded answer's error texts: its message first, then its type or status."""
    response = call.get("response")
    error = response.get("error") if isinstance(response, dict) else None
    if isinstance(error, dict):
        # OpenAI's message, type and code; Anthropic's message and type; Gemini's message
        # and status name (its code is the HTTP status).
        keys = ("message", "type", "code", "status")
        return [str(error[k]) for k in keys if isinstance(error.get(k), str) and error[k]]
    return [error] if isinstance(error, str) and error else []


def recorded_error(call: Mapping[str, Any]) -> str | None:
    """The error a model call was answered with, as the gateway recorded it (one line).

    The provider's (or a faux script's) error message from the recorded response, in any
    API's shape, else the gateway's ``reason`` (a faux script used up, a provider it could
    not reach). None when the record holds neither.
    """
    texts = _error_texts(call)
    if texts:
        return one_line(texts[0])
    reason = call.get("reason")
    return one_line(reason) if isinstance(reason, str) else None


def gave_up_on(model_calls: Path) -> dict[str, Any] | None:
    """The trial's last model call if it failed (:data:`FAILED_OUTCOMES`), else None.

    A CLI that exited 0 with its last model call failed ended its run on a provider's
    error: nothing the model said came after it.
    """
    call = last_model_call(model_calls)
    if call is None or call.get("outcome") not in FAILED_OUTCOMES:
        return None
    return call


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
    if call.get("outcome") == "upstream_error":
        # The provider's own words (a 400 "prompt is too long", a "content_filter"): read
        # only from its answer, never from the gateway's reasons ("connection refused").
        return _text_cause(_error_texts(call))
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
    call = last_model_call(model_calls) if model_calls is not None else None
    cause, source = classify([line, *also], call)
    fields: dict[str, Any] = {"exit_code": exit_code, "last_error": line, "cause": cause}
    if source is not None:
        fields["cause_source"] = source
    return fields

"""Whose usage a record holds: the gateway's count, with the agent's own where they differ.

An installed CLI logs its own token counts (Claude Code's ``usage`` of each message, Codex's
``turn.completed``); they arrive in ``session.jsonl`` as each assistant message's ``usage``.
The gateway counted every call the trial made, whatever the CLI logged, retried or hid:
its count is the record's ``usage``, and ``usage.source`` says so (``"gateway"``). Where
the CLI's log adds up to other figures, they are kept beside it as ``usage.agent_log``
(``input_tokens``, ``output_tokens``) so the disagreement is visible, never silently
resolved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.records import Usage
from harness.records.layout import SESSION_FILENAME

__all__ = ["SESSION_USAGE_BYTES", "agent_logged_usage", "with_usage_source"]

#: The most of ``session.jsonl`` read for its usage (the agent wrote it: bounded).
SESSION_USAGE_BYTES = 64 << 20


def agent_logged_usage(session: Path) -> dict[str, int] | None:
    """The sums of the assistant messages' ``usage`` in ``session`` (None: none logged)."""
    try:
        if not session.is_file() or session.is_symlink():
            return None
        with session.open("rb") as fh:
            data = fh.read(SESSION_USAGE_BYTES)
    except OSError:
        return None
    totals: dict[str, int] = {}
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("type") != "message":
            continue
        usage = line.get("usage")
        if not isinstance(usage, dict):
            continue
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                totals[key] = totals.get(key, 0) + value
    return totals or None


def with_usage_source(usage: Usage, evidence: Path) -> Usage:
    """``usage`` (the gateway's) marked as such, with the agent's log where it disagrees.

    Args:
        usage: The gateway's totals for the trial (all None when it measured nothing).
        evidence: The trial's evidence dir (its ``session.jsonl``).

    Returns:
        The record's usage.
    """
    if usage.calls is None:
        return usage  # no gateway: nothing measured, nothing to prefer
    extra: dict[str, Any] = {"source": "gateway"}
    logged = agent_logged_usage(evidence / SESSION_FILENAME)
    if logged is not None:
        gateway = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
        if any(logged.get(key) != gateway[key] for key in logged):
            extra["agent_log"] = logged
    return usage.model_copy(update=extra)

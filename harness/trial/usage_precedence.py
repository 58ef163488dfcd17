"""Whose usage a record holds: the gateway's count, with the agent's own where they differ.

An installed CLI logs its own token counts, and its converted log (``session.jsonl``)
carries them one of two ways: on each assistant ``message`` line (Claude Code's stream-json,
mini-swe-agent's trajectory, the built-in agent) or only as the run's total on its ``end``
line (Codex's ``turn.completed``, Gemini CLI's ``result`` stats, OpenCode's ``step_finish``
parts summed). Aider logs none. The gateway counted every call the trial made, whatever the
CLI logged, retried or hid: its count is the record's ``usage``, and ``usage.source`` says
so (``"gateway"``). Where the CLI's log adds up to other figures, they are kept beside it
as ``usage.agent_log`` (``input_tokens``, ``output_tokens``) so the disagreement is
visible, never silently resolved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.records import Usage
from harness.records.layout import SESSION_FILENAME

__all__ = ["SESSION_USAGE_BYTES", "USAGE_KEYS", "agent_logged_usage", "with_usage_source"]

#: The most of ``session.jsonl`` read for its usage (the agent wrote it: bounded).
SESSION_USAGE_BYTES = 64 << 20
#: The counts compared with the gateway's.
USAGE_KEYS = ("input_tokens", "output_tokens")


def _counts(line: dict[str, Any]) -> dict[str, int]:
    """The token counts of one session line's ``usage`` (absent, null or bogus: none)."""
    usage = line.get("usage")
    if not isinstance(usage, dict):
        return {}
    counts: dict[str, int] = {}
    for key in USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            counts[key] = value
    return counts


def _add(totals: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        totals[key] = totals.get(key, 0) + value


def agent_logged_usage(session: Path) -> dict[str, int] | None:
    """What the CLI's converted log says the trial used (None: it logged no usage).

    Each run of the CLI in ``session`` (a multi-step task has one per step, each closed by
    its ``end`` line) counts once: the sum of its ``message`` lines' usage where they carry
    any, else its ``end`` line's. Never both: where a CLI logged both, the end's total
    would count the messages' tokens a second time.

    Args:
        session: The trial's ``session.jsonl`` (a link is not followed).
    """
    try:
        if not session.is_file() or session.is_symlink():
            return None
        with session.open("rb") as fh:
            data = fh.read(SESSION_USAGE_BYTES)
    except OSError:
        return None
    totals: dict[str, int] = {}
    run: dict[str, int] = {}  # the messages' usage of the run not yet ended
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        if line.get("type") == "message":
            _add(run, _counts(line))
        elif line.get("type") == "end":
            _add(totals, run or _counts(line))
            run = {}
    _add(totals, run)  # a run that never logged its end (killed, timed out)
    return totals or None


def with_usage_source(usage: Usage, evidence: Path) -> Usage:
    """``usage`` (the gateway's) marked as such, with the agent's log where it disagrees.

    Args:
        usage: The gateway's totals for the trial (all None when it measured nothing).
        evidence: The trial's evidence dir (its ``session.jsonl``).

    Returns:
        The record's usage: the gateway's counts, ``source = "gateway"``, and the log's
        counts as ``agent_log`` when any of them differs.
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

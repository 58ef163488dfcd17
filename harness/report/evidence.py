"""A trial's page data: its record and the evidence of each of its attempts.

The evidence of an attempt is its directory under the run dir (``trials/<id>`` for the
final attempt, ``attempts/<id>/<n>`` for earlier ones): the transcript (``transcript.jsonl``,
or derived from ``session.jsonl`` and ``model_calls.jsonl`` when it was not written), the
model calls, the verifier's output, the agent's logs and the workspace it left. All of it
is agent-controlled, and the run dir itself may be forged: every file is opened beneath the
run dir by directory fd without following a link at any component, bounded by
:class:`~harness.report.clip.Limits`, and never interpreted.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from harness.records import TrialRecord
from harness.records.layout import (
    MODEL_CALLS_FILENAME,
    SESSION_FILENAME,
    TRANSCRIPT_FILENAME,
    VERIFIER_DIRNAME,
    trial_evidence_dir,
)
from harness.records.transcript import JsonlRead, derive_transcript, read_jsonl
from harness.records.workspace import read_manifest
from harness.report.changes import WORKSPACE_DIRNAME, agent_changes
from harness.report.clip import Limits, clip_deep, clip_text, read_text_capped
from harness.report.conversation import conversation
from harness.report.rundata import evidence_path
from sandbox.beneath import is_dir_beneath, is_file_beneath, walk_beneath

__all__ = ["VERIFIER_DIRNAME", "attempt_evidence", "trial_detail"]


_STRUCTURED = {TRANSCRIPT_FILENAME, SESSION_FILENAME, MODEL_CALLS_FILENAME}


def _jsonl(directory: Path, name: str) -> JsonlRead:
    """One of the attempt's JSONL files (a link, or one reached through a link: absent)."""
    if not is_file_beneath(directory, name):
        return JsonlRead()
    return read_jsonl(directory / name)


def _transcript(directory: Path, limits: Limits) -> dict[str, Any]:
    """The attempt's transcript events (read, or derived when the file is missing)."""
    read = _jsonl(directory, TRANSCRIPT_FILENAME)
    source = TRANSCRIPT_FILENAME
    events = read.lines + read.errors
    if not read.exists:
        session = _jsonl(directory, SESSION_FILENAME)
        calls = _jsonl(directory, MODEL_CALLS_FILENAME)
        events = derive_transcript(session.lines, calls.lines) + session.errors + calls.errors
        source = "derived" if session.exists or calls.exists else ""
    return {
        "source": source,
        "events": [clip_deep(event, limits.string) for event in events[: limits.events]],
        "omitted": max(len(events) - limits.events, 0),
    }


def _json_text(value: Any, limit: int) -> Any:
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return clip_text(text, limit)


def _model_calls(directory: Path, limits: Limits) -> dict[str, Any]:
    """The gateway's record of each model call, request and response as clipped JSON text."""
    read = _jsonl(directory, MODEL_CALLS_FILENAME)
    calls = []
    for line in read.lines[: limits.model_calls]:
        call = {k: v for k, v in line.items() if k not in ("request", "response")}
        call = clip_deep(call, limits.string)
        call["request"] = _json_text(line.get("request"), limits.body)
        call["response"] = _json_text(line.get("response"), limits.body)
        calls.append(call)
    return {
        "calls": calls,
        "omitted": max(len(read.lines) - limits.model_calls, 0),
        "parse_errors": len(read.errors),
    }


def _files_under(directory: Path, sub: str, limits: Limits) -> tuple[list[dict[str, Any]], int]:
    """Files under ``directory/sub`` (by dir fd, links not followed), with capped text."""
    try:
        entries = list(walk_beneath(directory, sub))
        found = sorted(e.rel for e in entries if not stat.S_ISDIR(e.info.st_mode))
    except OSError:  # missing, or itself a link
        found = []
    shown = []
    for rel in found[: limits.files]:
        text = read_text_capped(directory, f"{sub}/{rel}", limits.text)
        shown.append({"name": rel, "text": text, "regular": text is not None})
    return shown, max(len(found) - limits.files, 0)


def _top_level_files(directory: Path, limits: Limits) -> list[dict[str, Any]]:
    """The attempt's own files (``agent.log``, ``agent.stderr.log``, ...), capped."""
    shown: list[dict[str, Any]] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return shown
    for name in names:
        if name in _STRUCTURED:
            continue
        try:
            mode = os.lstat(directory / name).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode):
            shown.append({"name": name, "text": read_text_capped(directory, name, limits.text)})
    return shown[: limits.files]


def attempt_evidence(
    run_dir: Path, record: TrialRecord, relative: str | None, limits: Limits
) -> dict[str, Any]:
    """Everything one attempt left in its evidence dir.

    Args:
        run_dir: The run directory.
        record: The trial's record (its task locates the initial workspace).
        relative: The attempt's ``evidence_dir`` (None: the trial's default location).
        limits: Report limits.

    Returns:
        ``dir``, ``exists``, ``transcript``, ``conversation`` (see
        :func:`~harness.report.conversation.conversation`), ``model_calls``, ``verifier``,
        ``logs`` and ``changes`` (see :func:`~harness.report.changes.agent_changes`).
    """
    directory = evidence_path(run_dir, relative, record.id)
    shown = relative or trial_evidence_dir(record.id)
    if directory is None or not is_dir_beneath(run_dir, directory.relative_to(run_dir)):
        return {"dir": shown, "exists": False, "safe": directory is not None}
    verifier, verifier_omitted = _files_under(directory, VERIFIER_DIRNAME, limits)
    return {
        "dir": shown,
        "exists": True,
        "safe": True,
        "transcript": _transcript(directory, limits),
        "conversation": conversation(directory, limits),
        "model_calls": _model_calls(directory, limits),
        "verifier": verifier,
        "verifier_omitted": verifier_omitted,
        "logs": _top_level_files(directory, limits),
        "changes": agent_changes(record, directory, limits),
        "has_workspace": is_dir_beneath(directory, WORKSPACE_DIRNAME)
        or read_manifest(directory) is not None,
    }


def trial_detail(run_dir: Path, record: TrialRecord, limits: Limits) -> dict[str, Any]:
    """A trial page's data: the record, and the evidence of the final and earlier attempts.

    Args:
        run_dir: The run directory.
        record: The trial's latest record.
        limits: Report limits.

    Returns:
        ``{"record": ..., "evidence": ..., "attempts": [{"summary", "evidence"}, ...]}``.
    """
    attempts = [
        {
            "summary": clip_deep(previous.model_dump(mode="json"), limits.string),
            "evidence": attempt_evidence(run_dir, record, previous.evidence_dir, limits)
            if previous.evidence_dir
            else {"dir": None, "exists": False, "safe": True},
        }
        for previous in record.previous_attempts
    ]
    return {
        "record": clip_deep(record.model_dump(mode="json"), limits.string),
        "evidence": attempt_evidence(run_dir, record, record.evidence_dir, limits),
        "attempts": attempts,
    }

"""A trial's evidence as a judge reads it: workspace files, the transcript, the final answer.

Everything here was produced by the agent (the workspace copy, its session) and is read as
data only: files are opened beneath the evidence dir (or the run's store, or the task's
``workspace/``) without following a link at any component (:mod:`sandbox.beneath`), must be
regular files, and are read up to :data:`MAX_INPUT_BYTES`. Nothing is executed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator

from harness.records.layout import (
    MODEL_CALLS_FILENAME,
    SESSION_FILENAME,
    TRANSCRIPT_FILENAME,
    WORKSPACE_DIRNAME,
)
from harness.records.transcript import JsonlRead, derive_transcript, read_jsonl
from harness.records.workspace import Kept, kept_file
from sandbox.beneath import is_file_beneath, lstat_beneath, read_beneath

__all__ = [
    "MAX_INPUT_BYTES",
    "WORKSPACE_DIRNAME",
    "FileRead",
    "TrialEvidence",
    "WorkspaceFile",
    "relative_path",
]

MAX_INPUT_BYTES = 1 << 20
"""The most a judge reads of one file (1 MiB)."""


def relative_path(value: str) -> str | None:
    """Why ``value`` is not a safe workspace-relative path, or None when it is one."""
    path = PurePosixPath(value)
    if not value or path.is_absolute():
        return "must be a path relative to the workspace"
    if any(part in ("..", "") for part in path.parts) or "\0" in value:
        return "must stay inside the workspace (no '..')"
    return None


def _checked_relative(value: str) -> str:
    problem = relative_path(value)
    if problem is not None:
        raise ValueError(problem)
    return value


WorkspaceFile = Annotated[str, AfterValidator(_checked_relative)]
"""A judge option naming a workspace file: a safe workspace-relative path."""


@dataclass(frozen=True)
class FileRead:
    """One workspace file as read: its bytes, or why there are none.

    Attributes:
        data: The content (None when missing or refused).
        problem: ``missing``, ``not a regular file`` or ``larger than 1 MiB``.
    """

    data: bytes | None
    problem: str | None = None


def _absent(kept: Kept) -> bool:
    """Whether nothing at all is at the kept path (a link on the way is not "missing")."""
    return not os.path.lexists(kept.path)


class TrialEvidence:
    """One trial's evidence dir (``trials/<id>/``), read as data.

    Args:
        directory: The evidence dir.
    """

    def __init__(self, directory: Path, seed: Path | None = None) -> None:
        self.directory = Path(directory)
        #: The task's initial ``workspace/``: files the agent left unchanged are read there.
        self.seed = seed

    def workspace_file(self, relative: str) -> FileRead:
        """A file of the agent's workspace as the trial left it.

        Args:
            relative: A workspace-relative path (checked by :func:`relative_path`).
        """
        if relative_path(relative) is not None:
            return FileRead(None, "missing")
        kept = kept_file(self.directory, relative, self.seed)
        if kept is None:
            return FileRead(None, "missing")
        info = lstat_beneath(kept.root, kept.rel)
        if info is None:
            return FileRead(None, "missing" if _absent(kept) else "not a regular file")
        if not stat.S_ISREG(info.st_mode):
            return FileRead(None, "not a regular file")
        read = read_beneath(kept.root, kept.rel, MAX_INPUT_BYTES)
        if read is None:
            return FileRead(None, "not a regular file")
        if read.size > MAX_INPUT_BYTES:
            return FileRead(None, "larger than 1 MiB")
        return FileRead(read.data)

    def _jsonl(self, name: str) -> JsonlRead:
        """One of the evidence dir's JSONL files; one reached through a link reads as absent."""
        if not is_file_beneath(self.directory, name):
            return JsonlRead()
        return read_jsonl(self.directory / name)

    @cached_property
    def transcript(self) -> list[dict[str, Any]] | None:
        """The transcript events, or None when the trial has none (no session, no calls).

        ``transcript.jsonl`` when it was written, else derived from ``session.jsonl`` and
        ``model_calls.jsonl``; malformed lines are ``parse_error`` events.
        """
        written = self._jsonl(TRANSCRIPT_FILENAME)
        if written.exists:
            return written.lines + written.errors
        session = self._jsonl(SESSION_FILENAME)
        calls = self._jsonl(MODEL_CALLS_FILENAME)
        if not session.exists and not calls.exists:
            return None
        return derive_transcript(session.lines, calls.lines) + session.errors + calls.errors

    def tool_calls(self) -> list[dict[str, Any]]:
        """The ``tool_call`` events, each with ``error`` (its result's) when it failed.

        Raises:
            LookupError: The trial has no transcript.
        """
        events = self.transcript
        if events is None:
            raise LookupError("no transcript")
        failed = {
            event.get("tool_call_id")
            for event in events
            if event.get("type") == "tool_result" and event.get("error") is not None
        }
        return [
            {**event, "failed": event.get("id") in failed}
            for event in events
            if event.get("type") == "tool_call"
        ]

    def final_answer(self) -> str | None:
        """The text of the agent's last assistant message ('' when it has none).

        Returns:
            None when the trial has no transcript at all.
        """
        events = self.transcript
        if events is None:
            return None
        answers = [
            event.get("content")
            for event in events
            if event.get("type") == "message" and event.get("role") == "assistant"
        ]
        last = answers[-1] if answers else ""
        return last if isinstance(last, str) else str(last)

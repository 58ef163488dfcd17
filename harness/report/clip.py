"""Bounding what the report carries: clipped strings, capped files, size limits.

Everything an agent controlled can be huge (a 10 MB single-line file, a transcript of
thousands of events). The report carries at most :class:`Limits` of each and says how much
it left out: a clipped string becomes ``{"$clip": <first part>, "total": <full length>,
"unit": "chars" | "bytes"}``, which the page shows with the full size and, where it can, a
link to the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.beneath import read_beneath

__all__ = ["Limits", "clip_deep", "clip_text", "read_text_capped"]


@dataclass(frozen=True)
class Limits:
    """How much of each kind of evidence a report carries.

    Attributes:
        text: Characters of one file or log.
        string: Characters of one string inside a transcript event, model call or record.
        events: Transcript events per trial.
        model_calls: Model calls per trial.
        files: Files listed per directory (changed files, verifier output).
        body: Characters of a model call's request or response, as JSON text.
        diff_bytes: Largest file (either side) that gets a line diff.
    """

    text: int = 256 * 1024
    string: int = 64 * 1024
    events: int = 2000
    model_calls: int = 500
    files: int = 300
    body: int = 32 * 1024
    diff_bytes: int = 1024 * 1024


def clip_text(text: str, limit: int, *, total: int | None = None, unit: str = "chars") -> Any:
    """``text``, or its first ``limit`` characters as a clip object when it is longer.

    Args:
        text: The text.
        limit: Most characters kept.
        total: The full size when ``text`` is already a prefix (e.g. of a file's bytes).
        unit: What ``total`` counts.
    """
    full = len(text) if total is None else total
    if len(text) <= limit and full <= len(text):
        return text
    return {"$clip": text[:limit], "total": full, "unit": unit}


def clip_deep(value: Any, limit: int, *, depth: int = 0) -> Any:
    """A JSON value with every string longer than ``limit`` clipped (nesting bounded)."""
    if isinstance(value, str):
        return clip_text(value, limit)
    if depth > 32:
        return clip_text(repr(value), limit)
    if isinstance(value, dict):
        return {str(k): clip_deep(v, limit, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_deep(v, limit, depth=depth + 1) for v in value]
    return value


def read_text_capped(root: Path, rel: str, limit: int) -> Any:
    """A regular file's text (UTF-8, bad bytes replaced), at most ``limit`` bytes of it.

    The file ``root/rel`` is opened beneath ``root`` without following a symlink at any
    component (:func:`sandbox.beneath.read_beneath`) and must be a regular file: evidence
    is untrusted, and a planted FIFO or link must not hang or redirect the report.

    Returns:
        The text, or a clip object with the file's full size in bytes; None when the path
        is not a readable regular file reached without a link.
    """
    read = read_beneath(root, rel, limit)
    if read is None:
        return None
    text = read.data.decode("utf-8", errors="replace")
    if read.size <= len(read.data):
        return text
    return {"$clip": text, "total": read.size, "unit": "bytes"}

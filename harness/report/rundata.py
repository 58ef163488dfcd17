"""A run directory read for the report: config, summary, live status and latest records.

Everything is read through the run dir's own files and the record store
(:class:`harness.records.TrialStore`); nothing is written. Unknown keys in any file are kept
(a run written by a newer version still renders), and a missing ``summary.json`` (a run in
progress, or one that died) is replaced by :func:`harness.metrics.summarize` over the
records, saying so.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.config import CONFIG_FILENAME
from harness.errors import UsageError
from harness.records import (
    TRIALS_FILENAME,
    CorruptRecordError,
    TrialRecord,
    TrialStore,
    latest_by_id,
)
from harness.records.metrics import summarize
from harness.records.status import STATUS_FILENAME, read_status
from harness.tasks import TASK_TOML
from sandbox.beneath import is_file_beneath, read_beneath, safe_relative

__all__ = [
    "SUMMARY_FILENAME",
    "ReportError",
    "RunData",
    "evidence_path",
    "load_run",
    "run_fingerprint",
    "task_category",
]

SUMMARY_FILENAME = "summary.json"
"""The run's metrics file inside a run directory (written by ``harness run`` at the end)."""


class ReportError(UsageError):
    """A run dir cannot be shown: it is not a run dir, or its records are corrupt."""


@dataclass(frozen=True)
class RunData:
    """One run dir as the report sees it.

    Attributes:
        run_dir: The run directory.
        name: The run's name (the directory's name).
        config: The ``[run]`` table of ``config.toml`` as written (unknown keys kept).
        versions: The ``[versions]`` table of ``config.toml``.
        records: The latest record of each trial, in order of first appearance.
        summary: ``summary.json``, or the summary computed from :attr:`records`.
        summary_source: ``"summary.json"`` or ``"computed"``.
        status: ``status.json``, if the run has one.
        notes: Things the reader should know (a torn last line, a computed summary, ...).
    """

    run_dir: Path
    name: str
    config: dict[str, Any]
    versions: dict[str, Any]
    records: list[TrialRecord]
    summary: dict[str, Any]
    summary_source: str
    status: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """Whether ``status.json`` says the run is in progress."""
        return bool(self.status and self.status.get("state") == "running")


#: The most read of a run dir's own small files (config, summary): a forged one is refused.
_SMALL_FILE_BYTES = 64 << 20


def _read_small(run_dir: Path, name: str) -> bytes | None:
    """A run dir's own file: a regular file, not a link, within the cap (else None)."""
    read = read_beneath(run_dir, name, _SMALL_FILE_BYTES)
    return None if read is None or read.size > len(read.data) else read.data


def _read_json_object(run_dir: Path, name: str) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or not an object."""
    data = _read_small(run_dir, name)
    try:
        value = json.loads(data.decode("utf-8")) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read_config(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config.toml``'s ``[run]`` and ``[versions]`` tables, unvalidated (newer keys kept)."""
    raw = _read_small(run_dir, CONFIG_FILENAME)
    try:
        data = tomllib.loads(raw.decode("utf-8")) if raw is not None else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}, {}
    run = data.get("run", data)
    versions = data.get("versions", {})
    return (
        dict(run) if isinstance(run, Mapping) else {},
        dict(versions) if isinstance(versions, Mapping) else {},
    )


def _threshold(config: Mapping[str, Any]) -> float:
    value = config.get("threshold", 1.0)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 1.0


def load_run(run_dir: Path) -> RunData:
    """Read a run dir.

    Args:
        run_dir: A directory written by ``harness run`` (it holds ``trials.jsonl`` or
            ``config.toml``).

    Returns:
        The run's data.

    Raises:
        ReportError: Not a run dir, or a line of ``trials.jsonl`` other than the last is
            not a valid record.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory: give a run dir written by harness run")
    if not (run_dir / TRIALS_FILENAME).exists() and not (run_dir / CONFIG_FILENAME).exists():
        raise ReportError(
            f"{run_dir} is not a run dir: it has neither {TRIALS_FILENAME} nor "
            f"{CONFIG_FILENAME} (give runs/<run-name>, not its parent)"
        )
    notes: list[str] = []
    try:
        report = TrialStore(run_dir).load_report()
    except CorruptRecordError as exc:
        raise ReportError(f"{run_dir}: {exc}") from None
    except OSError as exc:
        raise ReportError(f"{run_dir}: cannot read {TRIALS_FILENAME}: {exc}") from None
    if report.torn_tail:
        notes.append(
            f"{TRIALS_FILENAME} ends in a torn line (line {report.torn_line_number}, "
            f"{report.torn_bytes} bytes): a writer died mid-line; it is left out"
        )
    records = list(latest_by_id(report.records).values())
    config, versions = _read_config(run_dir)
    status = read_status_safely(run_dir)
    summary = _read_json_object(run_dir, SUMMARY_FILENAME)
    source = "summary.json"
    running = bool(status and status.get("state") == "running")
    if summary is None or running:
        summary = summarize(records, threshold=_threshold(config)).model_dump(mode="json")
        source = "computed"
        notes.append(
            "the run is in progress: figures are computed from the records so far"
            if running
            else f"no {SUMMARY_FILENAME}: figures are computed from the records"
        )
    return RunData(
        run_dir=run_dir,
        name=run_dir.resolve().name,
        config=config,
        versions=versions,
        records=records,
        summary=summary,
        summary_source=source,
        status=status,
        notes=notes,
    )


def read_status_safely(run_dir: Path) -> dict[str, Any] | None:
    """``status.json`` of a run, or None when it is missing or unreadable (half-written).

    A ``status.json`` that is a symlink is not read (a forged run dir's link is never
    followed).
    """
    if not is_file_beneath(run_dir, STATUS_FILENAME):
        return None
    try:
        return read_status(run_dir)
    except (OSError, ValueError):
        return None


def run_fingerprint(run_dir: Path) -> list[list[int]]:
    """What changes when a run moves on: (size, mtime) of its records, summary and status."""
    result = []
    for name in (TRIALS_FILENAME, SUMMARY_FILENAME, STATUS_FILENAME, CONFIG_FILENAME):
        try:
            info = (Path(run_dir) / name).stat()
        except OSError:
            result.append([-1, -1])
            continue
        result.append([info.st_size, info.st_mtime_ns])
    return result


@lru_cache(maxsize=4096)
def _category_of_task_dir(task_dir: str) -> str | None:
    """``[metadata].category`` of a task dir's ``task.toml`` (None when unreadable)."""
    try:
        with open(Path(task_dir) / TASK_TOML, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    metadata = data.get("metadata")
    value = metadata.get("category") if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else None


def task_category(record: TrialRecord) -> str | None:
    """The trial's task category (None when unknown).

    Taken from the record when a newer version put it there, else from the task's
    ``task.toml`` (which is gone when the run dir moved to another machine).
    """
    extra = record.task.model_extra or {}
    value = extra.get("category")
    if isinstance(value, str):
        return value
    return _category_of_task_dir(record.task.path)


def _safe_component(name: str) -> bool:
    return bool(name) and name not in (".", "..") and not any(ch in name for ch in "/\\\0")


def evidence_path(run_dir: Path, relative: str | None, trial_id: str) -> Path | None:
    """A trial's (or an attempt's) evidence dir inside the run dir, or None.

    Args:
        run_dir: The run directory.
        relative: The record's ``evidence_dir`` (relative to the run dir), if any.
        trial_id: The trial's id (``trials/<id>`` is the default location).

    Returns:
        The directory, or None when it would lie outside the run dir (a forged record:
        absolute, or with ``..``). Whether it is reached without a symlink is for the
        reader to check (:func:`sandbox.beneath.is_dir_beneath`).
    """
    if relative is None:
        if not _safe_component(trial_id):
            return None
        relative = f"trials/{trial_id}"
    if safe_relative(relative.rstrip("/")) is None:  # absolute, "..", "." or empty parts
        return None
    return Path(run_dir) / relative.rstrip("/")

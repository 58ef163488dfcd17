"""A run directory read for the report: config, summary, live status and latest records.

Everything is read by the run-dir reader (:func:`harness.records.run.read_run`); nothing
is written. Unknown keys in any file are kept (a run written by a newer version still
renders), and a missing ``summary.json`` (a run in progress, or one that died), or one of
version 1 (its headline over graded trials only), is replaced by
:func:`harness.records.metrics.summarize` over the records, saying so.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.records import CorruptRecordError, TrialRecord
from harness.records.layout import CONFIG_FILENAME, SUMMARY_FILENAME, TRIALS_FILENAME
from harness.records.metrics import SUMMARY_VERSION, summarize
from harness.records.run import evidence_path, read_run, read_status_safely, run_fingerprint
from harness.tasks import TASK_TOML

__all__ = [
    "SUMMARY_FILENAME",
    "ReportError",
    "RunData",
    "evidence_path",
    "load_run",
    "read_status_safely",
    "run_fingerprint",
    "task_category",
]


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
        fingerprint: :func:`run_fingerprint` of the dir, taken before anything was read:
            a live page that holds it reloads on any write made while it was read.
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
    fingerprint: list[list[int]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        """Whether ``status.json`` says the run is in progress."""
        return bool(self.status and self.status.get("state") == "running")


def _threshold(config: Mapping[str, Any]) -> float:
    value = config.get("threshold", 1.0)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 1.0


_RUN_KEYS = ("run", "interrupted", "pending", "invocation")
"""The keys of ``summary.json`` that say how the run went rather than what it scored."""


def _current(summary: Mapping[str, Any]) -> bool:
    """Whether ``summary`` is of :data:`SUMMARY_VERSION` or later (its headline over the plan)."""
    version = summary.get("summary_version")
    return isinstance(version, int) and not isinstance(version, bool) and version >= SUMMARY_VERSION


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
    # Before anything is read: a write meanwhile then moves it past what was read.
    fingerprint = run_fingerprint(run_dir)
    try:
        read = read_run(run_dir)
    except CorruptRecordError as exc:
        raise ReportError(f"{run_dir}: {exc}") from None
    except OSError as exc:
        raise ReportError(f"{run_dir}: cannot read {TRIALS_FILENAME}: {exc}") from None
    report = read.load
    if report.torn_tail:
        notes.append(
            f"{TRIALS_FILENAME} ends in a torn line (line {report.torn_line_number}, "
            f"{report.torn_bytes} bytes): a writer died mid-line; it is left out"
        )
    records, config, versions, status = read.records, read.config, read.versions, read.status
    summary = read.summary
    source = SUMMARY_FILENAME
    running = read.running
    if summary is None or running:
        summary = summarize(records, threshold=_threshold(config)).model_dump(mode="json")
        source = "computed"
        notes.append(
            "the run is in progress: figures are computed from the records so far"
            if running
            else f"no {SUMMARY_FILENAME}: figures are computed from the records"
        )
    elif not _current(summary):
        # Its headline counted graded trials only: computed again over its plan.
        kept = {key: summary[key] for key in _RUN_KEYS if key in summary}
        computed = summarize(
            records,
            threshold=_threshold(config),
            planned=read.planned,
            planned_tasks=read.planned_tasks,
        )
        summary = {**kept, **computed.model_dump(mode="json")}
        source = "computed"
        notes.append(
            f"{SUMMARY_FILENAME} is of version 1, whose figures counted graded trials only: "
            "they are computed from the records, every planned trial counted"
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
        fingerprint=fingerprint,
    )


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

"""The run-dir reader: what the API, the report and experiments know of a run dir.

A run dir is untrusted input (it may come from another machine, or be forged), so every one
of its own files is read beneath it without following a link, as a regular file only, and
within a cap (:mod:`sandbox.beneath`): a ``summary.json`` that is a FIFO or a link to
``/dev/zero`` is treated as missing, not read. ``trials.jsonl`` is read by the record store,
which refuses a symlink and a torn line other than the last. Unknown keys in any file are
kept (a run written by a newer version still reads), and nothing is written.

:func:`read_run` reads it all at once; :func:`harness.load_run` validates the saved config on
top of it and :func:`harness.report.load_run` renders it as is.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.records.layout import (
    CONFIG_FILENAME,
    STATUS_FILENAME,
    SUMMARY_FILENAME,
    TRIALS_FILENAME,
    trial_evidence_dir,
)
from harness.records.model import TrialRecord, latest_by_id
from harness.records.status import read_status
from harness.records.store import LoadReport, TrialStore
from sandbox.beneath import is_file_beneath, read_beneath, safe_relative

SMALL_FILE_BYTES = 64 << 20
"""The most read of a run dir's own small files (config, summary): a forged one is refused."""
MAX_PLANNED_TASKS = 100_000
"""The most tasks a ``summary.json``'s plan per task may name (more reads as unknown): the
summary is untrusted, and each planned task costs a per-task figure."""


@dataclass(frozen=True)
class RunRead:
    """One run dir as read from its files, unvalidated.

    Attributes:
        run_dir: The run directory.
        load: How ``trials.jsonl`` read (its records, and a torn last line if any).
        records: The latest record of each trial, in order of first appearance.
        config: The ``[run]`` table of ``config.toml`` as written (unknown keys kept; empty
            when it is missing or unreadable).
        versions: The ``[versions]`` table of ``config.toml``.
        summary: ``summary.json`` as written, or None (missing, not an object, too large,
            a link or not a regular file).
        status: ``status.json``, or None (missing, half-written or a link).
    """

    run_dir: Path
    load: LoadReport
    records: list[TrialRecord]
    config: dict[str, Any]
    versions: dict[str, Any]
    summary: dict[str, Any] | None
    status: dict[str, Any] | None

    @property
    def running(self) -> bool:
        """Whether ``status.json`` says the run is in progress."""
        return bool(self.status and self.status.get("state") == "running")

    @property
    def planned(self) -> int | None:
        """How many trials the run planned, as its ``summary.json`` says (None: unknown)."""
        return planned_trials(self.summary)

    @property
    def planned_tasks(self) -> dict[str, int] | None:
        """Task key → its planned trials, as its ``summary.json`` says (None: unknown)."""
        return planned_tasks(self.summary)


def read_run(run_dir: str | Path, *, summary_cap: int = SMALL_FILE_BYTES) -> RunRead:
    """Read a run dir (finished, running or dead) without changing it.

    The caller says first whether ``run_dir`` is a run dir at all (the API wants a
    ``config.toml``, the report either file); a missing ``trials.jsonl`` reads as no records.

    Args:
        run_dir: The run directory.
        summary_cap: The largest ``summary.json`` read (a larger one reads as None).

    Returns:
        What its files hold.

    Raises:
        CorruptRecordError: A line of ``trials.jsonl`` other than the last is not a record.
        OSError: ``trials.jsonl`` cannot be read (a symlink or not a regular file: a forged
            run dir's link is never followed).
    """
    path = Path(run_dir)
    load = TrialStore(path).load_report()
    config, versions = read_config_tables(path)
    return RunRead(
        run_dir=path,
        load=load,
        records=list(latest_by_id(load.records).values()),
        config=config,
        versions=versions,
        summary=read_json_object(path, SUMMARY_FILENAME, cap=summary_cap),
        status=read_status_safely(path),
    )


def read_small(run_dir: Path, name: str, *, cap: int = SMALL_FILE_BYTES) -> bytes | None:
    """A run dir's own file: a regular file, not a link, within ``cap`` (else None)."""
    read = read_beneath(run_dir, name, cap)
    return None if read is None or read.size > len(read.data) else read.data


def read_json_object(
    run_dir: Path, name: str, *, cap: int = SMALL_FILE_BYTES
) -> dict[str, Any] | None:
    """A run dir's JSON object file (as :func:`read_small`), or None when it is not one."""
    data = read_small(run_dir, name, cap=cap)
    try:
        value = json.loads(data.decode("utf-8")) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_summary(run_dir: str | Path, *, cap: int = SMALL_FILE_BYTES) -> dict[str, Any] | None:
    """The run's ``summary.json`` (as :func:`read_json_object`), or None."""
    return read_json_object(Path(run_dir), SUMMARY_FILENAME, cap=cap)


def planned_trials(summary: Mapping[str, Any] | None) -> int | None:
    """The ``planned`` count of a ``summary.json``, when it is an integer (else None)."""
    planned = summary.get("planned") if summary is not None else None
    return planned if isinstance(planned, int) and not isinstance(planned, bool) else None


def planned_tasks(summary: Mapping[str, Any] | None) -> dict[str, int] | None:
    """Task key → planned trials, from a ``summary.json``'s ``per_task`` (else None).

    Only a summary that gives every task's ``planned`` as an integer (version 2 and later)
    has it; any other value, or more than :data:`MAX_PLANNED_TASKS` tasks, reads as unknown.
    """
    per_task = summary.get("per_task") if summary is not None else None
    if not isinstance(per_task, Mapping) or not per_task or len(per_task) > MAX_PLANNED_TASKS:
        return None
    result: dict[str, int] = {}
    for key, entry in per_task.items():
        planned = entry.get("planned") if isinstance(entry, Mapping) else None
        if not isinstance(planned, int) or isinstance(planned, bool) or planned < 0:
            return None
        result[str(key)] = planned
    return result


def read_config_tables(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config.toml``'s ``[run]`` and ``[versions]`` tables, unvalidated (newer keys kept)."""
    raw = read_small(run_dir, CONFIG_FILENAME)
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


def read_status_safely(run_dir: Path) -> dict[str, Any] | None:
    """``status.json`` of a run, or None when it is missing or unreadable (half-written).

    A ``status.json`` that is a symlink or not a regular file is not read (a forged run
    dir's link is never followed).
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
        relative = trial_evidence_dir(trial_id)
    if safe_relative(relative.rstrip("/")) is None:  # absolute, "..", "." or empty parts
        return None
    return Path(run_dir) / relative.rstrip("/")


__all__ = [
    "MAX_PLANNED_TASKS",
    "SMALL_FILE_BYTES",
    "RunRead",
    "evidence_path",
    "planned_tasks",
    "planned_trials",
    "read_config_tables",
    "read_json_object",
    "read_run",
    "read_small",
    "read_status_safely",
    "read_summary",
    "run_fingerprint",
]

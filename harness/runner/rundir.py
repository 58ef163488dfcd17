"""Run dir housekeeping: the lock, one log per invocation, tidying before trials, summary.

The paths are named in :mod:`harness.records.layout`. Layout (see ``docs/run-dir.md``)::

    <output-dir>/<run-name>/
      config.toml        the resolved config ([run]) and [versions]; never a secret
      trials.jsonl       trial records (the latest record of an id wins); compacted to one
                         line per trial, atomically, when an invocation starts and ends
      summary.json       metrics over the latest record of each planned trial
      status.json        live state for other processes (harness.records.status)
      run.lock           held by the invocation working on the run dir
      logs/invocation_N/eval.log, logs/latest -> invocation_N, eval.log -> logs/latest/eval.log
                         one log per invocation (the first run is 1, each ``--resume`` adds
                         one); harness 0.1 named them ``logs/attempt_N``
      trials/<id>/       evidence of each trial's latest attempt
      attempts/<id>/<n>/ evidence of earlier attempts (retries, resumed reruns)
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from harness.config import RunConfig
from harness.errors import UsageError
from harness.records import CompactReport, StoreSnapshot, TrialRecord, TrialStore, write_json_atomic
from harness.records.layout import (
    INVOCATION_DIR_PREFIX,
    LATEST_LOG_LINK,
    LOG_FILENAME,
    LOGS_DIRNAME,
    RUN_LOCK_FILENAME,
    STATUS_FILENAME,
    SUMMARY_FILENAME,
    invocation_dirname,
)
from harness.records.metrics import Summary, summarize
from harness.runner.events import RunEvents
from sandbox.backend import CloseReport
from sandbox.plugin import SandboxBackend

LOCK_FILENAME = RUN_LOCK_FILENAME
"""The old public name of :data:`~harness.records.layout.RUN_LOCK_FILENAME` (kept importable)."""

#: ``invocation_N``, or harness 0.1's ``attempt_N`` (the same thing, under an older name).
_INVOCATION_DIR = re.compile(rf"^(?:{INVOCATION_DIR_PREFIX}|attempt_)(\d+)$")


def lock_run_dir(run_dir: Path) -> FileLock:
    """Take the run dir's lock, or explain who holds it.

    Raises:
        UsageError: Another harness process works on the run dir.
    """
    lock = FileLock(str(run_dir / RUN_LOCK_FILENAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(
            f"{run_dir} is in use by another harness process (its pid is in "
            f"{run_dir / STATUS_FILENAME}); wait for it to finish or stop it, then resume"
        ) from None
    return lock


#: Where a root harness marks the run names in use on this host (as its uid locks).
RUN_NAME_LOCK_DIR = Path("/run/harness/run-names")


def run_name_lock_dir() -> Path:
    """Where this process marks its run's name: host-wide as root, else its user's own."""
    if os.geteuid() == 0:
        return RUN_NAME_LOCK_DIR
    return Path(tempfile.gettempdir()) / f"harness-run-names-{os.geteuid()}"


def hold_run_name(name: str) -> FileLock:
    """Take the run name on this host for as long as the run's invocation lives.

    A run's name is what its sandboxes answer to on the host: its private temp dir and the
    engine's labels. Starting, a run empties that dir and removes what is labelled with the
    name (a dead invocation's leftovers), so a second live run of the same name, in
    another output dir, would wipe the first's trials. It is refused instead.

    Raises:
        UsageError: Another live harness process holds the name.
    """
    lock_dir = run_name_lock_dir()
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = FileLock(str(lock_dir / f"{name}.lock"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(
            f"a run named {name} is already running on this host: its sandboxes are known "
            "by that name, and this run would remove them; choose another --run-name, or "
            "wait for it to end"
        ) from None
    return lock


def refuse_non_empty(run_dir: Path) -> None:
    """A new run never writes into a run dir that holds anything.

    Raises:
        UsageError: ``run_dir`` exists and is not an empty dir.
    """
    if run_dir.exists() and (not run_dir.is_dir() or _holds_a_run(run_dir)):
        raise UsageError(
            f"{run_dir} already exists and is not empty: continue that run with "
            f"`harness run --resume {run_dir}`, or choose another --run-name / -o"
        )


def create_run_dir(run_dir: Path) -> FileLock:
    """Create a new run's dir (private) and lock it.

    Raises:
        UsageError: It appeared meanwhile and is not empty, or it is locked.
    """
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir(mode=0o700)
    except FileExistsError:
        if _holds_a_run(run_dir):
            raise UsageError(
                f"{run_dir} is not empty: continue it with `harness run --resume {run_dir}`"
            ) from None
    lock = lock_run_dir(run_dir)
    remove_partial_writes(run_dir)
    return lock


def _holds_a_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds more than a start killed before its config was written.

    Its lock file and the temp file of the config's atomic write are all such a start
    leaves: the same command starts the run again there.
    """
    return any(
        entry.name != RUN_LOCK_FILENAME and not _PARTIAL_WRITE.match(entry.name)
        for entry in run_dir.iterdir()
    )


class RunLog:
    """One invocation's ``eval.log``: timestamped lines, safe from any thread.

    A write that fails (a full disk) never raises: the log keeps the error in
    :attr:`failed` and drops every later line; the run reads it and stops in order.

    Args:
        path: The log file, or None for a log that drops every line.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        # A line may quote what the agent wrote (a name that is not UTF-8): it is escaped,
        # never a failure of the log.
        self._fh = (
            path.open("a", encoding="utf-8", errors="backslashreplace")
            if path is not None
            else None
        )
        #: The error of the first write that failed, if any.
        self.failed: OSError | None = None

    def __call__(self, text: str) -> None:
        """Append one line (each line of ``text`` gets the timestamp)."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines = "".join(f"{stamp} {line}\n" for line in (text.splitlines() or [""]))
        with self._lock:
            if self._fh is None or self._fh.closed or self.failed is not None:
                return
            try:
                self._fh.write(lines)
                self._fh.flush()
            except OSError as exc:
                self.failed = exc

    def close(self) -> None:
        """Close the file; later lines are dropped."""
        with self._lock:
            if self._fh is not None and not self._fh.closed:
                try:
                    self._fh.close()
                except OSError as exc:  # the lines it held are lost; the records are not
                    self.failed = self.failed or exc


def _symlink_atomic(link: Path, target: str) -> None:
    temp = link.with_name(f".{link.name}.{secrets.token_hex(4)}.tmp")
    os.symlink(target, temp)
    os.replace(temp, link)


def latest_invocation(run_dir: Path) -> int:
    """The number of the run dir's latest invocation log (0 if none)."""
    logs = run_dir / LOGS_DIRNAME
    if not logs.is_dir():
        return 0
    numbers = [
        int(match.group(1))
        for entry in logs.iterdir()
        if (match := _INVOCATION_DIR.match(entry.name))
    ]
    return max(numbers, default=0)


def open_invocation_log(run_dir: Path) -> tuple[int, RunLog]:
    """Create ``logs/invocation_N/eval.log`` for this invocation; point the links at it."""
    logs = run_dir / LOGS_DIRNAME
    top = run_dir / LOG_FILENAME
    if not logs.exists() and top.is_file() and not top.is_symlink():
        # A run dir from before per-invocation logs: its log becomes the first invocation's.
        (logs / invocation_dirname(1)).mkdir(parents=True)
        top.rename(logs / invocation_dirname(1) / LOG_FILENAME)
    logs.mkdir(exist_ok=True)
    number = latest_invocation(run_dir) + 1
    folder = logs / invocation_dirname(number)
    folder.mkdir()
    log = RunLog(folder / LOG_FILENAME)
    _symlink_atomic(logs / LATEST_LOG_LINK, folder.name)
    if not top.is_symlink():
        _symlink_atomic(top, f"{LOGS_DIRNAME}/{LATEST_LOG_LINK}/{LOG_FILENAME}")
    return number, log


def latest_log(run_dir: Path) -> RunLog:
    """The latest invocation's log, to add to (a log that drops lines if there is none)."""
    latest = run_dir / LOGS_DIRNAME / LATEST_LOG_LINK / LOG_FILENAME
    return RunLog(latest if latest.is_file() else None)


#: ``.<file>.<random>.tmp`` of an atomic write (harness.records.atomic), a disk probe's file.
_PARTIAL_WRITE = re.compile(r"^\.(?:[^/]+\.[^/.]+\.tmp|harness-probe-[0-9a-f]+)$")


def remove_partial_writes(run_dir: Path) -> list[str]:
    """Remove what atomic writes cut short by a crash left at the top of the run dir.

    The files they were replacing are whole (the old or the new content); only the
    temp files remain, which no reader looks at.
    """
    removed = []
    try:
        entries = list(os.scandir(run_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        if _PARTIAL_WRITE.match(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return sorted(removed)


def tidy(
    store: TrialStore,
    snapshot: StoreSnapshot | None,
    backend: SandboxBackend,
    log: Callable[[str], None],
    events: RunEvents,
) -> CompactReport:
    """Make the run dir whole before anything runs (every invocation, resumed or not).

    Removes the temp files of atomic writes a dead invocation left, repairs a torn last
    line of ``trials.jsonl`` (a crash mid-write), compacts it to one line per trial
    atomically, and has the backend remove what a dead invocation of the run leaked
    (containers by the run's label or name, trial roots in its private temp dir).

    Args:
        store: The run's ``trials.jsonl``.
        snapshot: The file as read for the resume plan (reused if unchanged), or None.
        backend: The run's sandbox backend.
        log: The invocation's log.
        events: The run's observer; it hears the repairs and removals.

    Returns:
        The compacted records and what reading the file found.
    """
    partial = remove_partial_writes(store.run_dir)
    if partial:
        names = ", ".join(partial)
        log(f"removed {len(partial)} unfinished write(s) of a dead invocation: {names}")
    compact = store.compact(snapshot)
    if compact.load.torn_tail:
        message = (
            f"repaired a torn last line of trials.jsonl (line "
            f"{compact.load.torn_line_number}, {compact.load.torn_bytes} bytes)"
        )
        log(message)
        events.message(message)
    if compact.superseded:
        log(f"trials.jsonl compacted: {compact.superseded} superseded record(s) dropped")
    leaked = backend.start()
    if leaked:
        message = f"removed {len(leaked)} leaked sandbox object(s) of the run: " + ", ".join(leaked)
        log(message)
        events.message(message)
    return compact


def close_backend(backend: SandboxBackend, log: Callable[[str], None]) -> CloseReport:
    """Close the run's backend; return (and log) what it removed as leaked, what it could not."""
    try:
        report = backend.close()
    except Exception as exc:  # report, never hide the run's result
        report = CloseReport(failed=[f"closing the {backend.name} backend: {exc}"])
    log_closed(report, log)
    return report


def log_closed(report: CloseReport, log: Callable[[str], None], where: str = "") -> None:
    """Log by name what a close removed (``where``: on which machines), and each failure."""
    if report.removed:
        log(f"removed leaked sandbox objects{where}: {', '.join(report.removed)}")
    for failure in report.failed:
        log(f"cleanup failed: {failure}")


def write_summary(
    run_dir: Path,
    config: RunConfig,
    records: list[TrialRecord],
    *,
    planned: int,
    interrupted: bool,
    invocation: int,
    planned_tasks: Mapping[str, int] | None = None,
    dataset_metrics: Mapping[str, Any] | None = None,
) -> Summary:
    """Summarize the records over the plan and write ``summary.json`` atomically.

    ``planned`` is the denominator (``planned_tasks``, task key → its planned trials, per
    task): ``unrecorded`` (and the older ``pending``) counts the planned trials without a
    record, and the headline figures count them, and every ungraded trial, as 0.
    ``dataset_metrics`` (:mod:`harness.runner.dataset_metrics`) goes in as it is, when
    the run's datasets declare any.
    """
    summary = summarize(
        records, threshold=config.threshold, planned=planned, planned_tasks=planned_tasks
    )
    if dataset_metrics:  # an extra key, as ``tampering`` is
        summary = Summary.model_validate(
            {**summary.model_dump(), "dataset_metrics": dict(dataset_metrics)}
        )
    write_json_atomic(
        run_dir / SUMMARY_FILENAME,
        {
            "run": run_dir.name,
            "interrupted": interrupted,
            "pending": summary.unrecorded,
            "invocation": invocation,
            **summary.model_dump(mode="json"),
        },
    )
    return summary


__all__ = [
    "LOCK_FILENAME",
    "LOGS_DIRNAME",
    "LOG_FILENAME",
    "RUN_NAME_LOCK_DIR",
    "SUMMARY_FILENAME",
    "RunLog",
    "close_backend",
    "create_run_dir",
    "hold_run_name",
    "latest_invocation",
    "latest_log",
    "lock_run_dir",
    "log_closed",
    "open_invocation_log",
    "refuse_non_empty",
    "remove_partial_writes",
    "run_name_lock_dir",
    "tidy",
    "write_summary",
]

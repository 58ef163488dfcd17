"""The run directory's ``trials.jsonl`` store: append-only trial records under a file lock.

:class:`TrialStore` appends records under a file lock, each as a single ``write`` on an
``O_APPEND`` descriptor followed by ``fsync``, so concurrent writers (threads or processes)
never interleave lines. Every string is written escaped and read back unescaped
(:mod:`.lines`): whatever a record holds, it can be written. A crash mid-append can leave a
torn last line; :meth:`TrialStore.load` tolerates it (and reports it),
:meth:`TrialStore.repair` removes it atomically. A bad line anywhere else is corruption and
raises :class:`~harness.errors.CorruptRecordError`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from pydantic import ValidationError

from harness.errors import CorruptRecordError
from harness.records.atomic import fsync_dir, write_bytes_atomic
from harness.records.layout import TRIALS_FILENAME, TRIALS_LOCK_FILENAME
from harness.records.lines import parse_record, record_line
from harness.records.model import TrialRecord

logger = logging.getLogger(__name__)

LOCK_FILENAME = TRIALS_LOCK_FILENAME
"""The old public name of :data:`~harness.records.layout.TRIALS_LOCK_FILENAME` (kept importable)."""


@dataclass(frozen=True)
class LoadReport:
    """The result of reading ``trials.jsonl``.

    Attributes:
        records: The valid records, in file order.
        torn_tail: True if the last line was torn by a crash mid-append: it has no
            trailing newline, or it does not parse. An unterminated last line that still
            parses is complete (only its newline is missing) and is included in
            ``records``; an unparseable one is dropped.
        torn_line_number: 1-based line number of the torn line, if any.
        torn_bytes: Size of the torn line in bytes (0 if none).
    """

    records: list[TrialRecord]
    torn_tail: bool = False
    torn_line_number: int | None = None
    torn_bytes: int = 0


@dataclass(frozen=True)
class StoreSnapshot:
    """``trials.jsonl`` as read once by :meth:`TrialStore.snapshot`.

    Attributes:
        report: The parsed records and the tail report.
        lines: The raw bytes of each record in ``report.records`` (without newline).
        identity: (inode, size, mtime_ns) of the file when read; None if it was missing.
    """

    report: LoadReport
    lines: list[bytes]
    identity: tuple[int, int, int] | None


@dataclass(frozen=True)
class CompactReport:
    """The result of :meth:`TrialStore.compact`.

    Attributes:
        records: The latest record of each trial id, in order of first appearance.
        load: What reading the file found (``torn_tail`` etc.), before compaction.
        superseded: Older records of an id that were dropped.
        rewritten: Whether the file was replaced.
    """

    records: list[TrialRecord]
    load: LoadReport
    superseded: int = 0
    rewritten: bool = False


def _short_reason(exc: Exception) -> str:
    """A one-line, bounded description of a parse failure."""
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False, include_input=False)[:1]
        if first:
            loc = ".".join(str(part) for part in first[0].get("loc", ())) or "<record>"
            text = f"{loc}: {first[0].get('msg', '')}"
            more = exc.error_count() - 1
            if more > 0:
                text += f" (+{more} more)"
            return text[:300]
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def _read_trials(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes and identity of a trials file, never through a symlink.

    A run dir may come from anyone (``harness report``, ``view``, ``regrade``): a
    ``trials.jsonl`` that is a symlink (to a root-only host file holding record-shaped
    lines) or not a regular file (a FIFO, ``/dev/zero``) is refused, never read.

    Raises:
        OSError: ``ELOOP`` for a symlink, ``EINVAL`` for anything but a regular file.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (refused, never read)", str(path))
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(), info
    finally:
        os.close(fd)


def _scan(path: Path, data: bytes) -> tuple[LoadReport, list[bytes]]:
    """Parse the bytes of a trials file; see :meth:`TrialStore.load_report` for the rules.

    Returns:
        The report, and the raw bytes (without newline) of each line in ``records``.
    """
    pieces = data.split(b"\n")
    # ``pieces[-1]`` is whatever follows the final newline: b"" for a well-terminated file.
    unterminated = pieces[-1] != b""
    if not unterminated:
        pieces.pop()
    last_index = max((i for i, raw in enumerate(pieces) if raw.strip()), default=-1)

    records: list[TrialRecord] = []
    good_lines: list[bytes] = []
    torn_line_number: int | None = None
    torn_bytes = 0
    for index, raw in enumerate(pieces):
        if not raw.strip():
            continue
        is_last = index == last_index
        try:
            record = parse_record(raw)
        except (ValidationError, ValueError) as exc:
            if not is_last:
                raise CorruptRecordError(path, index + 1, _short_reason(exc)) from exc
            torn_line_number, torn_bytes = index + 1, len(raw)
            # Reported by the caller (the report says so), once: not on every read.
            logger.debug(
                "%s:%d: torn last line (%d bytes) ignored: %s",
                path,
                index + 1,
                len(raw),
                _short_reason(exc),
            )
            continue
        if is_last and unterminated:
            torn_line_number, torn_bytes = index + 1, len(raw)
        records.append(record)
        good_lines.append(raw)
    if torn_line_number is None and unterminated and pieces[-1]:
        # Trailing whitespace without a newline: harmless, but still not a clean tail.
        torn_line_number, torn_bytes = len(pieces), len(pieces[-1])
    report = LoadReport(
        records=records,
        torn_tail=torn_line_number is not None,
        torn_line_number=torn_line_number,
        torn_bytes=torn_bytes,
    )
    return report, good_lines


class TrialStore:
    """The run directory's ``trials.jsonl``: append-only trial records under a file lock.

    Safe for concurrent use by several threads and processes: every mutation holds
    ``<run_dir>/trials.jsonl.lock``.

    Attributes:
        run_dir: The run directory.
        path: ``<run_dir>/trials.jsonl``.
        lock_path: ``<run_dir>/trials.jsonl.lock``.
        torn_tail: Whether the last :meth:`load` found a torn last line.
        last_report: The full report of the last :meth:`load`, if any.
    """

    def __init__(self, run_dir: Path, *, lock_timeout: float = -1) -> None:
        """Open (lazily) the store of ``run_dir``.

        Args:
            run_dir: The run directory; created on first write.
            lock_timeout: Seconds to wait for the file lock; negative waits forever.
        """
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / TRIALS_FILENAME
        self.lock_path = self.run_dir / TRIALS_LOCK_FILENAME
        self._lock_timeout = lock_timeout
        self._lock: FileLock | None = None
        self.torn_tail = False
        self.last_report: LoadReport | None = None
        #: (line number, size) of the torn line last reported: a repair that fails (a full
        #: disk) and is tried again is not reported again.
        self._torn_reported: tuple[int | None, int] | None = None

    def _locked(self) -> FileLock:
        """The store's lock, creating the run directory on first use."""
        if self._lock is None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._lock = FileLock(self.lock_path, timeout=self._lock_timeout)
        return self._lock

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """The lock for a read; none on a read-only filesystem, where nobody can write.

        Taking the lock opens its file for writing, which a filesystem that turned
        read-only refuses: the records must still be readable there (to count them).
        """
        lock = self._locked()
        try:
            lock.acquire()
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            yield
            return
        try:
            yield
        finally:
            lock.release()

    def append(self, record: TrialRecord) -> None:
        """Append one record as one line, durably.

        The line is written with a single ``write`` on an ``O_APPEND`` descriptor while
        holding the lock, then fsynced. If the file ends in a torn line (an earlier crash),
        it is repaired first, so the new record never fuses with the fragment.

        Args:
            record: The record to append.

        Raises:
            CorruptRecordError: If a torn tail must be repaired but an earlier line is
                corrupt.
        """
        line = record_line(record) + b"\n"
        with self._locked():
            created = not self.path.exists()
            if not created and not self._ends_with_newline():
                self._repair_locked()
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o644)
            try:
                size = os.fstat(fd).st_size
                try:
                    written = os.write(fd, line)
                    while written < len(line):  # a short write: the disk is filling up
                        written += os.write(fd, line[written:])
                    os.fsync(fd)
                except OSError:
                    # Never leave half a line (a full disk): cut the file back to whole
                    # records; truncating needs no free space.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.run_dir)

    def _ends_with_newline(self) -> bool:
        """Whether the file is empty or ends with a newline (call with the lock held)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            return size == 0 or os.pread(fd, 1, size - 1) == b"\n"
        finally:
            os.close(fd)

    def load_report(self) -> LoadReport:
        """Read all records and report on the file's tail.

        Rules: blank lines are skipped; the last non-blank line may be torn (no trailing
        newline, or unparseable) and is then reported, not raised; any other line that is
        not a valid record raises :class:`CorruptRecordError`. A missing file is empty.

        Returns:
            The report; also stored in :attr:`last_report` and :attr:`torn_tail`.

        Raises:
            CorruptRecordError: If a line other than the last is not a valid record.
        """
        if not self.path.exists():
            report = LoadReport(records=[])
        else:
            with self._reading():
                data, _info = _read_trials(self.path)
            report, _ = _scan(self.path, data)
        self.last_report = report
        self.torn_tail = report.torn_tail
        return report

    def snapshot(self) -> StoreSnapshot:
        """Read the file once, keeping what :meth:`compact` needs to skip a second read.

        Returns:
            The parsed file (see :meth:`load_report` for the rules) and its identity.

        Raises:
            CorruptRecordError: If a line other than the last is not a valid record.
        """
        if not self.path.exists():
            return StoreSnapshot(LoadReport(records=[]), [], None)
        with self._reading():
            data, info = _read_trials(self.path)
        report, good_lines = _scan(self.path, data)
        self.last_report = report
        self.torn_tail = report.torn_tail
        return StoreSnapshot(report, good_lines, (info.st_ino, info.st_size, info.st_mtime_ns))

    def load(self) -> list[TrialRecord]:
        """Read all records (see :meth:`load_report` for the rules).

        Returns:
            The valid records in file order; check :attr:`torn_tail` afterwards.

        Raises:
            CorruptRecordError: If a line other than the last is not a valid record.
        """
        return self.load_report().records

    def repair(self) -> bool:
        """Remove a torn last line, atomically (temp file in the same dir, fsync, rename).

        A torn line that still parses keeps its record and just gets its newline back.
        Good lines are kept byte for byte.

        Returns:
            True if the file was rewritten, False if it was already clean (or missing).

        Raises:
            CorruptRecordError: If a line other than the last is not a valid record
                (nothing is changed then).
        """
        if not self.path.exists():
            return False
        with self._locked():
            return self._repair_locked()

    def _repair_locked(self) -> bool:
        """:meth:`repair` with the lock already held (a torn line is logged once)."""
        report, good_lines = _scan(self.path, _read_trials(self.path)[0])
        if report.torn_tail:
            torn = (report.torn_line_number, report.torn_bytes)
            if torn != self._torn_reported:
                self._torn_reported = torn
                logger.warning(
                    "%s: repairing torn line %s (%d bytes)",
                    self.path,
                    report.torn_line_number,
                    report.torn_bytes,
                )
            write_bytes_atomic(self.path, b"".join(raw + b"\n" for raw in good_lines))
        self.torn_tail = False
        self.last_report = LoadReport(records=report.records)
        return report.torn_tail

    def compact(self, snapshot: StoreSnapshot | None = None) -> CompactReport:
        """Keep one line per trial id (its latest record) and drop a torn tail, atomically.

        Under the lock: read the file, keep the raw line of each id's last record (byte for
        byte) in order of each id's first appearance, and replace the file (temp file,
        fsync, rename) only if that changes anything.

        Args:
            snapshot: An earlier :meth:`snapshot`; it is used instead of reading the file
                again when the file has not changed since (same inode, size and mtime).

        Returns:
            The kept records and what was dropped.

        Raises:
            CorruptRecordError: If a line other than the last is not a valid record
                (nothing is changed then).
        """
        if not self.path.exists():
            return CompactReport(records=[], load=LoadReport(records=[]))
        with self._locked():
            info = os.stat(self.path)
            identity = (info.st_ino, info.st_size, info.st_mtime_ns)
            if snapshot is not None and snapshot.identity == identity:
                report, good_lines = snapshot.report, snapshot.lines
            else:
                report, good_lines = _scan(self.path, _read_trials(self.path)[0])
            last: dict[str, int] = {}
            for index, record in enumerate(report.records):
                last[record.id] = index  # insertion order is each id's first appearance
            keep = list(last.values())
            rewritten = report.torn_tail or len(keep) != len(report.records)
            if rewritten:
                write_bytes_atomic(self.path, b"".join(good_lines[i] + b"\n" for i in keep))
        self.torn_tail = False
        records = [report.records[i] for i in keep]
        self.last_report = LoadReport(records=records)
        return CompactReport(
            records=records,
            load=report,
            superseded=len(report.records) - len(keep),
            rewritten=rewritten,
        )

    def rewrite(self, records: Sequence[TrialRecord]) -> None:
        """Atomically replace the file's content with ``records``, one per line.

        Args:
            records: The records to keep, in order.
        """
        data = b"".join(record_line(r) + b"\n" for r in records)
        with self._locked():
            write_bytes_atomic(self.path, data)
        self.torn_tail = False
        self.last_report = None


__all__ = [
    "LOCK_FILENAME",
    "TRIALS_FILENAME",
    "CompactReport",
    "LoadReport",
    "StoreSnapshot",
    "TrialStore",
]

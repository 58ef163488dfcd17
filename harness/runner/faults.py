"""Faults of the machine that stop a run in order: a full or read-only disk, a lost engine.

A fault is not a trial's failure, and retrying trials cannot mend it. The first one found
*halts* the run (:class:`Halting`): no trial or retry starts any more, the running trials
finish and clean up where they can, whatever can still be written is written, and the run
ends with one message — what failed, how many trials are recorded, the ``--resume``
command — and the fault's exit code (``harness.errors``: 74 for a disk, 75 for the engine).

A disk fault is an ``OSError`` whose errno is ENOSPC, EDQUOT or EROFS (:data:`DISK_ERRNOS`):
raised by the run's own writes (``trials.jsonl``, ``status.json``, the log), or found in an
attempt's record (an evidence copy that hit it), where :class:`DiskGuard` checks that the
run dir's filesystem really is the one that failed before it halts the run.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.episodes.records import failure_errors
from harness.errors import EXIT_DISK_FULL, EXIT_ENGINE_OUTAGE
from harness.records import TrialRecord

DISK_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
}
"""The errnos of a filesystem that takes no more writes, with what they mean."""

_DISK_FIXES = {
    errno.ENOSPC: "free space there",
    errno.EDQUOT: "free space or raise the quota",
    errno.EROFS: "make it writable",
}
#: How an errno of DISK_ERRNOS reads in a recorded error (Python's and the engine's words).
_DISK_TEXT = re.compile(
    r"\[Errno (?:28|122|30)\]|no space left on device|disk quota exceeded|read-only file system",
    re.IGNORECASE,
)
#: Free bytes below which a run dir that reported a disk error counts as full.
FULL_BELOW_BYTES = 1 << 20
_PROBE_BYTES = 64 << 10


def disk_error(exc: BaseException | None) -> OSError | None:
    """The disk-full or read-only ``OSError`` in ``exc``, its causes or its group, if any."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo += [current.__cause__, current.__context__]
    return None


def mentions_disk_error(text: str) -> bool:
    """Whether an error message reports ENOSPC, EDQUOT or EROFS."""
    return bool(_DISK_TEXT.search(text))


def probe_writable(directory: Path) -> OSError | None:
    """Write, fsync and remove a small file in ``directory``; the disk error met, if any.

    A filesystem with less than :data:`FULL_BELOW_BYTES` free counts as full too: the
    next evidence copy would fail there.
    """
    path = directory / f".harness-probe-{secrets.token_hex(4)}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * _PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            path.unlink(missing_ok=True)
        info = os.statvfs(directory)
    except OSError as exc:
        return exc if exc.errno in DISK_ERRNOS else None
    if info.f_bavail * info.f_frsize < FULL_BELOW_BYTES:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
    return None


@dataclass(frozen=True)
class Halt:
    """Why a run stopped before its end, and what makes it go on.

    Attributes:
        reason: What failed, on one line (``no space left on device (ENOSPC) at /runs/x``).
        fix: What the user does before resuming (``free space there``).
        exit_code: The fault's exit code.
    """

    reason: str
    fix: str
    exit_code: int

    def message(self, recorded: int, planned: int, run_dir: Path) -> str:
        """The one line the user reads at the end of the run."""
        return (
            f"stopped: {self.reason}; {recorded} of {planned} trial(s) are recorded; "
            f"{self.fix}, then continue with: harness run --resume {run_dir}"
        )


def disk_halt(error: OSError, path: Path | str | None = None) -> Halt:
    """The halt for a disk error met writing ``path`` (or the path the error names)."""
    code = error.errno if error.errno in DISK_ERRNOS else errno.ENOSPC
    where = path if path is not None else error.filename
    name = errno.errorcode.get(code, str(code))
    reason = f"{DISK_ERRNOS[code]} ({name})" + (f" at {where}" if where else "")
    return Halt(reason, _DISK_FIXES[code], EXIT_DISK_FULL)


def engine_halt(engine: str, address: str | None, since: str, waited: str, error: str) -> Halt:
    """The halt for an engine that stayed unreachable past the run's wait.

    Args:
        engine: The backend's name (``docker``).
        address: Where its engine is (``unix:///var/run/docker.sock``), if known.
        since: When it stopped answering (``HH:MM:SS``).
        waited: How long the run waited (``30 min``).
        error: The engine's last error, short and on one line.
    """
    at = f" at {address}" if address else ""
    return Halt(
        f"the {engine} engine{at} has been unreachable since {since}; the run waited "
        f"{waited} for it (error: {error})",
        f"start the {engine} engine",
        EXIT_ENGINE_OUTAGE,
    )


#: Error types of the engine's own storage (its image store and build cache): a disk error
#: in one of them is the machine's, and every later build or pull would meet it too.
ENGINE_STORE_ERRORS = frozenset({"ImageBuildError", "ImagePullError"})


def engine_store_halt(message: str) -> Halt:
    """The halt for an image build or pull that found the engine's storage full."""
    excerpt = " ".join(message.split())[:200]
    return Halt(
        f"the Docker engine's image store or build cache is full or read-only ({excerpt})",
        "free space in the engine's data root (for example `docker builder prune`, "
        "`docker image prune`)",
        EXIT_DISK_FULL,
    )


class Halting:
    """The first fault of a run, shared by its threads (the first one found wins).

    Args:
        on_halt: Called once, with the halt, by the thread that found it.
    """

    def __init__(self, on_halt: Callable[[Halt], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._on_halt = on_halt
        self.halt: Halt | None = None
        #: Set once the run is halted: trial threads start nothing more.
        self.event = threading.Event()

    def set(self, halt: Halt) -> None:
        """Halt the run (a later fault changes nothing)."""
        with self._lock:
            if self.halt is not None:
                return
            self.halt = halt
        self.event.set()
        if self._on_halt is not None:
            self._on_halt(halt)

    def disk(self, error: OSError, path: Path | str | None = None) -> None:
        """Halt the run on a disk error met writing ``path``."""
        self.set(disk_halt(error, path))

    def __bool__(self) -> bool:
        return self.event.is_set()


class DiskGuard:
    """Tells a run's disk faults from other failures; halts the run on the first.

    Args:
        run_dir: The run dir (where records, evidence, status and logs are written).
        halting: The run's halt.
    """

    def __init__(self, run_dir: Path, halting: Halting) -> None:
        self.run_dir = run_dir
        self.halting = halting

    def write_failed(self, error: BaseException, path: Path) -> bool:
        """A write of the run's failed: halt on a disk error (True), else False (re-raise)."""
        found = disk_error(error)
        if found is None:
            return False
        self.halting.disk(found, path)
        return True

    def check_record(self, record: TrialRecord) -> bool:
        """Whether ``record`` failed because the run dir is full (then the run is halted).

        An error reporting ENOSPC/EDQUOT/EROFS is the run dir's when it names a path in
        it, or when a probe write there fails now; the trial's own storage filling up
        (the agent's doing) is neither. An image build or pull that reports one found the
        engine's own storage full: that halts the run too (every later build would fail).
        """
        texts = [
            error.message for error in failure_errors(record) if mentions_disk_error(error.message)
        ]
        if not texts:
            return False
        engine_side = next(
            (
                e.message
                for e in record.errors
                if e.type in ENGINE_STORE_ERRORS and e.message in texts
            ),
            None,
        )
        if engine_side is not None:
            self.halting.set(engine_store_halt(engine_side))
            return True
        named = next((text for text in texts if str(self.run_dir) in text), None)
        if named is not None:
            code = next((c for c in DISK_ERRNOS if f"[Errno {c}]" in named), errno.ENOSPC)
            found: OSError | None = OSError(code, os.strerror(code))
        else:
            found = probe_writable(self.run_dir)
        if found is None:
            return False
        self.halting.disk(found, self.run_dir)
        return True


__all__ = [
    "DISK_ERRNOS",
    "ENGINE_STORE_ERRORS",
    "FULL_BELOW_BYTES",
    "DiskGuard",
    "Halt",
    "Halting",
    "disk_error",
    "disk_halt",
    "engine_halt",
    "engine_store_halt",
    "mentions_disk_error",
    "probe_writable",
]

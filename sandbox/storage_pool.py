"""Trial filesystems made ahead in the background, and removed off the critical path.

Creating a trial's filesystem (sparse image, ``mkfs.ext4``, loop mount) and destroying it
(unmount, unlink) take tens of milliseconds each. A :class:`StoragePool` keeps the next
trial's filesystem formatted and mounted while the current trials run, and removes a
finished trial's filesystem on a background thread once every process of the trial is
dead (the backends sweep first). Each filesystem serves exactly one trial and is never
reused. :meth:`StoragePool.close` waits for every pending removal and reports what failed,
so nothing is left behind unnoticed when the run ends.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.removal import remove_tree
from sandbox.storage import (
    DEFAULT_STORAGE_MB,
    MIN_DEFAULT_STORAGE_MB,
    RESERVE_MB,
    StorageBudget,
    TrialStorage,
    reserve,
)

_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_NOATIME = 2, 4, 32, 1024
#: The longest a spare short of room waits for finished trials' filesystems to go.
_REMOVALS_WAIT_SEC = 30.0


@dataclass
class PreparedStorage:
    """A trial root holding a mounted trial filesystem, and what it was promised.

    ``laid_out``: the pool's layout hook already made the trial's dirs on it.
    """

    root: Path
    storage: TrialStorage
    promised_mb: int
    laid_out: bool = False


def _set_resgid(storage: TrialStorage, gid: int | None) -> None:
    """Give the filesystem's reserved blocks to ``gid`` (a remount; ext4 allows it)."""
    if storage.grader_gid == gid:
        return
    # The process's own symbols (libc among them): find_library("c") would run
    # `ldconfig -p` on every trial.
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_NOATIME
    data = f"resgid={gid if gid is not None else 0}".encode()
    if libc.mount(None, str(storage.mount_point).encode(), None, flags, data) != 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"cannot remount {storage.mount_point}: {os.strerror(errno)}")
    storage.grader_gid = gid


def _choose(
    waiting: list[Future[PreparedStorage]], grader_gid: int | None
) -> Future[PreparedStorage] | None:
    """The spare to hand out, if any.

    A made one for ``grader_gid``, else the oldest made one, else (none made yet) the oldest
    still being made, waited for.
    """
    made = [f for f in waiting if f.done() and f.exception() is None]
    for future in made:
        if future.result().storage.grader_gid == grader_gid:
            return future
    if made:
        return made[0]
    for future in waiting:
        if future.exception() is None:  # blocks until made
            return future
    return None


class NoRoomForSpare(SandboxError):
    """Something made ahead found no disk room free now; the trial it was for makes its own."""


class StoragePool:
    """One run's trial filesystems: made ahead, handed out once, removed in the background.

    Args:
        directory: Where trial roots are created.
        budget: The run's disk budget (spares hold their promise too).
        spares: Filesystems kept ready (follow ``-j``).
        layout: Makes a trial's dirs on a new filesystem (the same for every trial of the
            backend), so that spares come laid out.
    """

    def __init__(
        self,
        directory: Path,
        budget: StorageBudget | None,
        *,
        spares: int = 1,
        layout: Callable[[Path], None] | None = None,
    ) -> None:
        self.directory = directory
        self.budget = budget
        self.spares = spares
        self.layout = layout
        self._lock = threading.Lock()
        self._ready: dict[int | None, list[Future[PreparedStorage]]] = {}
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="storage-make")
        self._remover = ThreadPoolExecutor(1, thread_name_prefix="storage-remove")
        self._removals: list[Future[None]] = []
        self._closed = False

    def _make(self, declared_mb: int | None, grader_gid: int | None) -> PreparedStorage:
        size, promised = reserve(self.budget, declared_mb)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix="harness-trial-", dir=self.directory))
            storage = TrialStorage(root, size, grader_gid=grader_gid)
            try:
                storage.create()
                if self.layout is not None:
                    self.layout(storage.mount_point)
            except BaseException:
                storage.destroy()
                remove_tree(root)
                raise
        except BaseException:
            if self.budget is not None and promised:
                self.budget.release(promised)
            raise
        return PreparedStorage(root, storage, promised, laid_out=self.layout is not None)

    def _make_spare(self, declared_mb: int | None, grader_gid: int | None) -> PreparedStorage:
        if self.budget is not None:
            # A spare never waits for room a running trial might need: it only takes
            # what is free now.
            want = (declared_mb or DEFAULT_STORAGE_MB) + RESERVE_MB
            floor = None if declared_mb else MIN_DEFAULT_STORAGE_MB + RESERVE_MB
            if not self.budget.has_room(want, at_least_mb=floor):
                # Finished trials' filesystems being removed give their room back soon.
                self._wait_for_removals()
            if not self.budget.has_room(want, at_least_mb=floor):
                raise NoRoomForSpare("no room for a spare trial filesystem")
        return self._make(declared_mb, grader_gid)

    def _wait_for_removals(self) -> None:
        """Wait for the removals queued so far (their errors are :meth:`close`'s to report)."""
        with self._lock:
            pending = [f for f in self._removals if not f.done()]
        wait(pending, timeout=_REMOVALS_WAIT_SEC)

    def take(
        self, declared_mb: int | None, grader_gid: int | None = None, *, spare: bool = False
    ) -> PreparedStorage:
        """A trial root with its filesystem mounted; a replacement is started right away.

        Args:
            declared_mb: The task's ``storage_mb``.
            grader_gid: The group the reserved blocks are for. Replacements are made for
                the same group (a slot's grader is usually the next trial's too), which
                spares the trial a remount (~10 ms: it syncs the filesystem).
            spare: For something made ahead (a warm container): no filesystem is made
                ahead of it, and it fails rather than wait for room a running trial
                holds (it waits only for finished trials' filesystems to be removed).
        """
        with self._lock:
            queue = self._ready.setdefault(declared_mb, [])
            waiting, queue[:] = list(queue), []
        chosen = _choose(waiting, grader_gid)
        for future in waiting:
            if future is not chosen:
                self._return_spare(declared_mb, future)
        prepared = chosen.result() if chosen is not None else None
        try:
            if prepared is None:
                if spare:
                    prepared = self._make_spare(declared_mb, grader_gid)
                else:
                    self._free_room_for(declared_mb)
                    prepared = self._make(declared_mb, grader_gid)
            else:
                _set_resgid(prepared.storage, grader_gid)
        except BaseException:
            if prepared is not None:
                self.give_back(prepared)
            raise
        finally:
            # Only now: the trial's own filesystem comes first. Something made ahead (a
            # warm container) is itself the next trial's, made in the background: a
            # filesystem made ahead of it would only hold the disk's room twice.
            if not spare:
                self._refill(declared_mb, grader_gid)
        return prepared

    def _return_spare(self, declared_mb: int | None, future: Future[PreparedStorage]) -> None:
        """Queue a spare again (made or still being made); one that failed holds nothing."""
        if future.done() and future.exception() is not None:
            return
        with self._lock:
            if not self._closed:
                self._ready.setdefault(declared_mb, []).append(future)
                return
        try:
            prepared = future.result()
        except Exception:
            return
        self.give_back(prepared)

    def _refill(self, declared_mb: int | None, grader_gid: int | None) -> None:
        with self._lock:
            queue = self._ready.setdefault(declared_mb, [])
            while not self._closed and len(queue) < self.spares:
                queue.append(self._maker.submit(self._make_spare, declared_mb, grader_gid))

    def _free_room_for(self, declared_mb: int | None) -> None:
        """Remove spares of other sizes when they hold the room a trial needs now."""
        if self.budget is None:
            return
        want = (declared_mb or DEFAULT_STORAGE_MB) + RESERVE_MB
        floor = None if declared_mb else MIN_DEFAULT_STORAGE_MB + RESERVE_MB
        if self.budget.has_room(want, at_least_mb=floor):
            return
        with self._lock:
            others = [
                future
                for key, queue in self._ready.items()
                if key != declared_mb
                for future in queue
                if future.done() and future.exception() is None
            ]
            for queue in self._ready.values():
                queue[:] = [f for f in queue if f not in others]
        for future in others:
            self.give_back(future.result())

    def give_back(self, prepared: PreparedStorage, *, then: Path | None = None) -> None:
        """Remove a trial's filesystem and root in the background (its processes are dead).

        Args:
            prepared: What :meth:`take` returned.
            then: Removed after the filesystem (the trial root by default).
        """

        def remove() -> None:
            try:
                prepared.storage.destroy()
                remove_tree(then or prepared.root)
            finally:
                if self.budget is not None and prepared.promised_mb:
                    self.budget.release(prepared.promised_mb)

        with self._lock:
            self._removals = [f for f in self._removals if not f.done() or f.exception()]
            self._removals.append(self._remover.submit(remove))

    def close(self) -> list[str]:
        """Remove the spares, wait for every removal; return what could not be removed."""
        with self._lock:
            self._closed = True
            spares = [f for queue in self._ready.values() for f in queue]
            self._ready.clear()
        for spare in spares:
            try:
                self.give_back(spare.result())
            except Exception:
                pass  # a spare that was never made holds nothing
        self._maker.shutdown(wait=True)
        self._remover.shutdown(wait=True)
        failed = []
        for future in self._removals:
            error = future.exception()
            if error is not None:
                failed.append(f"trial storage removal failed: {error}")
        self._removals.clear()
        return failed

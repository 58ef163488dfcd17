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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.storage import (
    DEFAULT_STORAGE_MB,
    MIN_DEFAULT_STORAGE_MB,
    RESERVE_MB,
    StorageBudget,
    TrialStorage,
    reserve,
)

_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_NOATIME = 2, 4, 32, 1024


@dataclass
class PreparedStorage:
    """A trial root holding a mounted, empty trial filesystem, and what it was promised."""

    root: Path
    storage: TrialStorage
    promised_mb: int


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


class StoragePool:
    """One run's trial filesystems: made ahead, handed out once, removed in the background.

    Args:
        directory: Where trial roots are created.
        budget: The run's disk budget (spares hold their promise too).
        spares: Filesystems kept ready (follow ``-j``).
    """

    def __init__(self, directory: Path, budget: StorageBudget | None, *, spares: int = 1) -> None:
        self.directory = directory
        self.budget = budget
        self.spares = spares
        self._lock = threading.Lock()
        self._ready: dict[int | None, list[Future[PreparedStorage]]] = {}
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="storage-make")
        self._remover = ThreadPoolExecutor(1, thread_name_prefix="storage-remove")
        self._removals: list[Future[None]] = []
        self._closed = False

    def _make(self, declared_mb: int | None, grader_gid: int | None) -> PreparedStorage:
        from sandbox.local import remove_tree

        size, promised = reserve(self.budget, declared_mb)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            root = Path(tempfile.mkdtemp(prefix="harness-trial-", dir=self.directory))
            storage = TrialStorage(root, size, grader_gid=grader_gid)
            try:
                storage.create()
            except BaseException:
                storage.destroy()
                remove_tree(root)
                raise
        except BaseException:
            if self.budget is not None and promised:
                self.budget.release(promised)
            raise
        return PreparedStorage(root, storage, promised)

    def _make_spare(self, declared_mb: int | None) -> PreparedStorage:
        if self.budget is not None:
            # A spare never waits for room a running trial might need: it only takes
            # what is free now.
            want = (declared_mb or DEFAULT_STORAGE_MB) + RESERVE_MB
            floor = None if declared_mb else MIN_DEFAULT_STORAGE_MB + RESERVE_MB
            if not self.budget.has_room(want, at_least_mb=floor):
                raise SandboxError("no room for a spare trial filesystem")
        return self._make(declared_mb, None)

    def take(
        self, declared_mb: int | None, grader_gid: int | None = None, *, spare: bool = False
    ) -> PreparedStorage:
        """A trial root with its filesystem mounted; a replacement is started right away.

        Args:
            declared_mb: The task's ``storage_mb``.
            grader_gid: The group the reserved blocks are for.
            spare: For something made ahead (a warm container): fail rather than wait
                for disk room.
        """
        with self._lock:
            queue = self._ready.setdefault(declared_mb, [])
            waiting, queue[:] = list(queue), []
        prepared = None
        for future in waiting:  # the oldest spare that was made; later ones stay spares
            if prepared is None and future.exception() is None:
                prepared = future.result()
            elif future.exception() is None:
                self._return_spare(declared_mb, future)
        try:
            if prepared is None:
                if spare:
                    prepared = self._make_spare(declared_mb)
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
            self._refill(declared_mb)  # only now: the trial's own filesystem comes first
        return prepared

    def _return_spare(self, declared_mb: int | None, future: Future[PreparedStorage]) -> None:
        with self._lock:
            if not self._closed:
                self._ready.setdefault(declared_mb, []).append(future)
                return
        self.give_back(future.result())

    def _refill(self, declared_mb: int | None) -> None:
        with self._lock:
            queue = self._ready.setdefault(declared_mb, [])
            while not self._closed and len(queue) < self.spares:
                queue.append(self._maker.submit(self._make_spare, declared_mb))

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
        from sandbox.local import remove_tree

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

"""Warm containers: the next trial's container created and started while trials run.

A :class:`WarmPool` keeps, per container shape (image, workdir, limits, network...: what
trials of different tasks may share), up to ``spares`` containers created with exactly a
trial's flags, mounts and per-trial volume and filesystem, started, their supervisor idle
on its attach stream, waiting for its first request; with them, their network: the
network namespace's holder and its rules, or the host filter's closed chain. A trial of
that shape takes one (it is renamed for the trial) and a replacement is started in the
background. A warm container serves one trial and is never reused; one that no trial took
is removed by :meth:`WarmPool.drain` at the end of the run. All carry the run's label, so
a run killed with ``kill -9`` leaves nothing the next invocation (``--resume``) or
``harness sandbox cleanup --run`` does not remove.

Removals (container, volume, trial filesystem) run here too, in the background after the
trial's record is written; :meth:`WarmPool.drain` waits for them and reports failures.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

from sandbox.docker.sdk import call

T = TypeVar("T")

#: The most warm containers a run keeps, whatever its ``-j``.
MAX_SPARES = 4
#: The longest a make short of disk room waits for finished trials' removals (seconds).
SETTLE_TIMEOUT_SEC = 30.0


def spares_for(concurrency: int) -> int:
    """How many containers a run of ``-j concurrency`` makes ahead: one more than ``-j``.

    Making one (create, start, the supervisor's boot, its setup and network) takes longer
    than a short trial runs, so a trial that waits for the only one being made waits for
    most of a make; two made at once, on an engine that serves them side by side, halve
    that wait at ``-j 1`` (``bench/docker_overhead.py`` (f)). Capped at :data:`MAX_SPARES`.
    """
    return min(concurrency + 1, MAX_SPARES)


class WarmPool(Generic[T]):
    """Containers made ahead, by shape; and the run's background removals.

    Args:
        spares: Warm containers kept per shape (follows ``-j``); 0 disables warming.
        dispose: Removes a warm container no trial took.
    """

    def __init__(self, spares: int, dispose: Callable[[T], None]) -> None:
        self.spares = spares
        self._dispose = dispose
        self._lock = threading.Lock()
        self._ready: dict[Hashable, list[Future[T]]] = {}
        self._maker = ThreadPoolExecutor(max(1, spares), thread_name_prefix="warm-make")
        self._remover = ThreadPoolExecutor(2, thread_name_prefix="warm-remove")
        self._removals: list[Future[None]] = []
        #: Finished trials' removals (not spares'), which give disk room back: settle().
        self._returning: list[Future[None]] = []
        self._last_key: Hashable | None = None
        self._closed = False

    def take(
        self,
        key: Hashable,
        make: Callable[[], T],
        alive: Callable[[T], bool],
        *,
        upcoming: int = 1,
    ) -> T | None:
        """A warm container of shape ``key`` (None: none ready: make your own).

        Either way, when this shape repeats (a warm one was ready for it, or the trial
        before was of this shape too), up to ``min(spares, upcoming)`` containers of this
        shape are started ahead for the next trials (``upcoming``: trials of the run still
        to start), and those of other shapes are removed (at most ``spares`` warm
        containers in all). A run whose trials change shape every time (tasks with images
        of their own, interleaved) then makes none, instead of one it throws away per
        trial. One that died while waiting (``alive`` says no: e.g. the engine restarted)
        is removed.
        """
        with self._lock:
            if self._closed or self.spares < 1:
                return None
            queue = self._ready.setdefault(key, [])
            taken = queue.pop(0) if queue else None
            repeats = taken is not None or key == self._last_key
            self._last_key = key
            evicted = []
            if upcoming > 0 and repeats:
                evicted = self._evict_for(key)
                while len(queue) < min(self.spares, upcoming):
                    queue.append(self._maker.submit(make))
        for future in evicted:
            self._later(functools.partial(self._discard, future), returns_room=False)
        if taken is None:
            return None
        try:
            warm = taken.result()
        except Exception:  # a spare that failed to start: the trial starts its own
            return None
        if alive(warm):
            return warm
        self.later(lambda: self._dispose(warm))
        return None

    def _evict_for(self, key: Hashable) -> list[Future[T]]:
        """Other shapes' spares, so that at most ``spares`` warm containers exist (locked)."""
        evicted: list[Future[T]] = []
        for other in list(self._ready):
            if other != key:
                evicted += self._ready.pop(other)
        return evicted

    def _discard(self, future: Future[T]) -> None:
        try:
            warm = future.result()
        except Exception:
            return  # never made: nothing to remove
        self._dispose(warm)

    def later(self, removal: Callable[[], None]) -> None:
        """Run ``removal`` in the background (its errors are reported by :meth:`drain`)."""
        self._later(removal, returns_room=True)

    def _later(self, removal: Callable[[], None], *, returns_room: bool) -> None:
        with self._lock:
            self._removals = [f for f in self._removals if not f.done() or f.exception()]
            self._returning = [f for f in self._returning if not f.done()]
            if not self._closed:
                future = self._remover.submit(removal)
                self._removals.append(future)
                if returns_room:
                    self._returning.append(future)
                return
        removal()

    def settle(self) -> bool:
        """Wait for the finished trials' removals queued so far; whether there were any.

        Something made ahead that found no room (a filesystem for a warm container) asks
        again once they are done: a finished trial holds its share of the disk until its
        container and filesystem are removed. Removals of spares nobody took are not waited
        for (one may be waiting for the very container being made).
        """
        with self._lock:
            pending = [f for f in self._returning if not f.done()]
        # Their errors are drain()'s to report; a removal the engine takes minutes over
        # leaves the make to fail (its trial then makes its own container).
        wait(pending, timeout=SETTLE_TIMEOUT_SEC)
        return bool(pending)

    def drain(self) -> list[str]:
        """Remove every warm container and wait for all removals; what failed, as text."""
        with self._lock:
            self._closed = True
            pending = [f for queue in self._ready.values() for f in queue]
            self._ready.clear()
        self._maker.shutdown(wait=True, cancel_futures=True)
        failed = []
        for future in pending:
            if future.cancelled() or future.exception() is not None:
                continue
            try:
                self._dispose(future.result())
            except Exception as exc:
                failed.append(f"warm container removal failed: {exc}")
        self._remover.shutdown(wait=True)
        for removal in self._removals:
            error = removal.exception()
            if error is not None:
                failed.append(f"trial container cleanup failed: {error}")
        self._removals.clear()
        return failed


#: What a trial takes over from the warm container it adopts: the container, its volume,
#: filesystem, supervisor session and users. Everything else (its spec, image, workdir) the
#: trial has already, equal to the warm one's (they share :meth:`WarmPool.take`'s key).
ADOPTED_STATE = (
    "_container",
    "_volume",
    "_root",
    "_storage",
    "_prepared",
    "_rootlayer",
    "_enginefiles",
    "_root_base",
    "root_cap",
    "_channel",
    "_session",
    "_network",
    "_agent_id",
    "_verifier_id",
    "identity",
)


def adopt(trial: Any, warm: Any, pool: WarmPool[Any], name: str) -> None:
    """Make ``warm``'s container ``trial``'s: same flags, its own volume, filesystem and dirs.

    Args:
        trial: The trial's sandbox (a ``DockerSandbox`` that has not booted).
        warm: The warm one it takes over (from ``pool``); it owns nothing afterwards.
        pool: The pool ``warm`` came from; it renames the container in the background.
        name: The trial's container name.
    """
    for attr in ADOPTED_STATE:
        setattr(trial, attr, getattr(warm, attr))
    warm._stopped = True  # everything is the trial's now
    trial._warm = True
    # Named for its trial, off the critical path (only people read the name).
    container = trial._container
    pool.later(lambda: call(container.rename, name))

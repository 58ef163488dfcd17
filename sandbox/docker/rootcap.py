"""A trial's writable image root, capped where its layer cannot be moved onto the host.

Where the harness is root on the engine's host, the container's writable layer lives on
the trial's own loop filesystem (:mod:`sandbox.docker.rootlayer`): a hard cap, the record's
``sandbox.limits.storage = "hard-loop"``. Everywhere else (a docker-group user, rootless
Docker, the CI image, a remote engine) the root is still writable, capped as tightly as the
engine allows:

- ``hard-engine``: the engine caps the layer itself (``--storage-opt size=``: overlay2 on
  XFS with project quotas, btrfs, zfs); writes past ``storage_mb`` fail with ``ENOSPC``.
  Whether it can is asked of the engine, once per engine and process
  (:func:`engine_size_refusal`: a probe container created with the option, removed at once);
  never guessed from its driver's name.
- ``soft``: elsewhere. One :class:`LayerWatcher` thread per run polls each live trial's
  writable layer (``SizeRw`` of ``docker ps --size`` filtered to it: about 2 ms a poll)
  and, at the cap, calls the trial back to stop its writer (the backend kills the running
  phase's processes, and the trial ends as the agent's ``storage_full``). A trial is
  polled again within half the time its layer would need to reach the cap at the rate it
  grew, or at :data:`ASSUMED_RATE` if faster (between :data:`MIN_INTERVAL` and
  :data:`MAX_INTERVAL` seconds): a writer slower than that overshoots the cap by at most
  about half of it, a faster one by what it writes in :data:`MIN_INTERVAL`.
  :class:`EngineDisk` keeps the sum of the live trials' caps within the free space of the
  engine's data root where that is visible from here (a local engine), so trials held at
  their caps never fill the engine's disk.

In both modes the workspace is part of the root layer (no volume of its own), so it counts
against the same cap; ``/tmp``, ``/var/tmp``, the agent's home and session are tmpfs mounts
with sizes of their own (:func:`sandbox.docker.container.tmpfs_dirs`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.docker.probe import refusal
from sandbox.docker.sdk import (
    EngineObjectMissing,
    call,
    not_found,
)
from sandbox.storage import StorageBudget

logger = logging.getLogger(__name__)

#: The record's ``sandbox.limits.storage``: which cap held the image root.
HARD_LOOP = "hard-loop"
HARD_ENGINE = "hard-engine"
SOFT = "soft"
#: The probe container's ``org.harness.kind`` (removed at once; swept as a leak otherwise).
PROBE_KIND = "rootcap-probe"
#: The longest time between two polls of a trial's layer (seconds).
MAX_INTERVAL = 2.0
#: The shortest (a trial close to its cap, growing fast).
MIN_INTERVAL = 0.1
#: What the phases after a stopped writer may still add to its layer (the verifier's
#: own files) before they are stopped in turn.
GRACE_BYTES = 64 << 20
#: The write rate a poll is scheduled for when the layer grew slower (bytes/s): a writer
#: that starts between two polls at this rate overshoots by at most half what was left.
ASSUMED_RATE = 512 << 20


def engine_size_refusal(client: Any, image: str) -> str | None:
    """Whether the engine caps a container's writable layer (``storage_opt size``).

    Asked once per engine and process: a container of ``image`` is created with
    ``storage_opt={"size": "2g"}`` (above the image: btrfs counts it in) and removed at
    once. An engine whose driver cannot (overlay2 on ext4, fuse-overlayfs, vfs) refuses the
    create with its reason.

    Returns:
        None where it can; else the engine's refusal.

    Raises:
        EngineError: the engine failed otherwise (unreachable, image missing).
    """
    return refusal(client, image, kind=PROBE_KIND, start=False, storage_opt={"size": "2g"})


def engine_size_mb(cap_mb: int, driver: str, image_bytes: int) -> int:
    """The ``storage_opt size`` (MB) that lets a container write ``cap_mb`` into its root.

    overlay2 (XFS project quota) and zfs count only what the container writes; btrfs's
    qgroup limit counts what its subvolume references, the image's data included.
    """
    return cap_mb + (-(-image_bytes // (1 << 20)) if driver == "btrfs" else 0)


def layer_bytes(client: Any, container_id: str) -> int:
    """The container's writable layer, in bytes, as the engine measures it (``SizeRw``).

    Raises:
        EngineObjectMissing: no such container.
    """
    # The list endpoint measures only the containers its filter matches (the SDK's
    # inspect has no ``size``); an empty layer has no ``SizeRw``.
    found = call(client.api.containers, all=True, size=True, filters={"id": container_id})
    mine = [c for c in found if str(c.get("Id")) == container_id]
    if not mine:
        raise not_found(f"container {container_id[:12]}")
    return int(mine[0].get("SizeRw") or 0)


@dataclass
class Watched:
    """One trial's layer under watch.

    Attributes:
        container_id: The trial's container.
        limit_bytes: Its cap.
        on_full: Called from the watcher's thread when a poll finds the layer at its
            ceiling: the cap, then each time what it held at the last call plus
            :data:`GRACE_BYTES` (the phases after the stopped one can still write a little).
        used_bytes: The last size seen.
        peak_bytes: The largest size seen.
        full: The cap was reached.
    """

    container_id: str
    limit_bytes: int
    on_full: Callable[[], None]
    used_bytes: int = 0
    peak_bytes: int = 0
    full: bool = False
    ceiling: int = 0
    due: float = 0.0
    seen_at: float = field(default=0.0, repr=False)


class LayerWatcher:
    """Polls the live trials' writable layers of one run, on one thread (started lazily).

    Args:
        client: The run's engine.
        max_interval: The longest time between two polls of one trial.
    """

    def __init__(self, client: Any, *, max_interval: float = MAX_INTERVAL) -> None:
        self.client = client
        self.max_interval = max_interval
        self._cond = threading.Condition()
        self._watched: dict[str, Watched] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Polls made, and the seconds they took (the watcher's own cost).
        self.polls = 0
        self.poll_seconds = 0.0

    def watch(self, container_id: str, limit_bytes: int, on_full: Callable[[], None]) -> Watched:
        """Start watching a (started) container's layer; its entry, updated as it is polled."""
        entry = Watched(
            container_id, limit_bytes, on_full, ceiling=limit_bytes, due=time.monotonic()
        )
        with self._cond:
            self._watched[container_id] = entry
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, name="harness-layer-watcher", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        return entry

    def forget(self, container_id: str) -> None:
        """Stop watching a container (before it is removed)."""
        with self._cond:
            self._watched.pop(container_id, None)

    def close(self) -> None:
        """Stop the thread (the run is over)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        if self.polls:
            logger.debug(
                "layer watcher: %d polls, %.3f s in all (%.1f ms each)",
                self.polls,
                self.poll_seconds,
                1000 * self.poll_seconds / self.polls,
            )

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    now = time.monotonic()
                    due = [w for w in self._watched.values() if w.due <= now]
                    if due:
                        break
                    pending = [w.due for w in self._watched.values()]
                    self._cond.wait(timeout=min(pending) - now if pending else None)
                if self._closed:
                    return
            for entry in due:
                self._poll(entry)

    def _poll(self, entry: Watched) -> None:
        started = time.monotonic()
        try:
            used = layer_bytes(self.client, entry.container_id)
        except EngineObjectMissing:
            self.forget(entry.container_id)
            return
        except Exception as exc:  # the engine hiccupped: try again at the next round
            logger.debug("cannot measure %s's layer: %s", entry.container_id[:12], exc)
            entry.due = time.monotonic() + self.max_interval
            return
        now = time.monotonic()
        self.polls += 1
        self.poll_seconds += now - started
        rate = (used - entry.used_bytes) / max(now - entry.seen_at, 1e-3) if entry.seen_at else 0
        entry.used_bytes, entry.seen_at = used, now
        entry.peak_bytes = max(entry.peak_bytes, used)
        if used >= entry.ceiling:
            # Called again only after GRACE_BYTES more: a stopped writer's layer never
            # shrinks, and one stop is enough until something writes again.
            entry.full = True
            entry.ceiling = used + GRACE_BYTES
            try:
                entry.on_full()
            except Exception:
                logger.exception("cannot stop the writer of %s", entry.container_id[:12])
            entry.due = time.monotonic() + MIN_INTERVAL
            return
        # Next poll: within half the time the layer needs to reach its cap at the rate it
        # grew, or at ASSUMED_RATE if that is faster (a writer starting between polls).
        left = entry.ceiling - used
        wait = left / max(rate, ASSUMED_RATE) / 2
        entry.due = now + min(self.max_interval, max(MIN_INTERVAL, wait))


class EngineDisk:
    """The run's soft-capped trials' room on the engine's disk (its data root).

    Args:
        data_root: The engine's ``DockerRootDir``, if this host sees it (a local engine);
            None: unknown (a remote engine), where only each trial's own cap holds.
    """

    def __init__(self, data_root: Path | None) -> None:
        self.budget = StorageBudget(data_root) if data_root is not None else None

    def acquire(self, size_mb: int, cancel: threading.Event | None = None) -> None:
        """Promise a trial its cap (waiting while the live trials hold the room).

        Raises:
            StorageTooLarge: the engine's disk could not hold it with no trial running.
        """
        if self.budget is not None:
            self.budget.acquire(size_mb, cancel)

    def release(self, size_mb: int) -> None:
        """Give back a trial's promise."""
        if self.budget is not None:
            self.budget.release(size_mb)


def visible_data_root(info: dict[str, Any], local: bool) -> Path | None:
    """The engine's data root where this host sees the engine's disk, else None."""
    root = info.get("DockerRootDir")
    if not local or not root:
        return None
    path = Path(str(root))
    # Not necessarily readable (root's 0710): the disk it is on is what counts.
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


__all__ = [
    "HARD_ENGINE",
    "HARD_LOOP",
    "ASSUMED_RATE",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "PROBE_KIND",
    "SOFT",
    "GRACE_BYTES",
    "EngineDisk",
    "LayerWatcher",
    "Watched",
    "engine_size_mb",
    "engine_size_refusal",
    "layer_bytes",
    "visible_data_root",
]

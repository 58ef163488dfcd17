"""Signals and a run: counted while trials run, an interrupt while the run is prepared.

While trials run, SIGINT/SIGTERM are only counted (:class:`Interrupts`): the run's loop
decides what they mean, so a signal never unwinds a write or a cleanup halfway. Everywhere
else the handler the caller installed applies (the CLI ignores SIGINT from the moment it
hands over to the library, so no late Ctrl-C cuts the run's last writes or its output),
except while a run is prepared (:func:`interruptible`): nothing is written yet, so Ctrl-C
simply stops it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Interrupts:
    """Counts SIGINT/SIGTERM while a run executes.

    The handler only counts, and sets ``signalled`` at once so that no trial starts from the
    signal on: the run's loop acts on the count, so a signal never unwinds a write or a
    cleanup halfway. Outside the main thread no handler can be set and nothing is counted.

    Args:
        signalled: Set by the first signal (default: an event of its own).
    """

    def __init__(self, signalled: threading.Event | None = None) -> None:
        self.count = 0
        self.signalled = signalled or threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        # Safe in a handler: the main thread never waits on this event, only trial threads.
        self.signalled.set()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` (in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["Interrupts", "interruptible"]

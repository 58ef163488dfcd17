"""A test's eye on the machine while something runs: a function called again and again."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Sampler:
    """Calls ``sample()`` every ``interval`` s in a thread while the block runs.

    An exception ``sample()`` raises stops the sampling and fails the block's end.
    """

    def __init__(self, sample: Callable[[], None], interval: float = 0.05) -> None:
        self.sample = sample
        self.interval = interval
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self.errors, self.errors


__all__ = ["Sampler"]

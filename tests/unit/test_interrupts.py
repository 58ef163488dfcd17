"""The run's signal handler: it counts, and stops new trials the moment a signal lands."""

from __future__ import annotations

import os
import signal
import threading
import time

from harness.runner.interrupts import Interrupts


def test_a_signal_is_counted_and_heard_at_once_then_the_old_handler_returns() -> None:
    heard = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with Interrupts(heard) as interrupts:
        assert not heard.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        # The handler runs in the main thread once it gets there; never by waiting on
        # ``heard`` here, which is what the handler sets.
        for _ in range(500):
            if interrupts.count == 2:
                break
            time.sleep(0.01)
        assert interrupts.count == 2
        assert heard.is_set() and interrupts.signalled is heard
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_no_handler_is_set() -> None:
    seen: list[object] = []

    def body() -> None:
        with Interrupts() as interrupts:
            seen.append(signal.getsignal(signal.SIGINT))
            seen.append(interrupts.signalled.is_set())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGINT), False]

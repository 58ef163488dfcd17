"""An engine outage pauses the run instead of burning it.

:class:`EngineWatch` asks the sandbox backend whether its engine answers
(:meth:`~sandbox.plugin.SandboxBackend.health`) about once a second. When it stops
answering, the watch marks an *outage*: trial threads start no attempt until it ends
(:meth:`EngineWatch.wait_ready`), the run says so once, and the watch probes again with a
growing backoff. When the engine answers again the trials go on; past the run's deadline
(``retry.engine_wait_sec``) the watch gives up and the run stops in order.

An attempt that failed while an outage began, or while the engine is down (its ping), or with
a retryable error the backend recognises as its engine's own (the engine's socket gone or
refusing, its database closed: :meth:`~sandbox.plugin.SandboxBackend.outage_error`,
decided from where the error came from, never from a registry's or a task's words), is the
outage's doing:
the scheduler reruns it once the engine is back without spending a retry
(:meth:`EngineWatch.broke`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness.episodes.records import failure_errors
from harness.records import TrialRecord
from harness.records.status import RunState
from harness.runner.events import RunEvents
from harness.runner.faults import Halting, engine_halt
from sandbox.plugin import SandboxBackend

HEARTBEAT_SEC = 1.0
"""How often the engine is asked whether it answers while it does."""
BACKOFF_MAX_SEC = 5.0
"""The longest wait between two probes of an unreachable engine."""
SIGNATURE_RERUNS = 3
"""Reruns per trial for an engine error seen while the engine answers (a restart between
two heartbeats); past them such a failure is an ordinary one."""

Probe = Callable[[], "str | None"]


class EngineWatch:
    """Watches a run's sandbox engine; pauses the run's trials while it is unreachable.

    Args:
        probe: Returns None while the engine answers, else why not (one line).
        recognise: Whether an error message is the engine's own failure (an outage).
        wait_sec: How long to wait for an unreachable engine before giving up.
        on_down: Called once per outage with ``(why, since)``.
        on_up: Called when the engine answers again, with the outage's length in seconds.
        on_give_up: Called once when the wait is over and the engine is still away.
        heartbeat_sec: Seconds between probes while the engine answers.
    """

    def __init__(
        self,
        probe: Probe,
        *,
        recognise: Callable[[str], bool] = lambda text: False,
        wait_sec: float = 1800.0,
        on_down: Callable[[str, datetime], None] | None = None,
        on_up: Callable[[float], None] | None = None,
        on_give_up: Callable[[str, datetime], None] | None = None,
        heartbeat_sec: float = HEARTBEAT_SEC,
    ) -> None:
        self._probe = probe
        self._recognise = recognise
        self.wait_sec = wait_sec
        self._on_down = on_down
        self._on_up = on_up
        self._on_give_up = on_give_up
        self._heartbeat = heartbeat_sec
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Counts outages: an attempt that saw it change was running during one.
        self.epoch = 0
        self.down_since: datetime | None = None
        self._down_at = 0.0
        self.why = ""
        self.gave_up = False

    # -- the watching thread ------------------------------------------------------------------

    def start(self) -> None:
        """Start watching (a daemon thread)."""
        self._thread = threading.Thread(target=self._watch, name="engine-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and wake every waiting trial."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _ask(self) -> str | None:
        try:
            return self._probe()
        except Exception as exc:  # a probe that fails is an answer too
            return f"{type(exc).__name__}: {exc}"

    def _watch(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            why = self._ask()
            if why is None:
                self._mark_up()
                backoff = 1.0
                self._stop.wait(self._heartbeat)
                continue
            if self._mark_down(why):
                return
            self._stop.wait(min(backoff, self._left()))
            backoff = min(backoff * 2, BACKOFF_MAX_SEC)

    def _left(self) -> float:
        with self._lock:
            return max(0.05, self._down_at + self.wait_sec - time.monotonic())

    def _mark_down(self, why: str) -> bool:
        """Note an unanswered probe; True once the wait is over (the watch gave up)."""
        now = time.monotonic()
        with self._changed:
            first = self.down_since is None
            if first:
                self.epoch += 1
                self.down_since = datetime.now(UTC)
                self._down_at = now
                self.why = why
            since = self.down_since
            assert since is not None
            over = now - self._down_at >= self.wait_sec
            if over:
                self.gave_up = True
                self._changed.notify_all()
        if first and self._on_down is not None:
            self._on_down(why, since)
        if over and self._on_give_up is not None:
            self._on_give_up(self.why, since)
        return over

    def _mark_up(self) -> None:
        with self._changed:
            if self.down_since is None:
                return
            lasted = time.monotonic() - self._down_at
            self.down_since = None
            self._changed.notify_all()
        if self._on_up is not None:
            self._on_up(lasted)

    # -- what trial threads ask ------------------------------------------------------------------

    @property
    def down(self) -> bool:
        """Whether an outage is going on."""
        with self._lock:
            return self.down_since is not None

    def wait_ready(self, stop: Callable[[], bool]) -> bool:
        """Block while the engine is unreachable.

        Args:
            stop: Polled while waiting; True ends the wait (the run is interrupted or halted).

        Returns:
            True when the engine answers; False when the watch gave up or ``stop()`` said so.
        """
        with self._changed:
            while True:
                if self.gave_up or stop():
                    return False
                if self.down_since is None:
                    return True
                if self._stop.is_set():
                    return False
                self._changed.wait(0.2)

    def check_now(self) -> bool:
        """Probe at once (not waiting for the heartbeat); True if the engine is down."""
        why = self._ask()
        if why is None:
            return self.down
        self._mark_down(why)
        return True

    def broke(self, record: TrialRecord, epoch: int, signature_reruns: int) -> str | None:
        """Whether an outage broke this failed attempt, and how (None: it did not).

        Args:
            record: The attempt's record.
            epoch: :attr:`epoch` when the attempt started.
            signature_reruns: Reruns this trial already had for an engine error alone.
        """
        if record.ok:
            return None
        if self.epoch != epoch:
            return "an engine outage began while it ran"
        if self.check_now():
            return "the engine is unreachable"
        # The engine answers: only its own failure's signature, on an error a retry could
        # change, says a restart fell between two pings. A permanent error (a registry's
        # refusal, a build's failure) was decided from an answer, whatever its words.
        if signature_reruns < SIGNATURE_RERUNS and any(
            error.retryable and self._recognise(error.message) for error in failure_errors(record)
        ):
            return "the engine failed it"
        return None


DETAIL_CHARS = 120
"""The most of the engine's own error a message quotes (on one line)."""


def detail(why: str) -> str:
    """The engine's error as a short aside: one line, at most :data:`DETAIL_CHARS`."""
    line = " ".join(why.split())
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


def wait_words(seconds: float) -> str:
    """A wait as people say it: ``45 s``, ``30 min``."""
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def watch_engine(
    backend: SandboxBackend,
    *,
    wait_sec: float,
    run_dir: Path,
    events: RunEvents,
    state: RunState,
    log: Callable[[str], None],
    halting: Halting,
) -> EngineWatch:
    """An engine watch wired to a run: one message, a pause in the status, then a halt.

    Each outage is said once to the observer (what happened, how long the run waits, how
    to go on; the engine's own error only as a short aside) and shown in ``status.json``
    (``paused``); the run is halted when the wait is over.

    Args:
        backend: The run's sandbox backend (its ``health``, ``outage_error`` and
            ``engine_address``).
        wait_sec: ``retry.engine_wait_sec``.
        run_dir: The run dir (the ``--resume`` the message names).
        events: The run's observer (it hears the one message of an outage).
        state: The run's live state (``paused`` while the engine is away).
        log: The invocation's log.
        halting: The run's halt, set when the wait is over.
    """
    name = f"{backend.name} engine"
    address = backend.engine_address()
    at = f" at {address}" if address else ""
    wait = wait_words(wait_sec)

    def down(why: str, since: datetime) -> None:
        stamp = since.astimezone().strftime("%H:%M:%S")
        what = f"{name} unreachable{at} since {stamp}; no trial starts until it answers again"
        log(f"{what} (error: {' '.join(why.split())})")
        events.message(
            f"{what}. Start it: the run waits up to {wait}, then stops (continue with: "
            f"harness run --resume {run_dir}); Ctrl-C stops it now. (error: {detail(why)})"
        )
        state.pause(
            f"{name} unreachable{at} (error: {detail(why)})",
            since,
            since + timedelta(seconds=wait_sec),
        )

    def up(lasted: float) -> None:
        log(f"{name} answers again after {lasted:.1f}s; trials go on")
        state.unpause()

    def give_up(why: str, since: datetime) -> None:
        stamp = since.astimezone().strftime("%H:%M:%S")
        log(f"{name} still unreachable after {wait}: stopping the run")
        halting.set(engine_halt(backend.name, address, stamp, wait, detail(why)))

    return EngineWatch(
        backend.health,
        recognise=backend.outage_error,
        wait_sec=wait_sec,
        on_down=down,
        on_up=up,
        on_give_up=give_up,
    )


__all__ = [
    "BACKOFF_MAX_SEC",
    "DETAIL_CHARS",
    "HEARTBEAT_SEC",
    "SIGNATURE_RERUNS",
    "EngineWatch",
    "detail",
    "wait_words",
    "watch_engine",
]

"""Running one planned trial to its final record: attempts, retries with backoff, history.

Each trial runs in a worker thread of the run's pool (``-j`` bounds them), each attempt
where the run's executor puts it (this thread, or a Ray task the thread waits for); nothing
here holds a lock across trials. Every attempt's record is appended to ``trials.jsonl`` as
soon as it exists (the latest record of an id wins), so a crash loses at most the attempts in
flight.
A retried attempt's evidence moves to ``attempts/<trial id>/<attempt>/`` and its status and
errors go into the next attempt's ``previous_attempts``.

Faults of the machine are not the trial's (:mod:`.outage`, :mod:`.faults`): no attempt
starts while the engine is unreachable, an attempt an outage broke is rerun once the engine
answers without spending a retry, and a full run dir halts the run (the trial ends with what
is recorded, or with nothing: :class:`NotRun`).

:class:`AgentGate` bounds the agent phases running at once across all trials of the run
(``agent_concurrency``): a trial holds a slot only while its agent runs, never while its
sandbox starts or its verifier runs.
"""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.config import RetryConfig
from harness.episodes.records import failure_errors, with_history
from harness.errors import HarnessError, TrialCancelled
from harness.records import AttemptSummary, TrialRecord, TrialStore
from harness.runner.faults import DiskGuard, Halting
from harness.runner.outage import EngineWatch
from harness.status import RunState
from harness.trial import TrialPlan, TrialSettings, run_trial

AttemptRunner = Callable[[TrialPlan, TrialSettings, int], TrialRecord]
"""Runs one attempt of a trial to its record (the run's executor)."""

ATTEMPTS_DIRNAME = "attempts"
"""Where retried attempts' evidence is kept inside a run dir."""


class AgentGate:
    """A run-wide bound on concurrent agent phases (``agent_concurrency``).

    Args:
        limit: Agent phases allowed at once; None for no bound beyond ``-j``.
        cancel: The run's cancel event: a trial waiting for a slot gives up when it is set.
        on_wait: Called with ``(trial_id, waiting)`` when a trial starts/stops waiting.
    """

    def __init__(
        self,
        limit: int | None,
        cancel: threading.Event,
        on_wait: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit) if limit else None
        self._cancel = cancel
        self._on_wait = on_wait

    @contextmanager
    def __call__(self, trial_id: str) -> Iterator[None]:
        """Hold an agent slot for the duration of the block.

        Raises:
            TrialCancelled: The run was interrupted while the trial waited for a slot.
        """
        slots = self._slots
        if slots is None:
            yield
            return
        if not slots.acquire(blocking=False):
            if self._on_wait is not None:
                self._on_wait(trial_id, True)
            while not slots.acquire(timeout=0.2):
                if self._cancel.is_set():
                    raise TrialCancelled("run interrupted while waiting for an agent slot")
            if self._on_wait is not None:
                self._on_wait(trial_id, False)
        try:
            yield
        finally:
            slots.release()


def _in_this_thread(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
    return run_trial(plan, settings, attempt=attempt)


class NotRun(HarnessError):  # noqa: N818 - an outcome, not a failure
    """A trial that ends without a record in this invocation (the run halted or stopped).

    ``--resume`` runs it; the reason is the run's, already reported once.
    """


class TrialRunner:
    """Runs planned trials to their final record, retrying as the retry config says.

    Args:
        settings: What every trial shares (its ``cancel`` event stops retries too).
        store: The run's ``trials.jsonl``.
        retry: The retry rules.
        state: Live run state (running trials, phases, counts).
        on_retry: Called as ``on_retry(record, delay)`` before a retry's wait.
        log: Writes one line to the invocation's ``eval.log``.
        rng: Randomness for the backoff jitter.
        run_attempt: Runs one attempt (the executor's; default: in this thread).
        watch: The engine watch (none: the engine never goes away).
        disk: Tells disk faults from failures and halts the run (none: nothing halts it).
    """

    def __init__(
        self,
        *,
        settings: TrialSettings,
        store: TrialStore,
        retry: RetryConfig,
        state: RunState,
        on_retry: Callable[[TrialRecord, float], None] | None = None,
        log: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        run_attempt: AttemptRunner | None = None,
        watch: EngineWatch | None = None,
        disk: DiskGuard | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.retry = retry
        self.state = state
        self.on_retry = on_retry
        self.log = log or (lambda text: None)
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._run_attempt = run_attempt or _in_this_thread
        self.watch = watch
        self.disk = disk or DiskGuard(settings.run_dir, Halting())
        self.halting = self.disk.halting

    def _keep_evidence(self, trial_id: str, attempt: int) -> str | None:
        """Move ``trials/<id>`` to ``attempts/<id>/<attempt>``; return it (run-dir relative)."""
        run_dir = self.settings.run_dir
        source = run_dir / "trials" / trial_id
        relative = Path(ATTEMPTS_DIRNAME) / trial_id / str(attempt)
        target = run_dir / relative
        if target.exists():
            # Kept by an invocation that died before recording the next attempt.
            shutil.rmtree(source, ignore_errors=True)
            return str(relative)
        if not source.is_dir():
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
        return str(relative)

    def _delay(self, retry: int) -> float:
        with self._rng_lock:
            fraction = self._rng.random()
        return self.retry.delay(retry, fraction)

    def _stopping(self) -> bool:
        return self.settings.cancel.is_set() or bool(self.halting)

    def _ready(self) -> bool:
        """Wait while the engine is away; False when the run halted, gave up or stopped."""
        if self.halting:
            return False
        if self.watch is None:
            return True
        return self.watch.wait_ready(self._stopping)

    def _sleep(self, delay: float) -> bool:
        """Back off ``delay`` seconds; True when an interrupt or a halt ended the wait."""
        return _wait_either(self.settings.cancel, self.halting.event, delay)

    def _persist(self, plan: TrialPlan, record: TrialRecord) -> None:
        """Append the attempt's record; a full run dir halts the run (:class:`NotRun`)."""
        try:
            self.store.append(record)
        except OSError as exc:
            if not self.disk.write_failed(exc, self.store.path):
                raise
            self.state.trial_dropped(plan.id)
            raise NotRun(plan.id) from None

    def _retries(self, record: TrialRecord, retries: int) -> bool:
        """Whether a failed attempt is retried (retries left, its errors retryable)."""
        names = [error.type for error in failure_errors(record)]
        return (
            retries < self.retry.max_retries
            and not self._stopping()
            and self.retry.retryable(str(record.status), names)
            # A failure that cannot change on a retry is final, whatever the rules say.
            and all(error.retryable for error in record.errors)
        )

    def _outage(self, record: TrialRecord, epoch: int, reruns: int) -> str | None:
        """How an engine outage broke this attempt (None: it did not, or no watch)."""
        if self.watch is None or self.halting:
            return None
        return self.watch.broke(record, epoch, reruns)

    def run(self, plan: TrialPlan, prior: TrialRecord | None = None) -> TrialRecord:
        """Run a trial (continuing from ``prior``, its record of an earlier invocation).

        Returns:
            The final record of this invocation (also appended to the store).

        Raises:
            NotRun: The run halted (or stopped waiting for the engine) before this trial
                had a record in this invocation.
        """
        history: list[AttemptSummary] = []
        attempt = 1
        if prior is not None:
            history = [*prior.previous_attempts, self._summary(prior)]
            attempt = prior.attempt + 1
        retries = engine_reruns = 0
        if not self._ready():
            raise NotRun(plan.id)
        while True:
            epoch = self.watch.epoch if self.watch is not None else 0
            self.state.trial_started(plan.id, plan.task.key, attempt)
            record = self._run_attempt(plan, self.settings, attempt)
            if history:
                record = record.model_copy(update={"previous_attempts": list(history)})
                record = with_history(record)
            self._persist(plan, record)
            first = record.errors[0].message if record.errors else ""
            halted = self.disk.check_record(record)
            broke = None if halted else self._outage(record, epoch, engine_reruns)
            if broke is not None:
                engine_reruns += broke == "the engine failed it"
                self.log(
                    f"trial {plan.id} attempt {attempt} {record.status} ({first}): {broke}; "
                    "it reruns once the engine answers, no retry spent"
                )
                self.state.phase(plan.id, "paused")
            elif self._retries(record, retries):
                retries += 1
                delay = self._delay(retries)
                self.log(
                    f"trial {plan.id} attempt {attempt} {record.status} ({first}); retry "
                    f"{retries}/{self.retry.max_retries} in {delay:.1f}s"
                )
                self.state.retrying(plan.id)
                if self.on_retry is not None:
                    self.on_retry(record, delay)
                if self._sleep(delay):
                    # Interrupted or halted while backing off: the failed attempt is this
                    # run's answer (already recorded, its evidence still in trials/<id>).
                    self.state.trial_finished(record)
                    return record
            else:
                self.state.trial_finished(record)
                return record
            if not self._ready():
                self.state.trial_finished(record)
                return record
            history.append(self._summary(record))
            attempt += 1

    def _summary(self, record: TrialRecord) -> AttemptSummary:
        kept = self._keep_evidence(record.id, record.attempt)
        return AttemptSummary.of(record, evidence_dir=kept)


def _wait_either(first: threading.Event, second: threading.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` s for either event; True if one is set."""
    step = min(0.2, timeout) if timeout > 0 else 0
    left = timeout
    while True:
        if first.is_set() or second.is_set():
            return True
        if left <= 0:
            return False
        first.wait(step)
        left -= step


__all__ = ["ATTEMPTS_DIRNAME", "AgentGate", "AttemptRunner", "NotRun", "TrialRunner"]

"""Running one planned trial to its final record: attempts, retries with backoff, history.

Each trial runs in a worker thread of the run's pool (``-j`` bounds them); nothing here holds
a lock across trials. Every attempt's record is appended to ``trials.jsonl`` as soon as it
exists (the latest record of an id wins), so a crash loses at most the attempts in flight.
A retried attempt's evidence moves to ``attempts/<trial id>/<attempt>/`` and its status and
errors go into the next attempt's ``previous_attempts``.

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
from harness.episodes.records import error_types, with_history
from harness.errors import TrialCancelled
from harness.records import AttemptSummary, TrialRecord, TrialStore
from harness.status import RunState
from harness.trial import TrialPlan, TrialSettings, run_trial

#: Runs one attempt of a planned trial (a plain trial, or an episode of the run's env).
AttemptRunner = Callable[[TrialPlan, TrialSettings, int], TrialRecord]


def run_plain_trial(plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
    """One attempt of a plain trial (the ``single`` env)."""
    return run_trial(plan, settings, attempt=attempt)

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
        attempt_runner: Runs one attempt (default: a plain trial; an env's episode).
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
        attempt_runner: AttemptRunner = run_plain_trial,
    ) -> None:
        self.attempt_runner = attempt_runner
        self.settings = settings
        self.store = store
        self.retry = retry
        self.state = state
        self.on_retry = on_retry
        self.log = log or (lambda text: None)
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()

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

    def run(self, plan: TrialPlan, prior: TrialRecord | None = None) -> TrialRecord:
        """Run a trial (continuing from ``prior``, its record of an earlier invocation).

        Returns:
            The final record of this invocation (also appended to the store).
        """
        history: list[AttemptSummary] = []
        attempt = 1
        if prior is not None:
            history = [*prior.previous_attempts, self._summary(prior)]
            attempt = prior.attempt + 1
        retries = 0
        cancel = self.settings.cancel
        while True:
            self.state.trial_started(plan.id, plan.task.key, attempt)
            record = self.attempt_runner(plan, self.settings, attempt)
            if history:
                record = record.model_copy(update={"previous_attempts": list(history)})
                record = with_history(record)
            self.store.append(record)
            names = error_types(record)
            again = (
                retries < self.retry.max_retries
                and not cancel.is_set()
                and self.retry.retryable(str(record.status), names)
                # A failure that cannot change on a retry is final, whatever the rules say.
                and all(error.retryable for error in record.errors)
            )
            if not again:
                self.state.trial_finished(record)
                return record
            retries += 1
            delay = self._delay(retries)
            first = record.errors[0].message if record.errors else ""
            self.log(
                f"trial {plan.id} attempt {attempt} {record.status} ({first}); retry "
                f"{retries}/{self.retry.max_retries} in {delay:.1f}s"
            )
            self.state.retrying(plan.id)
            if self.on_retry is not None:
                self.on_retry(record, delay)
            if cancel.wait(delay):
                # Interrupted while backing off: the failed attempt is this run's answer
                # (already recorded, its evidence still in trials/<id>).
                self.state.trial_finished(record)
                return record
            history.append(self._summary(record))
            attempt += 1

    def _summary(self, record: TrialRecord) -> AttemptSummary:
        kept = self._keep_evidence(record.id, record.attempt)
        return AttemptSummary.of(record, evidence_dir=kept)


__all__ = ["ATTEMPTS_DIRNAME", "AgentGate", "AttemptRunner", "TrialRunner", "run_plain_trial"]

"""Running one planned trial to its final record: attempts, retries with backoff, history.

Each trial runs in a worker thread of the run's pool (``-j`` bounds them), each attempt
where the run's executor puts it (this thread, or a Ray task the thread waits for); nothing
here holds a lock across trials. Every attempt's record is appended to ``trials.jsonl`` as
soon as it exists (the latest record of an id wins), so a crash loses at most the attempts in
flight.
A retried attempt's evidence moves to ``attempts/<trial id>/<attempt>/`` and its status and
errors go into the next attempt's ``previous_attempts``.

Every attempt is recorded, whatever it wrote: an attempt that raised, or whose record
cannot be written, is recorded by a minimal fallback record (``internal_error``, never
retried here; ``--resume`` reruns it as the trial's next attempt, its history kept). Only a
full run dir leaves an attempt without a record.

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
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from harness.config import RetryConfig
from harness.episodes.records import failure_errors, with_history
from harness.errors import HarnessError, TrialCancelled
from harness.records import (
    AgentRef,
    AttemptSummary,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    TrialStore,
)
from harness.records.failpoints import fail_point
from harness.records.layout import ATTEMPTS_DIRNAME, attempt_evidence_dir, trial_evidence_dir
from harness.records.status import RunState
from harness.runner.faults import DiskGuard, Halting, disk_error
from harness.runner.outage import EngineWatch
from harness.trial import TrialPlan, TrialSettings, run_trial
from sandbox.pathnames import escape

AttemptRunner = Callable[[TrialPlan, TrialSettings, int], TrialRecord]
"""Runs one attempt of a trial to its record (the run's executor)."""

#: How long a trial that a group interrupt cancelled (through a host tool or a supervisor
#: it killed) waits for the run to hear the signal too, before its thread may start another
#: trial (:meth:`TrialRunner.run`).
INTERRUPT_GRACE_SEC = 2.0

RECORD_NOT_WRITTEN = "RecordNotWritten"
"""The error type of a fallback record: the attempt's own record could not be written."""
ATTEMPT_RAISED = "AttemptRaised"
"""The error type of a fallback record: the attempt raised instead of returning a record."""
_REASON_CHARS = 2000


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


class NotRun(HarnessError):  # an outcome, not a failure
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
        interrupted: Set by the run's first interrupt signal, before the run's loop acts on
            it: no trial starts after it (none: only ``settings.cancel`` stops them).
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
        interrupted: threading.Event | None = None,
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
        self.interrupted = interrupted or threading.Event()

    def _keep_evidence(self, trial_id: str, attempt: int) -> str | None:
        """Move ``trials/<id>`` to ``attempts/<id>/<attempt>``; return it (run-dir relative)."""
        run_dir = self.settings.run_dir
        source = run_dir / trial_evidence_dir(trial_id)
        relative = attempt_evidence_dir(trial_id, attempt)
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

    def _persist(self, plan: TrialPlan, record: TrialRecord) -> TrialRecord:
        """Append the attempt's record, or its fallback if it cannot be written.

        Returns:
            The record written: ``record``, or the fallback that stands for it.

        Raises:
            NotRun: The run dir is full (the run halts; ``--resume`` runs the trial).
        """
        try:
            fail_point("record")
            self._append(plan, record)
            return record
        except NotRun:
            raise
        except Exception as exc:  # a record that cannot be written is still recorded
            fallback = self._fallback(
                plan,
                record.attempt,
                record.started_at,
                RECORD_NOT_WRITTEN,
                f"the record of attempt {record.attempt} (status {record.status}, reward "
                f"{record.reward}) could not be written: {type(exc).__name__}: {exc}",
                record,
            )
        try:
            self._append(plan, fallback)
        except NotRun:
            raise
        except Exception:  # the history is what else it holds: keep the trial recorded
            fallback = fallback.model_copy(update={"previous_attempts": []})
            self._append(plan, fallback)
        return fallback

    def _append(self, plan: TrialPlan, record: TrialRecord) -> None:
        """Append one record; a full run dir halts the run (:class:`NotRun`)."""
        try:
            self.store.append(record)
        except OSError as exc:
            if not self.disk.write_failed(exc, self.store.path):
                raise
            self.state.trial_dropped(plan.id)
            raise NotRun(plan.id) from None

    def _fallback(
        self,
        plan: TrialPlan,
        attempt: int,
        started_at: datetime,
        kind: str,
        reason: str,
        lost: TrialRecord | None = None,
    ) -> TrialRecord:
        """The minimal record of an attempt that has no record of its own (always written).

        Every string is escaped and bounded (docs/run-dir.md): it serializes whatever the
        reason's text holds. Its error is not retryable: the harness failed, not the machine.
        """
        task = plan.task
        error = TrialError.model_validate(
            {
                "type": kind,
                "message": escape(reason)[:_REASON_CHARS],
                "phase": "persist" if kind == RECORD_NOT_WRITTEN else "execute",
                "retryable": False,
            }
        )
        history = list(lost.previous_attempts) if lost is not None else []
        agent = getattr(self.settings.agent, "name", None)
        return TrialRecord(
            id=plan.id,
            task=TaskRef(
                name=escape(task.name),
                key=escape(task.key),
                hash=task.hash,
                path=escape(str(task.path)),
            ),
            agent=AgentRef(name=escape(str(agent or "unknown")), model=self.settings.model),
            sandbox=SandboxRef(
                backend=escape(lost.sandbox.backend) if lost is not None else "unknown"
            ),
            rollout=plan.rollout,
            attempt=attempt,
            status=TrialStatus.INTERNAL_ERROR,
            ok=False,
            errors=[error],
            previous_attempts=history,
            versions=dict(self.settings.versions),
            started_at=started_at,
            finished_at=datetime.now(UTC),
            evidence_dir=lost.evidence_dir if lost is not None else None,
        )

    def _attempt(self, plan: TrialPlan, attempt: int, history: list[AttemptSummary]) -> TrialRecord:
        """Run one attempt to a record: its own, or the fallback if it raised.

        A disk error of the run dir is the machine's and is raised (the run halts).
        """
        started_at = datetime.now(UTC)
        try:
            record = self._run_attempt(plan, self.settings, attempt)
            if history:
                record = record.model_copy(update={"previous_attempts": list(history)})
                record = with_history(record)
            return record
        except Exception as exc:
            if disk_error(exc) is not None or isinstance(exc, NotRun):
                raise
            detail = "".join(traceback.format_exception(exc)).rstrip()
            self.log(f"trial {plan.id} attempt {attempt}: internal error, recorded:\n{detail}")
            record = self._fallback(
                plan, attempt, started_at, ATTEMPT_RAISED, f"{type(exc).__name__}: {exc}"
            )
            return record.model_copy(update={"previous_attempts": list(history)})

    def _retries(self, record: TrialRecord, retries: int) -> bool:
        """Whether a failed attempt is retried (retries left, its errors retryable)."""
        failures = failure_errors(record)
        names = [error.type for error in failures]
        causes = [str((error.model_extra or {}).get("cause")) for error in failures]
        return (
            retries < self.retry.max_retries
            and not self._stopping()
            and self.retry.retryable(str(record.status), names, causes)
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
        # A signal the run has not acted on yet already stops new trials: a thread whose
        # trial just ended must not start the next one in the run loop's polling interval.
        if self.interrupted.is_set() or not self._ready():
            raise NotRun(plan.id)
        while True:
            epoch = self.watch.epoch if self.watch is not None else 0
            self.state.trial_started(plan.id, plan.task.key, attempt)
            record = self._persist(plan, self._attempt(plan, attempt, history))
            # One line of eval.log, whatever the message quotes (a name with a newline).
            first = _one_line(record.errors[0].message) if record.errors else ""
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
                self._await_interrupt(record)
                return record
            if not self._ready():
                self.state.trial_finished(record)
                return record
            history.append(self._summary(record))
            attempt += 1

    def _await_interrupt(self, record: TrialRecord) -> None:
        """Give an interruption that cancelled ``record`` time to reach the run too.

        A trial is cancelled before the run is only when a host tool or a starting local
        supervisor died of the signal the terminal sent the whole process group
        (:class:`~sandbox.errors.HostToolInterrupted`): the harness got it as well and sets
        :attr:`interrupted` within moments, which then keeps this thread from starting
        another trial. A signal sent to that process alone never comes: the wait ends
        after :data:`INTERRUPT_GRACE_SEC` and the run goes on.
        """
        if record.status == TrialStatus.CANCELLED and not self._stopping():
            self.interrupted.wait(INTERRUPT_GRACE_SEC)

    def _summary(self, record: TrialRecord) -> AttemptSummary:
        kept = self._keep_evidence(record.id, record.attempt)
        return AttemptSummary.of(record, evidence_dir=kept)


def _one_line(text: str, limit: int = 500) -> str:
    """``text`` on one printable line: control characters and surrogates escaped."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
        for ch in text[:limit]
    )


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

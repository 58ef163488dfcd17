"""Executing a prepared run: start, drive the trials, finish (persist, summarize).

One invocation (the first run, or one ``--resume``) reads top to bottom:

- :meth:`Invocation.start` opens the invocation's log, tidies the run dir (torn tail,
  compaction, leaks), builds the live state and the trial runner, tells the observer;
- :meth:`Invocation.drive` runs the trials on a thread pool (``-j``), each attempt where the
  run's executor puts it (``--executor``: this process, or a Ray cluster), and handles
  interrupts: the first SIGINT/SIGTERM stops scheduling, kills the running trials' agents
  and lets each trial clean up (they are recorded ``cancelled``); a second one removes the
  run's sandboxes at once (on every node) and waits at most ``ABORT_GRACE_SEC`` for the
  trials;
- :meth:`Invocation.finish` closes the backend and the executor, compacts ``trials.jsonl``,
  writes ``summary.json`` and the final ``status.json``, and picks the exit code.

A resume that finds every trial done only tidies and rewrites the summary
(:func:`_nothing_to_resume`).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from harness.config import RunConfig, save_config
from harness.datasets import write_lock
from harness.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TRIAL_ERRORS, DiskFull
from harness.gateway import Gateway
from harness.records import TrialRecord, TrialStore, latest_by_id
from harness.records.failpoints import kill_point
from harness.records.layout import (
    CONFIG_FILENAME,
    LOG_FILENAME,
    STATUS_FILENAME,
    SUMMARY_FILENAME,
)
from harness.records.metrics import Summary, summarize
from harness.records.model import tampered_verdict
from harness.records.status import RunState, StatusWriter
from harness.runner import dataset_metrics
from harness.runner.events import RunEvents, RunOutcome, RunStart
from harness.runner.faults import DiskGuard, Halt, Halting, disk_error, disk_halt
from harness.runner.interrupts import Interrupts
from harness.runner.model_access import start_gateway
from harness.runner.outage import EngineWatch, watch_engine
from harness.runner.prepare import PreparedRun, versions
from harness.runner.rundir import (
    RunLog,
    close_backend,
    create_run_dir,
    latest_invocation,
    latest_log,
    log_closed,
    open_invocation_log,
    tidy,
    write_summary,
)
from harness.runner.scheduler import AgentGate, NotRun, TrialRunner
from harness.tasks.networks import run_network
from harness.trial import TrialCountdown, TrialPlan, TrialSettings
from sandbox.backend import CloseReport

ABORT_GRACE_SEC = 10.0
"""After a second interrupt, how long the harness still waits for running trials."""
POLL_SEC = 0.25
"""How often the run's loop looks at finished trials, signals and the status file."""


def planned_per_task(plans: Sequence[TrialPlan]) -> dict[str, int]:
    """Task key → how many of ``plans`` run it (the summary's per-task denominators)."""
    return dict(Counter(plan.task.key for plan in plans))


def exit_code(config: RunConfig, records: list[TrialRecord], summary: Summary, failed: bool) -> int:
    """0 when every trial ran and was graded (and ``fail_under`` is met), else 1.

    With ``fail_on_tampering``, a verdict taken after tampering is 1 as well.
    """
    if failed or any(not r.ok for r in records):
        return EXIT_TRIAL_ERRORS
    if config.fail_on_tampering and any(tampered_verdict(r) for r in records):
        return EXIT_TRIAL_ERRORS
    if config.fail_under is not None and (
        summary.mean_reward is None or summary.mean_reward < config.fail_under
    ):
        return EXIT_TRIAL_ERRORS
    return EXIT_OK


def execute_run(prepared: PreparedRun, *, events: RunEvents | None = None) -> RunOutcome:
    """Run every planned trial that has no final record; persist; summarize.

    Args:
        prepared: From :func:`~harness.runner.prepare.prepare_run` (a new run, or a resume).
        events: Observer of the run (a display).

    Returns:
        The outcome; ``exit_code`` is 0, 1 or 130, or 74/75 when a fault of the machine
        (a full disk, an engine that stayed away) stopped the run in order.

    Raises:
        DiskFull: The run dir took no write before the trials could start (nothing lost).
    """
    observer = events or RunEvents()
    try:
        if prepared.resume is None:
            prepared.lock = create_run_dir(prepared.run_dir)
        for warning in prepared.backend.warnings:
            observer.warning(warning)
        for problem in prepared.skipped:
            observer.warning(f"skipped invalid task: {problem}")
        outcome = _execute(prepared, prepared.run_dir.resolve(), observer)
    except OSError as exc:
        prepared.close()
        found = disk_error(exc)
        if found is None:
            raise
        raise DiskFull(_unwritable(prepared, found)) from None
    except BaseException:
        prepared.close()
        raise
    finally:
        prepared.release()
    observer.run_finished(outcome)
    return outcome


def _execute(prepared: PreparedRun, run_dir: Path, events: RunEvents) -> RunOutcome:
    config = prepared.config
    vers = versions(config)
    if prepared.resume is None:
        save_config(config, run_dir / CONFIG_FILENAME, extra={"versions": vers})
        if prepared.datasets_lock is not None:
            write_lock(prepared.datasets_lock, run_dir)
    elif prepared.resume.to_run == 0:
        return _nothing_to_resume(prepared, run_dir, events)
    number, log = open_invocation_log(run_dir)
    gateway = None
    try:
        if prepared.model is not None:
            gateway = start_gateway(
                prepared.model, prepared.credentials, config.budget, config.gateway
            )
            log(f"model gateway started for {prepared.model.spec.id}")
        invocation = Invocation(prepared, run_dir, number, log, events, vers, gateway)
        invocation.start()
        # Signals are only counted from here to the end: none unwinds a write halfway.
        with Interrupts(invocation.signalled) as interrupts:
            invocation.drive(interrupts)
            return invocation.finish()
    finally:
        if gateway is not None:
            gateway.close()
        log.close()


def _close_places(prepared: PreparedRun, log: RunLog, events: RunEvents, of_run: str) -> None:
    """Close the backend, then the executor (its nodes' leftovers); say what both did.

    The counts go to the terminal, the names to the log: what was removed, and apart
    from it what could not be (with the command that removes it later).
    """
    prepared.closed = True
    report = close_backend(prepared.backend, log)
    try:
        remote = prepared.executor.close()
    except Exception as exc:  # the records are safe; say what may be left on other nodes
        remote = CloseReport(failed=[f"closing the {prepared.executor.name} executor: {exc}"])
    log_closed(remote, log, " on other nodes")
    report += remote
    if report.removed:
        events.message(f"removed {len(report.removed)} leaked sandbox object(s){of_run}")
    if report.failed:
        events.message(
            f"could not remove {len(report.failed)} sandbox object(s) of the run (see "
            f"{LOG_FILENAME}); `harness sandbox cleanup --run {prepared.name}` removes them"
        )


def _unwritable(prepared: PreparedRun, error: OSError) -> str:
    """The message of a run dir that took no write outside the trials (counts included)."""
    try:
        recorded = len(latest_by_id(TrialStore(prepared.run_dir).load()))
    except Exception:  # a message about the disk must not fail on the records
        recorded = 0
    halt = disk_halt(error, error.filename or prepared.run_dir)
    if not (prepared.run_dir / CONFIG_FILENAME).is_file():
        return f"{halt.reason}; nothing was run; {halt.fix}, then run again"
    return halt.message(recorded, len(prepared.plans), prepared.run_dir)


def _dataset_metrics(
    prepared: PreparedRun,
    records: list[TrialRecord],
    log: Callable[[str], None],
    events: RunEvents,
    *,
    interrupted: bool,
) -> dict[str, Any]:
    """The datasets' declared metrics (a script's in a sandbox); errors recorded.

    An interrupted run runs no script (the user asked it to stop); its built-ins still come.
    """
    if not prepared.dataset_metrics:
        return {}
    events.message("computing the datasets' metrics")
    return dataset_metrics.compute(
        prepared.dataset_metrics,
        records,
        prepared.plans,
        task_datasets=prepared.task_datasets,
        config=prepared.config,
        run_name=prepared.name,
        log=log,
        run_scripts=not interrupted,
    )


def _nothing_to_resume(prepared: PreparedRun, run_dir: Path, events: RunEvents) -> RunOutcome:
    """A resume that finds every planned trial done: tidy up, rewrite, summarize.

    No invocation log is started for it; what it repairs goes into the latest one.
    """
    invocation = latest_invocation(run_dir)
    log = latest_log(run_dir)
    planned = len(prepared.plans)
    try:
        compact = tidy(TrialStore(run_dir), prepared.resume_snapshot, prepared.backend, log, events)
        prepared.resume_snapshot = None
        _close_places(prepared, log, events, " of the run")
        planned_ids = {plan.id for plan in prepared.plans}
        records = [r for r in compact.records if r.id in planned_ids]
        state = RunState(
            name=prepared.name,
            run_dir=run_dir,
            planned=planned,
            kept=records,
            threshold=prepared.config.threshold,
        )
        state.finish("finished")
        StatusWriter(run_dir / STATUS_FILENAME, state).flush(force=True)
        summary = write_summary(
            run_dir,
            prepared.config,
            records,
            planned=planned,
            interrupted=False,
            invocation=invocation,
            planned_tasks=planned_per_task(prepared.plans),
            dataset_metrics=_dataset_metrics(prepared, records, log, events, interrupted=False),
        )
        log(f"resume: nothing to resume, all {len(records)} trials are done")
    finally:
        log.close()
    return RunOutcome(
        run_dir,
        records,
        summary,
        EXIT_OK,
        planned=planned,
        invocation=invocation,
        nothing_to_resume=True,
        resume=prepared.resume,
    )


class Invocation:
    """One invocation of a run that has trials to run: start, drive, finish."""

    def __init__(
        self,
        prepared: PreparedRun,
        run_dir: Path,
        number: int,
        log: RunLog,
        events: RunEvents,
        versions: dict[str, str],
        gateway: Gateway | None,
    ) -> None:
        self.prepared = prepared
        self.config = prepared.config
        self.run_dir = run_dir
        self.number = number
        self.log = log
        self.events = events
        self.versions = versions
        self.gateway = gateway
        self.store = TrialStore(run_dir)
        self.cancel = threading.Event()
        #: Set by the first interrupt signal itself: no trial starts from then on.
        self.signalled = threading.Event()
        self.failures: list[str] = []
        self.interrupted = False
        self.stragglers: list[TrialPlan] = []
        #: The first fault of the machine (a full disk, an engine that stayed away).
        self.halting = Halting(on_halt=lambda halt: log(f"halting the run: {halt.reason}"))
        self.disk = DiskGuard(run_dir, self.halting)
        self.watch: EngineWatch | None = None
        self.halted = False

    # -- start -------------------------------------------------------------------------------

    def start(self) -> None:
        """Tidy the run dir, plan this invocation's jobs, build the runner, announce."""
        prepared, config, resume = self.prepared, self.config, self.prepared.resume
        self.log(
            f"invocation {self.number} (pid {os.getpid()}, harness {self.versions['harness']}): "
            f"{'resume' if resume else 'run'} {prepared.name}, {len(prepared.plans)} planned "
            f"trials, -j {config.concurrency}, executor {prepared.executor.name}"
            + (
                f", agent_concurrency {config.agent_concurrency}"
                if config.agent_concurrency
                else ""
            )
        )
        for problem in prepared.skipped:
            self.log(f"skipped invalid task: {problem}")
        prepared.backend.report_progress(self._progress)
        tidy(self.store, prepared.resume_snapshot, prepared.backend, self.log, self.events)
        prepared.resume_snapshot = None  # its raw lines are not needed any more
        if resume is not None:
            self.log(f"resume: {resume.describe()}; rerunning statuses {sorted(resume.statuses)}")
        kept = list(resume.kept.values()) if resume is not None else []
        self.jobs = [
            (plan, resume.prior(plan.id) if resume is not None else None)
            for plan in prepared.plans
            if resume is None or plan.id not in resume.kept
        ]
        self.state = RunState(
            name=prepared.name,
            run_dir=self.run_dir,
            planned=len(prepared.plans),
            kept=kept,
            threshold=config.threshold,
            invocation=self.number,
        )
        self.status = StatusWriter(self.run_dir / STATUS_FILENAME, self.state)
        self.status.flush(force=True)
        self.settings = self._trial_settings()
        self.watch = watch_engine(
            prepared.backend,
            wait_sec=config.retry.engine_wait_sec,
            run_dir=self.run_dir,
            events=self.events,
            state=self.state,
            log=self.log,
            halting=self.halting,
        )
        self.runner = TrialRunner(
            settings=self.settings,
            store=self.store,
            retry=config.retry,
            state=self.state,
            on_retry=self.events.retrying,
            log=self.log,
            run_attempt=prepared.executor.run_attempt,
            watch=self.watch,
            disk=self.disk,
            interrupted=self.signalled,
        )
        prepared.executor.start(self.settings, self.log)
        self.events.run_started(
            RunStart(
                name=prepared.name,
                run_dir=self.run_dir,
                state=self.state,
                planned=len(prepared.plans),
                to_run=len(self.jobs),
                tasks=len(prepared.tasks),
                agent=prepared.agent.name,
                sandbox=config.sandbox.backend,
                invocation=self.number,
                resume=resume,
            )
        )
        self.log(f"started: {len(self.jobs)} trial(s) to run, {len(kept)} kept")

    def _progress(self, text: str) -> None:
        """Progress of a long preparation (an image pull): the message line and eval.log."""
        self.events.message(text)
        self.log(text)

    def _trial_settings(self) -> TrialSettings:
        prepared, state = self.prepared, self.state
        if prepared.env is not None:
            prepared.env.on_agent = state.agent_phase  # each agent's phase in status.json

        def on_phase(trial_id: str, phase: str) -> None:
            kill_point(f"phase:{phase}")
            state.phase(trial_id, phase)
            self.events.phase(trial_id, phase)

        def on_wait(trial_id: str, waiting: bool) -> None:
            state.phase(trial_id, "waiting" if waiting else "execute")

        return TrialSettings(
            run_dir=self.run_dir,
            agent=prepared.agent,
            make_sandbox=prepared.backend.make_sandbox,
            model=prepared.model.spec.id if prepared.model is not None else None,
            gateway=self.gateway,
            versions=self.versions,
            protected_paths=(self.run_dir,),
            expose=tuple(Path(path) for path in self.config.sandbox.expose),
            cancel=self.cancel,
            on_phase=on_phase,
            agent_slot=AgentGate(self.config.agent_concurrency, self.cancel, on_wait),
            evidence_mode=self.config.evidence,
            max_evidence_file_bytes=self.config.evidence_caps.file_bytes,
            max_evidence_total_bytes=self.config.evidence_caps.total_bytes,
            evidence_limits=self.config.evidence_caps.limits(),
            rollouts=self.config.rollouts,
            trials_left=TrialCountdown(len(self.jobs)),
            judges=prepared.judges,
            attempt=prepared.env.run_attempt if prepared.env is not None else None,
            network=run_network(self.config.network, prepared.backend.capacity()),
        )

    # -- drive -------------------------------------------------------------------------------

    def drive(self, interrupts: Interrupts) -> None:
        """Run the jobs on the pool until they are done, or interrupts or a fault say stop."""
        pool = ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="trial")
        futures: dict[Future[TrialRecord], TrialPlan] = {}
        pending: set[Future[TrialRecord]] = set()
        aborted_at: float | None = None
        if self.watch is not None:
            self.watch.start()
        try:
            for plan, prior in self.jobs:
                futures[pool.submit(self.runner.run, plan, prior)] = plan
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=POLL_SEC, return_when=FIRST_COMPLETED)
                for future in done:
                    self._collect(future, futures[future])
                if interrupts.count >= 1 and not self.interrupted:
                    self._stop(pending)
                if interrupts.count >= 2 and aborted_at is None:
                    aborted_at = time.monotonic()
                    self._abort()
                if self.log.failed is not None:
                    self.disk.write_failed(self.log.failed, self.log.path or self.run_dir)
                if self.halting and not self.halted:
                    self._halt(pending)
                if self.interrupted or self.halted:
                    pending = {f for f in pending if not f.cancelled()}
                if aborted_at is not None and time.monotonic() > aborted_at + ABORT_GRACE_SEC:
                    break
                self._flush_status()
        finally:
            if self.watch is not None:
                self.watch.stop()
            self.stragglers = [futures[f] for f in pending if not f.done()]
            for plan in self.stragglers:
                self.state.trial_dropped(plan.id)
                self.log(f"trial {plan.id}: still running at abort, left without a record")
            pool.shutdown(wait=not self.stragglers, cancel_futures=True)

    def _flush_status(self, *, force: bool = False) -> None:
        """Write ``status.json``; a full disk halts the run."""
        try:
            self.status.flush(force=force)
        except OSError as exc:
            if not self.disk.write_failed(exc, self.status.path):
                raise

    def _collect(self, future: Future[TrialRecord], plan: TrialPlan) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, NotRun):
            return  # the run halted or stopped before it: --resume runs it
        if error is not None:
            self.state.trial_dropped(plan.id)
            if self.disk.write_failed(error, self.run_dir):
                self.log(f"trial {plan.id}: no record, the run dir is full: {error}")
                return
            detail = "".join(traceback.format_exception(error)).rstrip()
            self.failures.append(plan.id)
            self.log(f"trial {plan.id}: internal error, no record written:\n{detail}")
            # Counted: the summary's denominator is the plan (unrecorded), resume runs it.
            self.events.message(f"internal error in trial {plan.id}: {error!r} (see eval.log)")
            return
        record = future.result()
        self.log(
            f"trial {record.id} attempt {record.attempt} {record.status} "
            f"reward={record.reward} ok={record.ok}"
        )
        self.events.trial_finished(record, self.state.done, len(self.prepared.plans))

    def _halt(self, pending: set[Future[TrialRecord]]) -> None:
        """A fault of the machine: no new trial starts; running ones finish and clean up."""
        self.halted = True
        running = len(self.state.running())
        self.log(f"stopping: scheduling stopped, {running} running trial(s) finish first")
        for future in pending:
            future.cancel()

    def _stop(self, pending: set[Future[TrialRecord]]) -> None:
        """First interrupt: no new trial starts; running agents are killed, trials clean up."""
        self.interrupted = True
        running = len(self.state.running())
        self.log(f"interrupted: stopping {running} running trial(s), scheduling stopped")
        self.events.message(
            f"interrupted: stopping {running} running trial(s) and cleaning up "
            "(press Ctrl-C again to abort faster)"
        )
        for future in pending:
            future.cancel()
        self.settings.abort_all()
        self.prepared.executor.stop()

    def _abort(self) -> None:
        """Second interrupt: the run's sandboxes go now."""
        self.log("aborting: removing the run's sandboxes now")
        self.events.message("aborting: removing the run's sandboxes now")
        self.settings.abort_all()
        for abort in (self.prepared.backend.abort, self.prepared.executor.abort):
            try:
                abort()
            except Exception as exc:  # keep aborting; close() tries again
                self.log(f"removing the run's sandboxes failed: {exc}")

    # -- finish ------------------------------------------------------------------------------

    def finish(self) -> RunOutcome:
        """Close the backend, compact the records, write the summary and the final status.

        After a fault of the machine, what cannot be written is left as it was (the records
        are whole; the next invocation compacts and summarizes) and the outcome carries the
        one message saying what failed and how to go on.
        """
        prepared, plans = self.prepared, self.prepared.plans
        _close_places(prepared, self.log, self.events, "")
        planned_ids = {plan.id for plan in plans}
        records = [r for r in self._final_records() if r.id in planned_ids]
        summary = self._write_summary(records)
        halt = self.halting.halt
        stopped = None
        if halt is not None:
            stopped = halt.message(len(records), len(plans), self.run_dir)
            self.state.finish("stopped", stopped)
        else:
            self.state.finish("interrupted" if self.interrupted else "finished")
        self._flush_status(force=True)
        code = self._exit_code(records, summary, halt)
        self.log(
            f"run {self.state.state}: {len(records)} of {len(plans)} trials recorded, exit {code}"
        )
        return RunOutcome(
            self.run_dir,
            records,
            summary,
            code,
            self.interrupted,
            planned=len(plans),
            invocation=self.number,
            stragglers=len(self.stragglers),
            resume=prepared.resume,
            stopped=stopped,
        )

    def _final_records(self) -> list[TrialRecord]:
        """The latest record of each trial, compacting ``trials.jsonl`` if the disk allows."""
        try:
            return self.store.compact().records
        except OSError as exc:
            if not self.disk.write_failed(exc, self.store.path):
                raise
            self.log(f"trials.jsonl not compacted ({exc}); the next invocation compacts it")
            return list(latest_by_id(self.store.load()).values())

    def _write_summary(self, records: list[TrialRecord]) -> Summary:
        try:
            return write_summary(
                self.run_dir,
                self.config,
                records,
                planned=len(self.prepared.plans),
                interrupted=self.interrupted,
                invocation=self.number,
                planned_tasks=planned_per_task(self.prepared.plans),
                dataset_metrics=self._dataset_metrics(records),
            )
        except OSError as exc:
            if not self.disk.write_failed(exc, self.run_dir / SUMMARY_FILENAME):
                raise
            self.log(f"summary.json not written ({exc}); the next invocation writes it")
            return summarize(
                records,
                threshold=self.config.threshold,
                planned=len(self.prepared.plans),
                planned_tasks=planned_per_task(self.prepared.plans),
            )

    def _dataset_metrics(self, records: list[TrialRecord]) -> dict[str, Any]:
        return _dataset_metrics(
            self.prepared, records, self.log, self.events, interrupted=self.interrupted
        )

    def _exit_code(self, records: list[TrialRecord], summary: Summary, halt: Halt | None) -> int:
        if halt is not None:
            return halt.exit_code
        if self.interrupted:
            return EXIT_INTERRUPTED
        return exit_code(self.config, records, summary, bool(self.failures))


__all__ = ["ABORT_GRACE_SEC", "Invocation", "execute_run", "exit_code", "planned_per_task"]

"""What an observer of a run (a display, a notebook) hears, and what a run returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.records import TrialRecord
from harness.records.metrics import Summary
from harness.records.status import RunState
from harness.runner.resume import ResumePlan


@dataclass(frozen=True)
class RunStart:
    """What is known when trials start.

    Attributes:
        name: The run's name.
        run_dir: The run directory.
        state: Live state (counts, running trials) for displays to read.
        planned: Trials in the plan.
        to_run: Trials this invocation runs (planned minus kept).
        tasks: Tasks in the plan.
        agent: Agent name.
        sandbox: Sandbox backend.
        invocation: 1 for the first run, +1 for each ``--resume``.
        resume: The resume plan, when resuming.
    """

    name: str
    run_dir: Path
    state: RunState
    planned: int
    to_run: int
    tasks: int
    agent: str
    sandbox: str
    invocation: int
    resume: ResumePlan | None = None


@dataclass
class RunOutcome:
    """The result of a run (or of one ``--resume`` invocation of it).

    Attributes:
        run_dir: The run directory.
        records: The latest record of every planned trial that has one.
        summary: Metrics over ``records``.
        exit_code: 0, 1, 74, 75 or 130 (see :mod:`harness.errors`).
        interrupted: Whether a signal stopped the run.
        planned: Trials in the plan.
        invocation: Which invocation this was (1 for the first run).
        nothing_to_resume: A ``--resume`` found every trial done and ran nothing.
        stragglers: Trials still running when an abort stopped waiting for them; the
            process should exit right away (``os._exit``) rather than join their threads.
        resume: The resume plan of a ``--resume`` invocation.
        stopped: When a fault of the machine stopped the run in order (a full disk, an
            engine that stayed away): the one message saying what failed, how many trials
            are recorded and the ``--resume`` command; ``exit_code`` is then 74 or 75.
    """

    run_dir: Path
    records: list[TrialRecord]
    summary: Summary
    exit_code: int
    interrupted: bool = False
    planned: int = 0
    invocation: int = 1
    nothing_to_resume: bool = False
    stragglers: int = 0
    resume: ResumePlan | None = None
    stopped: str | None = None


class RunEvents:
    """Hooks called while a run executes; every method is a no-op here.

    ``phase`` and ``retrying`` are called from trial threads, and so is ``message`` for a
    trial's progress (an image pull); the others from the thread that runs the run.
    """

    def warning(self, text: str) -> None:
        """Something the user must know before trials run (e.g. not a security boundary)."""

    def run_started(self, start: RunStart) -> None:
        """Trials are about to start."""

    def phase(self, trial_id: str, phase: str) -> None:
        """A trial entered a lifecycle phase."""

    def retrying(self, record: TrialRecord, delay: float) -> None:
        """An attempt failed with a retryable error; the next starts after ``delay`` s."""

    def trial_finished(self, record: TrialRecord, done: int, total: int) -> None:
        """A trial has its final record (``done`` of ``total`` planned trials are done)."""

    def message(self, text: str) -> None:
        """Something the user should read (interrupts, leaked objects removed)."""

    def run_finished(self, outcome: RunOutcome) -> None:
        """Everything is written; the outcome is final."""


__all__ = ["RunEvents", "RunOutcome", "RunStart"]

"""The interface of a trial executor plug-in: where a run's trial attempts run.

An executor class is registered under a name in the ``harness.executors`` entry-point group
(``harness executors list``). For each run the harness constructs it with
:class:`ExecutorOptions` while preparing (the constructor checks the options and raises
``UsageError`` for bad ones: nothing has run yet), asks :meth:`TrialExecutor.task_problems`
about the selected tasks, calls :meth:`TrialExecutor.start` once the run dir is tidied,
:meth:`TrialExecutor.run_attempt` for every attempt of every trial (from the run's worker
threads, ``-j`` of them at once), and :meth:`TrialExecutor.close` after the last one.

Whatever the executor, the harness process (the driver) alone writes ``trials.jsonl`` and
``status.json``, and keeps the model gateway and the real provider key: an executor returns
each attempt's record to it, with the attempt's evidence under ``trials/<id>/``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.config import RunConfig
from harness.records import TrialRecord
from harness.tasks import Task
from harness.trial import TrialPlan, TrialSettings
from sandbox.backend import CloseReport


@dataclass(frozen=True)
class ExecutorOptions:
    """What an executor is opened with.

    Attributes:
        run_name: The run's name (it labels everything the sandboxes create).
        config: The run's config (``config.executor`` holds the executor's own options).
    """

    run_name: str
    config: RunConfig


class TrialExecutor(ABC):
    """Runs trial attempts somewhere; the run's threads wait for their records.

    Attributes:
        name: The name it is registered under (set by the registry).
        runs_episodes: Whether :meth:`run_attempt` runs an attempt with the run's own
            ``settings.attempt`` (an episode of the run's env, docs/episodes.md) in this
            process. A run whose env is not ``single`` is refused up front on an executor
            that does not.
    """

    name: str = "executor"
    runs_episodes: bool = False

    def __init__(self, options: ExecutorOptions) -> None:
        self.options = options

    def task_problems(self, tasks: Sequence[Task]) -> list[str]:
        """What keeps a task from running on this executor at all (checked before the run)."""
        return []

    def network_refusal(self, role: str, mode: str, enforced: frozenset[str] | None) -> str | None:
        """Why a phase of ``role`` with network ``mode`` cannot run on this executor.

        Args:
            role: ``agent`` or ``verifier``.
            mode: The phase's effective ``network_mode`` on this run.
            enforced: The modes the run's backend enforces (``Capacity.network_modes``;
                None: it did not say).

        Returns:
            None when it can (the default: trials run where the backend runs them).
        """
        return None

    def start(  # noqa: B027 - most executors need no start
        self, settings: TrialSettings, log: Callable[[str], None]
    ) -> None:
        """Get ready to run attempts (after the run dir is tidied, before the first trial).

        Args:
            settings: What every trial of this invocation shares (in this process).
            log: Writes one line to the invocation's ``eval.log``.
        """

    @abstractmethod
    def run_attempt(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        """Run one attempt of a trial to its record (errors are in the record).

        With ``settings.attempt`` set (only on an executor that ``runs_episodes``), the
        attempt is what it runs (an episode of the run's env) and the record its record.

        Its evidence is in the run dir's ``trials/<id>`` when it returns
        (:func:`~harness.records.layout.trial_evidence_dir`).
        Raising means an internal error: the trial gets no record in this invocation.
        """

    def stop(self) -> None:  # noqa: B027 - the run already stops this process's trials
        """First interrupt: no attempt starts; running ones are killed and clean up (any thread).

        ``settings.cancel`` is already set and this process's sandboxes are being killed.
        """

    def abort(self) -> None:  # noqa: B027 - the run already aborts this process's trials
        """Second interrupt: every sandbox of the run goes now, wherever it runs (any thread)."""

    def close(self) -> CloseReport:
        """Release the executor after the run (idempotent).

        Returns:
            The sandbox leftovers it found and removed (on other machines), and what it
            could not remove there.
        """
        return CloseReport()


__all__ = ["ExecutorOptions", "TrialExecutor"]

"""The ``local`` executor: every attempt runs in the harness process's own thread pool."""

from __future__ import annotations

from typing_extensions import override

from harness.executors.base import TrialExecutor
from harness.records import TrialRecord
from harness.trial import TrialPlan, TrialSettings, run_trial


class LocalExecutor(TrialExecutor):
    """Trials run on this machine, ``-j`` at once, in the harness process's threads.

    An attempt is a plain trial, or what ``settings.attempt`` runs when the run sets it
    (an episode of the run's env: the env and its agents' trials run in this process,
    ``max_concurrent_agents`` of them at once).
    """

    runs_episodes = True

    @override
    def run_attempt(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        if settings.attempt is not None:
            return settings.attempt(plan, settings, attempt)
        return run_trial(plan, settings, attempt=attempt)


__all__ = ["LocalExecutor"]

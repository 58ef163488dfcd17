"""The ``local`` executor: every attempt runs in the harness process's own thread pool."""

from __future__ import annotations

from harness.executors.base import TrialExecutor
from harness.records import TrialRecord
from harness.trial import TrialPlan, TrialSettings, run_trial


class LocalExecutor(TrialExecutor):
    """Trials run on this machine, ``-j`` at once, in the harness process's threads."""

    def run_attempt(  # noqa: D102
        self, plan: TrialPlan, settings: TrialSettings, attempt: int
    ) -> TrialRecord:
        return run_trial(plan, settings, attempt=attempt)


__all__ = ["LocalExecutor"]

"""One trial: prepare → reset → (per step) stage, execute, collect, grade → cleanup → judges.

:mod:`harness.trial.lifecycle` reads as the trial's life; each group of its steps is a
module beside it, over the trial's state (:mod:`~harness.trial.state`):
:mod:`~harness.trial.staging` (prepare, reset, a step's staging),
:mod:`~harness.trial.agent_phase` (the agent, either kind), :mod:`~harness.trial.grade`
(collect, grade, artifacts), :mod:`~harness.trial.judging` (the judges, on the trial's final
state). What they use: :mod:`~harness.trial.settings` (what a run
shares), :mod:`~harness.trial.env` (the phases' environments), :mod:`~harness.trial.steps`
(the steps of a multi-step task and their rewards), :mod:`~harness.trial.artifacts`,
:mod:`~harness.trial.healthcheck` and :mod:`~harness.trial.separate` (a verifier in its own
sandbox).
"""

from harness.trial.lifecycle import run_trial, usage_of
from harness.trial.settings import (
    STORAGE_FULL_SLACK,
    SandboxFactory,
    TrialCountdown,
    TrialPlan,
    TrialSettings,
)

__all__ = [
    "STORAGE_FULL_SLACK",
    "SandboxFactory",
    "TrialCountdown",
    "TrialPlan",
    "TrialSettings",
    "run_trial",
    "usage_of",
]

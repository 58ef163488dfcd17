"""One trial: prepare → reset → (per step) stage, execute, collect, grade → cleanup → judges.

:mod:`harness.trial.lifecycle` reads as the trial's life (:class:`Trial`, whose docstring
names what a subclass may change; the episodes' trials subclass it); each group of its steps
is a module beside it, over the trial's state (:mod:`~harness.trial.state`):
:mod:`~harness.trial.staging` (prepare, reset, a step's staging),
:mod:`~harness.trial.agent_phase` (the agent, either kind), :mod:`~harness.trial.grade`
(collect, grade, artifacts), :mod:`~harness.trial.judging` (the judges, on the trial's final
state). What they use: :mod:`~harness.trial.settings` (what a run shares),
:mod:`~harness.trial.env` (the phases' environments), :mod:`~harness.trial.steps` (the steps
of a multi-step task and their rewards), :mod:`~harness.trial.artifacts`,
:mod:`~harness.trial.healthcheck`, :mod:`~harness.trial.separate` (a verifier in its own
sandbox) and :mod:`~harness.trial.grading` (reading the verifier's reward).
"""

from harness.trial.lifecycle import Trial, run_trial, usage_of
from harness.trial.settings import (
    STORAGE_FULL_SLACK,
    AttemptRunner,
    SandboxFactory,
    TrialCountdown,
    TrialPlan,
    TrialSettings,
)

__all__ = [
    "STORAGE_FULL_SLACK",
    "AttemptRunner",
    "SandboxFactory",
    "TrialCountdown",
    "TrialPlan",
    "Trial",
    "TrialSettings",
    "run_trial",
    "usage_of",
]

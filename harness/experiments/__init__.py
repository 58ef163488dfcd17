"""Experiments you can trust: repeated runs with spread, aggregation, retries, paired A/B.

- :mod:`.trials` — ``harness trials N`` (:func:`run_trials`) and ``harness aggregate``
  (:func:`aggregate`): the spread of every metric across runs, ``trials_summary.json``;
- :mod:`.retry` — ``--retry-failed``: rerun each failed trial once;
- :mod:`.design`, :mod:`.experiment`, :mod:`.pairing` — ``harness experiment``: variants
  interleaved, pairs per (task, model, repetition), the lift with a paired bootstrap CI,
  withheld when any pair is blocked;
- :mod:`.regrade` — ``harness regrade``: verifiers and judges again on saved evidence;
- :mod:`.comparisons` — these summaries on the report's comparison page.

Everything is built on the library API (:func:`harness.run`, :func:`harness.load_run`,
:func:`harness.check`); see docs/experiments.md.
"""

from harness.experiments.design import ExperimentDesign, load_design, plan_runs
from harness.experiments.experiment import (
    ExperimentOutcome,
    ExperimentReport,
    report_experiment,
    run_experiment,
)
from harness.experiments.retry import plan_retry, retry_config
from harness.experiments.stats import Stats, describe
from harness.experiments.trials import (
    TrialsOutcome,
    TrialsSummary,
    aggregate,
    read_summary,
    run_trials,
    summarize_rows,
    write_summary,
)

__all__ = [
    "ExperimentDesign",
    "ExperimentOutcome",
    "ExperimentReport",
    "Stats",
    "TrialsOutcome",
    "TrialsSummary",
    "aggregate",
    "describe",
    "load_design",
    "plan_retry",
    "plan_runs",
    "read_summary",
    "report_experiment",
    "retry_config",
    "run_experiment",
    "run_trials",
    "summarize_rows",
    "write_summary",
]

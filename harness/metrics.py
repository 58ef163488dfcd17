"""Run metrics: pass@k, pass^k, bootstrap intervals and the run summary (``summary.json``).

This module moved to :mod:`harness.records.metrics`; this path re-exports its public names.
"""

from harness.records.metrics import (
    USAGE_FIELDS,
    DurationSummary,
    Summary,
    TaskSummary,
    UsageTotal,
    bootstrap_ci,
    bootstrap_cis,
    pass_at_k,
    pass_hat_k,
    summarize,
    trial_duration,
)

__all__ = [
    "USAGE_FIELDS",
    "DurationSummary",
    "Summary",
    "TaskSummary",
    "UsageTotal",
    "bootstrap_ci",
    "bootstrap_cis",
    "pass_at_k",
    "pass_hat_k",
    "summarize",
    "trial_duration",
]

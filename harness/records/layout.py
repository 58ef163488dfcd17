"""Every path of a run dir, named once.

A run dir (see ``docs/run-dir.md``)::

    <output-dir>/<run-name>/
      config.toml         the resolved config ([run]) and [versions]; never a secret
      trials.jsonl        trial records (the latest record of an id wins)
      trials.jsonl.lock   guards trials.jsonl's writers
      summary.json        metrics over the latest record of each planned trial
      status.json         live state for other processes
      datasets.lock.json  which dataset tasks the run ran (a dataset run only)
      run.lock            held by the invocation working on the run dir
      logs/invocation_N/eval.log, logs/latest -> invocation_N, eval.log -> logs/latest/eval.log
      trials/<id>/        evidence of each trial's latest attempt
      attempts/<id>/<n>/  evidence of earlier attempts (retries, resumed reruns)

Inside a trial's evidence dir: ``transcript.jsonl``, the agent's ``session.jsonl``, the
gateway's ``model_calls.jsonl``, ``workspace/`` (the final workspace), ``verifier/``,
``judges/``. Every module names these through this one, so that a name changes in one
place. This module imports nothing of harness: every layer may use it.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILENAME = "config.toml"
"""The run's resolved config (``[run]``) and ``[versions]``."""
TRIALS_FILENAME = "trials.jsonl"
"""The run's trial records, one JSON object per line."""
TRIALS_LOCK_FILENAME = "trials.jsonl.lock"
"""The lock file guarding :data:`TRIALS_FILENAME`'s writers."""
RUN_LOCK_FILENAME = "run.lock"
"""Held (flock) by the harness process working on a run dir."""
SUMMARY_FILENAME = "summary.json"
"""The run's metrics (written when an invocation ends)."""
STATUS_FILENAME = "status.json"
"""The run's live state, for other processes."""
DATASETS_LOCK_FILENAME = "datasets.lock.json"
"""Which dataset tasks a dataset run ran."""
LOGS_DIRNAME = "logs"
"""Per-invocation logs live in ``logs/invocation_N/``."""
LOG_FILENAME = "eval.log"
"""One invocation's log (``eval.log`` at the top follows the latest)."""
TRIALS_DIRNAME = "trials"
"""``trials/<id>/``: the evidence of each trial's latest attempt."""
ATTEMPTS_DIRNAME = "attempts"
"""``attempts/<id>/<n>/``: the evidence of a trial's earlier attempts."""

TRANSCRIPT_FILENAME = "transcript.jsonl"
"""A trial's transcript (in its evidence dir)."""
SESSION_FILENAME = "session.jsonl"
"""The agent's own session log (in its evidence dir)."""
MODEL_CALLS_FILENAME = "model_calls.jsonl"
"""The gateway's record of the trial's model calls (in its evidence dir)."""
WORKSPACE_DIRNAME = "workspace"
"""The final workspace kept in a trial's evidence dir (and a task's initial workspace)."""
VERIFIER_DIRNAME = "verifier"
"""The verifier's output in a trial's evidence dir."""
JUDGES_DIRNAME = "judges"
"""The judges' verdicts in a trial's evidence dir."""
ROOT_CHANGES_FILENAME = "root_changes.jsonl"
"""What the agent phases changed in the image's root (in a trial's evidence dir; bounded)."""


def trial_evidence_dir(trial_id: str) -> str:
    """A trial's default evidence dir, relative to the run dir (``trials/<id>``)."""
    return f"{TRIALS_DIRNAME}/{trial_id}"


def attempt_evidence_dir(trial_id: str, attempt: int | str) -> Path:
    """An earlier attempt's evidence dir, relative to the run dir (``attempts/<id>/<n>``)."""
    return Path(ATTEMPTS_DIRNAME) / trial_id / str(attempt)


__all__ = [
    "ATTEMPTS_DIRNAME",
    "CONFIG_FILENAME",
    "DATASETS_LOCK_FILENAME",
    "JUDGES_DIRNAME",
    "LOGS_DIRNAME",
    "LOG_FILENAME",
    "MODEL_CALLS_FILENAME",
    "ROOT_CHANGES_FILENAME",
    "RUN_LOCK_FILENAME",
    "SESSION_FILENAME",
    "STATUS_FILENAME",
    "SUMMARY_FILENAME",
    "TRANSCRIPT_FILENAME",
    "TRIALS_DIRNAME",
    "TRIALS_FILENAME",
    "TRIALS_LOCK_FILENAME",
    "VERIFIER_DIRNAME",
    "WORKSPACE_DIRNAME",
    "attempt_evidence_dir",
    "trial_evidence_dir",
]

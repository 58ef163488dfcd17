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
      trials/<id>/agents/<name>/  an episode's agents' evidence, one dir each
      attempts/<id>/<n>/  evidence of earlier attempts (retries, resumed reruns)
      objects/<aa>/<sha256>  the run's content store (``--evidence diff``)

At the top of a trial's evidence dir: ``transcript.jsonl``, the agent's ``session.jsonl``,
the gateway's ``model_calls.jsonl``, ``agent.log`` and ``agent.stderr.log``, ``build.log``,
``agent_exec.jsonl``, ``agent-logs/``, ``root_changes.jsonl``, ``workspace/`` (the final
workspace) and ``workspace.manifest.json``, ``verifier/`` (the tests' ``test-stdout.txt``
and ``test-stderr.txt``, and what they wrote), ``artifacts/``, ``judges/``,
``steps/<name>/`` (a step's own ``agent.log``, ``setup.log``, ``verifier/``,
``artifacts/``) and, after ``harness export``, ``agent/trajectory.json``. What a writer
keeps inside one of those dirs (``judges/<name>.json``, ``artifacts/manifest.json``), and
an episode env's own files (user-sim's ``conversation.jsonl``), are named by that writer.

Every module of ``harness/`` names these through this one, so that a name changes in one
place. Two names belong to ``sandbox/``, which writes them and never imports ``harness/``:
the content store and the manifest (:mod:`sandbox.evidence_diff`); they are referenced
here, not redefined. This module imports nothing of harness: every layer may use it.
"""

from __future__ import annotations

from pathlib import Path

from sandbox.evidence_diff import MANIFEST_NAME, OBJECTS_DIR

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
INVOCATION_DIR_PREFIX = "invocation_"
"""``logs/invocation_N/``: one invocation's log dir (N from 1, one more per ``--resume``)."""
LATEST_LOG_LINK = "latest"
"""``logs/latest``: a symlink to the newest invocation's log dir."""
TRIALS_DIRNAME = "trials"
"""``trials/<id>/``: the evidence of each trial's latest attempt."""
ATTEMPTS_DIRNAME = "attempts"
"""``attempts/<id>/<n>/``: the evidence of a trial's earlier attempts."""
OBJECTS_DIRNAME = OBJECTS_DIR
"""``objects/<aa>/<sha256>``: the run's content store (written by :mod:`sandbox.evidence_diff`)."""

TRANSCRIPT_FILENAME = "transcript.jsonl"
"""A trial's transcript (in its evidence dir)."""
AGENT_LOG_FILENAME = "agent.log"
"""The agent phase's stdout (in a trial's or a step's evidence dir)."""
AGENT_STDERR_LOG_FILENAME = "agent.stderr.log"
"""The agent phase's stderr (in a trial's or a step's evidence dir)."""
BUILD_LOG_FILENAME = "build.log"
"""The image build's log, when the trial built it (in its evidence dir)."""
SETUP_LOG_FILENAME = "setup.log"
"""A step's failed ``setup.sh`` stdout (in the step's evidence dir)."""
SETUP_STDERR_LOG_FILENAME = "setup.stderr.log"
"""A step's failed ``setup.sh`` stderr (in the step's evidence dir)."""
AGENT_EXEC_LOG_FILENAME = "agent_exec.jsonl"
"""A harness agent's ``context.exec`` calls (in a trial's evidence dir)."""
AGENT_LOGS_DIRNAME = "agent-logs"
"""An installed agent CLI's own session files, as it wrote them (in a trial's evidence dir)."""
SESSION_FILENAME = "session.jsonl"
"""The agent's own session log (in its evidence dir)."""
MODEL_CALLS_FILENAME = "model_calls.jsonl"
"""The gateway's record of the trial's model calls (in its evidence dir)."""
WORKSPACE_DIRNAME = "workspace"
"""The final workspace kept in a trial's evidence dir (and a task's initial workspace)."""
WORKSPACE_MANIFEST_FILENAME = MANIFEST_NAME
"""Every entry of the final workspace, beside ``workspace/`` (:mod:`sandbox.evidence_diff`)."""
VERIFIER_DIRNAME = "verifier"
"""The verifier's output in a trial's evidence dir."""
VERIFIER_STDOUT_FILENAME = "test-stdout.txt"
"""The tests' stdout, in :data:`VERIFIER_DIRNAME` (either way of grading)."""
VERIFIER_STDERR_FILENAME = "test-stderr.txt"
"""The tests' stderr, in :data:`VERIFIER_DIRNAME`."""
JUDGES_DIRNAME = "judges"
"""The judges' verdicts in a trial's evidence dir."""
ARTIFACTS_DIRNAME = "artifacts"
"""The task's declared artifacts, copied out (in a trial's or a step's evidence dir)."""
STEPS_DIRNAME = "steps"
"""``steps/<name>/``: a multi-step task's per-step evidence (in a trial's evidence dir)."""
AGENTS_DIRNAME = "agents"
"""``agents/<name>/``: an episode's agents' evidence (in the episode's evidence dir)."""
TRAJECTORY_DIRNAME = "agent"
"""``agent/``: where ``harness export`` puts a trial's trajectory (Harbor's layout)."""
TRAJECTORY_FILENAME = "trajectory.json"
"""An exported trajectory file (in :data:`TRAJECTORY_DIRNAME`, or an export's output dir)."""
ROOT_CHANGES_FILENAME = "root_changes.jsonl"
"""What the agent phases changed in the image's root (in a trial's evidence dir; bounded)."""


def trial_evidence_dir(trial_id: str) -> str:
    """A trial's default evidence dir, relative to the run dir (``trials/<id>``)."""
    return f"{TRIALS_DIRNAME}/{trial_id}"


def episode_agent_evidence_dir(trial_id: str, name: str) -> str:
    """An episode's agent's evidence dir, relative to the run dir (``trials/<id>/agents/<n>``)."""
    return f"{trial_evidence_dir(trial_id)}/{AGENTS_DIRNAME}/{name}"


def invocation_dirname(number: int) -> str:
    """An invocation's log dir inside ``logs/`` (``invocation_<number>``)."""
    return f"{INVOCATION_DIR_PREFIX}{number}"


def attempt_evidence_dir(trial_id: str, attempt: int | str) -> Path:
    """An earlier attempt's evidence dir, relative to the run dir (``attempts/<id>/<n>``)."""
    return Path(ATTEMPTS_DIRNAME) / trial_id / str(attempt)


__all__ = [
    "AGENTS_DIRNAME",
    "AGENT_EXEC_LOG_FILENAME",
    "AGENT_LOGS_DIRNAME",
    "AGENT_LOG_FILENAME",
    "AGENT_STDERR_LOG_FILENAME",
    "ARTIFACTS_DIRNAME",
    "ATTEMPTS_DIRNAME",
    "BUILD_LOG_FILENAME",
    "CONFIG_FILENAME",
    "DATASETS_LOCK_FILENAME",
    "INVOCATION_DIR_PREFIX",
    "JUDGES_DIRNAME",
    "LATEST_LOG_LINK",
    "LOGS_DIRNAME",
    "LOG_FILENAME",
    "MODEL_CALLS_FILENAME",
    "OBJECTS_DIRNAME",
    "ROOT_CHANGES_FILENAME",
    "RUN_LOCK_FILENAME",
    "SESSION_FILENAME",
    "SETUP_LOG_FILENAME",
    "SETUP_STDERR_LOG_FILENAME",
    "STATUS_FILENAME",
    "STEPS_DIRNAME",
    "SUMMARY_FILENAME",
    "TRAJECTORY_DIRNAME",
    "TRAJECTORY_FILENAME",
    "TRANSCRIPT_FILENAME",
    "TRIALS_DIRNAME",
    "TRIALS_FILENAME",
    "TRIALS_LOCK_FILENAME",
    "VERIFIER_DIRNAME",
    "VERIFIER_STDERR_FILENAME",
    "VERIFIER_STDOUT_FILENAME",
    "WORKSPACE_DIRNAME",
    "WORKSPACE_MANIFEST_FILENAME",
    "attempt_evidence_dir",
    "episode_agent_evidence_dir",
    "invocation_dirname",
    "trial_evidence_dir",
]

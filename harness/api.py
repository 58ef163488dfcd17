"""The library's front door: ``harness.run``, ``harness.resume``, ``harness.load_run``.

:func:`run` does exactly what ``harness run`` does: provider keys leave the environment
(into an in-memory store only the model gateway reads) before anything can inherit them, a
config that holds one of them is refused, everything is checked before anything is
written, the trials run, and the environment is restored, whatever happened. The CLI is a
thin layer over these functions.

Example::

    import harness

    config = harness.RunConfig(
        tasks=harness.TasksConfig(paths=["examples/tasks"]),
        agent=harness.AgentConfig(name="oracle"),
    )
    outcome = harness.run(config)
    print(outcome.summary.mean_reward, outcome.run_dir)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import (
    ConfigError,
    RunConfig,
    load_saved_config,
    refuse_changes,
    secret_keys,
)
from harness.records import TrialRecord
from harness.records.layout import TRIALS_FILENAME
from harness.records.metrics import Summary, summarize
from harness.records.run import read_run
from harness.runner import RunEvents, RunOutcome, execute_run, prepare_run
from harness.runner.interrupts import interruptible
from harness.runner.resume import rerun_statuses
from harness.trial import TrialPlan
from sandbox.credentials import CredentialStore


def run(config: RunConfig, *, events: RunEvents | None = None) -> RunOutcome:
    """Run an evaluation: every trial of ``config``, graded, recorded in a new run dir.

    Args:
        config: What to run (build one with :class:`RunConfig`, or
            :func:`harness.config.resolve_config` for files and ``--set`` items).
        events: An observer (progress display, notebook widget); see :class:`RunEvents`.

    Returns:
        The outcome: run dir, records, summary, exit code (0, 1 or 130).

    Raises:
        UsageError: Bad config, task, agent, backend or model, a config that holds a
            provider key, or a run dir that is not empty (nothing was written).
        KeyboardInterrupt: Interrupted before the trials started (nothing ran).
    """
    return _guarded(config, events=events)


def check(config: RunConfig) -> list[TrialPlan]:
    """Check ``config`` exactly as :func:`run` does before its first trial, writing nothing.

    Tasks, agent, model, judges, the run dir and the sandbox backend are checked; the backend
    is opened and closed again. Used to check every arm of an experiment before any runs.

    Returns:
        The trials the run would run (task and rollout each), in plan order.

    Raises:
        UsageError: Whatever :func:`run` would refuse (nothing is written).
    """
    credentials = CredentialStore()
    credentials.hide_from_env()
    try:
        refuse_credentials(config, credentials)
        prepared = prepare_run(config, credentials=credentials)
        prepared.close()
        return prepared.plans
    finally:
        credentials.restore_env()


def resume(
    run_dir: str | Path,
    *,
    config: RunConfig | None = None,
    rerun: Iterable[str] = (),
    concurrency: int | None = None,
    agent_concurrency: int | None = None,
    events: RunEvents | None = None,
) -> RunOutcome:
    """Continue a run dir: keep its results, rerun what an interrupted or dead run left.

    Args:
        run_dir: A run dir a run created.
        config: The config asked for (it must equal the saved one but for concurrency);
            default: the saved config.
        rerun: Statuses to rerun besides ``environment_error`` and ``cancelled``
            (``agent_error``, ``agent_timeout``, ``verifier_error``).
        concurrency: Trials at once (``-j``), if other than saved.
        agent_concurrency: Agent phases at once, if other than saved.
        events: An observer, as for :func:`run`.

    Returns:
        The outcome of this invocation (``nothing_to_resume`` when every trial is done).

    Raises:
        ConfigError: Not a run dir, or ``config`` differs from the saved one.
        ResumeError: The tasks changed since the run, or a status cannot be rerun.
        UsageError: As for :func:`run`; also while another process holds the run dir.
    """
    path = Path(run_dir)
    saved = load_saved_config(path)
    wanted = config if config is not None else saved
    refuse_changes(path, saved, wanted)
    speed: dict[str, Any] = {}
    if concurrency is not None:
        speed["concurrency"] = concurrency
    if agent_concurrency is not None:
        speed["agent_concurrency"] = agent_concurrency
    if speed:
        wanted = RunConfig.model_validate({**wanted.model_dump(), **speed})
    return _guarded(wanted, events=events, resume_dir=path, rerun=rerun_statuses(rerun))


def _guarded(
    config: RunConfig,
    *,
    events: RunEvents | None,
    resume_dir: Path | None = None,
    rerun: Iterable[str] | None = None,
) -> RunOutcome:
    """Hide credentials, refuse a config holding one, prepare, execute, restore."""
    credentials = CredentialStore()
    # Provider keys leave os.environ before any trial process can inherit them.
    credentials.hide_from_env()
    try:
        refuse_credentials(config, credentials)
        with interruptible():  # nothing is written yet: Ctrl-C just stops here
            prepared = prepare_run(
                config,
                resume_dir=resume_dir,
                rerun=rerun if rerun is not None else rerun_statuses(),
                credentials=credentials,
            )
        try:
            return execute_run(prepared, events=events)
        finally:
            prepared.close()  # a no-op after a run; releases everything after a failure
    finally:
        credentials.restore_env()


def refuse_credentials(config: RunConfig, credentials: CredentialStore) -> None:
    """A config must never hold a provider key (it would be saved in ``config.toml``).

    Raises:
        ConfigError: Naming the keys that hold one (never the value).
    """
    known = [credentials.get(name) or "" for name in credentials.names()]
    leaking = secret_keys(config, known)
    if leaking:
        raise ConfigError(
            f"config key(s) {', '.join(leaking)} hold a provider credential; it would "
            "be saved in config.toml: pass credentials through the environment only"
        )


@dataclass(frozen=True)
class RunResults:
    """A run dir read back by :func:`load_run`.

    Attributes:
        run_dir: The run dir.
        config: Its saved config.
        records: The latest record of every trial, in the order trials first appear.
        summary: Metrics over ``records`` (what ``summary.json`` holds once the run ends).
        status: Its ``status.json`` (live state, see :mod:`harness.records.status`), if any.
    """

    run_dir: Path
    config: RunConfig
    records: list[TrialRecord]
    summary: Summary
    status: Mapping[str, Any] | None


#: The largest ``summary.json`` read for its plan size (a real one is a few KiB).
MAX_SUMMARY_BYTES = 16 << 20


def load_run(run_dir: str | Path) -> RunResults:
    """Read a run dir (finished, running or dead) without changing it.

    A torn last line of ``trials.jsonl`` (a crash mid-write) is left out.

    Raises:
        ConfigError: Not a run dir, or its ``trials.jsonl`` cannot be read (a symlink
            or not a regular file: a forged run dir's link is never followed).
        CorruptRecordError: A line other than the last is not a record.
    """
    path = Path(run_dir)
    config = load_saved_config(path)
    try:
        read = read_run(path, summary_cap=MAX_SUMMARY_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {TRIALS_FILENAME}: {exc}") from None
    # The planned count is read beneath the run dir, as a regular file only: a forged run
    # dir's summary.json that is a FIFO hung ``regrade`` for ever.
    summary = summarize(
        read.records,
        threshold=config.threshold,
        planned=read.planned,
        planned_tasks=read.planned_tasks,
    )
    return RunResults(path, config, read.records, summary, read.status)


__all__ = ["RunResults", "check", "load_run", "refuse_credentials", "resume", "run"]

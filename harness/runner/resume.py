"""Resume planning: which trials of an existing run are kept, rerun, or still missing.

``harness run --resume RUN_DIR`` keeps every planned trial whose latest record is a
*result* and reruns the rest:

* kept by default: ``completed`` (graded), and ``agent_timeout``, ``agent_error``,
  ``verifier_error`` — the agent or the verifier really ran and failed, which is what the
  run measured; rerunning them would count them twice. ``--rerun-status agent_error`` (etc.)
  reruns them on purpose;
* rerun: ``environment_error`` (the sandbox failed, the agent was never judged),
  ``cancelled`` (interrupted), ``internal_error`` (the harness failed, or could not write
  the attempt's record: its fallback record stands for it), and trials with no record at
  all (never started, or running when the harness died).

A rerun trial keeps its id; its new record's ``attempt`` continues from the old one and the
old attempt (status, errors) goes into ``previous_attempts``. A resume is refused when the
records do not belong to the plan (a task was changed or removed since the run started).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.episodes.records import episode_of
from harness.errors import ResumeError
from harness.records import StoreSnapshot, TrialRecord, TrialStatus, TrialStore
from harness.trial import TrialPlan

DEFAULT_RERUN_STATUSES: frozenset[str] = frozenset(
    {
        TrialStatus.ENVIRONMENT_ERROR.value,
        TrialStatus.CANCELLED.value,
        TrialStatus.INTERNAL_ERROR.value,
    }
)
"""Statuses whose trials ``--resume`` reruns by default."""

OPTIONAL_RERUN_STATUSES: frozenset[str] = frozenset(
    {
        TrialStatus.AGENT_TIMEOUT.value,
        TrialStatus.AGENT_ERROR.value,
        TrialStatus.VERIFIER_ERROR.value,
    }
)
"""Statuses ``--rerun-status`` may add (a ``completed`` trial is a result: never rerun)."""


def rerun_statuses(extra: Iterable[str] = ()) -> frozenset[str]:
    """The statuses to rerun: the defaults plus ``extra`` (``--rerun-status``).

    Raises:
        ResumeError: ``extra`` names ``completed`` or an unknown status.
    """
    extra = list(extra)
    bad = [s for s in extra if s not in OPTIONAL_RERUN_STATUSES | DEFAULT_RERUN_STATUSES]
    if bad:
        allowed = ", ".join(sorted(OPTIONAL_RERUN_STATUSES))
        raise ResumeError(
            f"--rerun-status {', '.join(bad)}: not a status that can be rerun (allowed: "
            f"{allowed}; environment_error, cancelled and internal_error are always rerun; "
            "completed trials "
            "are results: start a new run to redo them)"
        )
    return DEFAULT_RERUN_STATUSES | frozenset(extra)


@dataclass
class ResumePlan:
    """What a resume does with each planned trial.

    Attributes:
        kept: Trial id → its final record, kept as is.
        rerun: Trial id → its latest record, to be rerun (becomes a previous attempt).
        missing: Planned trial ids without any record, in plan order.
        statuses: The statuses that are rerun.
    """

    kept: dict[str, TrialRecord] = field(default_factory=dict)
    rerun: dict[str, TrialRecord] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    statuses: frozenset[str] = DEFAULT_RERUN_STATUSES

    @property
    def to_run(self) -> int:
        """How many trials this resume runs."""
        return len(self.rerun) + len(self.missing)

    def prior(self, trial_id: str) -> TrialRecord | None:
        """The record a rerun trial continues from (None for a missing one)."""
        return self.rerun.get(trial_id)

    def describe(self) -> str:
        """One line: kept / rerun (by status) / missing."""
        by_status: dict[str, int] = {}
        for record in self.rerun.values():
            by_status[str(record.status)] = by_status.get(str(record.status), 0) + 1
        detail = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
        rerun = f"{len(self.rerun)} to rerun" + (f" ({detail})" if detail else "")
        return f"{len(self.kept)} kept, {rerun}, {len(self.missing)} never finished"


def _listing(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def plan_resume(
    plans: Sequence[TrialPlan],
    latest: dict[str, TrialRecord],
    *,
    statuses: frozenset[str] = DEFAULT_RERUN_STATUSES,
) -> ResumePlan:
    """Sort the planned trials into kept, rerun and missing.

    Args:
        plans: The run's plan (from its saved config).
        latest: Trial id → latest record, as read from ``trials.jsonl``.
        statuses: Statuses to rerun (see :func:`rerun_statuses`).

    Returns:
        The resume plan.

    Raises:
        ResumeError: A record belongs to no planned trial, or to a task whose content
            changed since it was recorded.
    """
    planned = {plan.id: plan for plan in plans}
    orphans = [trial_id for trial_id in latest if trial_id not in planned]
    if orphans:
        raise ResumeError(
            f"trials.jsonl holds {len(orphans)} trial(s) the saved config no longer plans "
            f"({_listing(orphans)}): the task set changed since the run started; restore "
            "the tasks, or start a new run"
        )
    changed = [
        f"{record.task.key} (hash {record.task.hash[:12]} → {planned[trial_id].task.hash[:12]})"
        for trial_id, record in latest.items()
        if record.task.hash != planned[trial_id].task.hash
    ]
    if changed:
        unique = list(dict.fromkeys(changed))
        raise ResumeError(
            f"{len(unique)} task(s) changed since their trials were recorded: "
            f"{_listing(unique)}; mixing results of two versions of a task is not a resume: "
            "restore the tasks, or start a new run"
        )
    result = ResumePlan(statuses=statuses)
    for plan in plans:
        record = latest.get(plan.id)
        if record is None:
            result.missing.append(plan.id)
        elif str(record.status) in statuses or not _complete(record):
            result.rerun[plan.id] = record
        else:
            result.kept[plan.id] = record
    return result


def _complete(record: TrialRecord) -> bool:
    """An episode is kept only when its env called it complete (a trial: always)."""
    episode = episode_of(record)
    return episode is None or episode.complete


def read_for_resume(
    run_dir: Path,
    plans: Sequence[TrialPlan],
    *,
    statuses: frozenset[str] = DEFAULT_RERUN_STATUSES,
) -> tuple[ResumePlan, StoreSnapshot]:
    """Read a run dir's ``trials.jsonl`` once and plan its resume (nothing is written).

    A torn last line is tolerated here (and reported in the snapshot); compacting the
    store with the returned snapshot repairs it without reading the file again.

    Raises:
        ResumeError: See :func:`plan_resume`.
        CorruptRecordError: A line other than the last is not a valid record.
    """
    snapshot = TrialStore(run_dir).snapshot()
    latest: dict[str, TrialRecord] = {}
    for record in snapshot.report.records:
        latest[record.id] = record
    return plan_resume(plans, latest, statuses=statuses), snapshot


__all__ = [
    "DEFAULT_RERUN_STATUSES",
    "OPTIONAL_RERUN_STATUSES",
    "ResumeError",
    "ResumePlan",
    "plan_resume",
    "read_for_resume",
    "rerun_statuses",
]

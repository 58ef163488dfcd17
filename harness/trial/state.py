"""The state of one running trial, and the helpers every step of its life uses.

:class:`TrialState` is the base of the trial's steps (:mod:`~harness.trial.staging`,
:mod:`~harness.trial.agent_phase`, :mod:`~harness.trial.grade`), which
:mod:`~harness.trial.lifecycle` runs top to bottom. A failure is recorded, never raised
past the trial: :meth:`TrialState.fail` sets the status (the first failure decides it) and
appends the error, to the current step's outcome too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import TrialCancelled
from harness.gateway import TrialAccess, TrialUsage
from harness.records import TrialError, TrialStatus
from harness.records.layout import trial_evidence_dir
from harness.tasks import Task
from harness.trial.artifacts import Caps
from harness.trial.env import agent_env
from harness.trial.failures import failure_status
from harness.trial.settings import Clock, TrialPlan, TrialSettings
from harness.trial.steps import StepOutcome
from harness.trial.tampering import RootChangeLog
from sandbox.backend import PhaseResult, Sandbox
from sandbox.inside.evidence import EvidenceEvent


def trial_error(exc: BaseException, phase: str, step: str | None = None) -> TrialError:
    """The record's form of ``exc``, raised in ``phase`` (of ``step``, in a multi-step task)."""
    fields: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc) or repr(exc)}
    if not getattr(exc, "retryable", True):
        fields["retryable"] = False
    if step is not None:
        fields["step"] = step
    # Typed facts an error carries (an agent's exit code and cause): the record's too.
    fields.update(getattr(exc, "record_fields", None) or {})
    return TrialError.model_validate({**fields, "phase": phase})


class TrialState:
    """The mutable state of one running trial, and what every step of its life uses."""

    def __init__(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> None:
        self.plan = plan
        self.task = plan.task
        self.settings = settings
        self.attempt = attempt
        self.clock = Clock()
        self.status = TrialStatus.COMPLETED
        self.errors: list[TrialError] = []
        self.events: list[dict[str, Any]] = []
        self.reward: float | None = None
        self.rewards: dict[str, float] = {}
        self.posture: dict[str, Any] | None = None
        self.verifier_posture: dict[str, Any] | None = None
        #: The agent's kept services alive when a verifier started (``agent_services =
        #: keep``; None: nothing was asked to be kept).
        self.agent_processes_alive: list[dict[str, Any]] | None = None
        self.sandbox: Sandbox | None = None
        self.sandbox_info: dict[str, Any] = {"backend": "unknown"}
        self.evidence = settings.run_dir / (plan.evidence or trial_evidence_dir(plan.id))
        #: Per agent phase, what it changed in the image's root (:mod:`~harness.trial.tampering`).
        self.root_log = RootChangeLog(
            self.evidence, self.events, self.task.config.harness.expected_root_changes
        )
        self.phase = "prepare"
        self.access: TrialAccess | None = None
        self.model_usage: TrialUsage | None = None
        #: The task, or the step, running now; and where its evidence goes.
        self.view: Task = plan.task
        self.step_evidence = self.evidence
        self.steps: list[StepOutcome] = []
        #: What each judge decided (the record's ``judges``; :mod:`~harness.trial.judging`).
        self.judge_details: dict[str, dict[str, Any]] = {}

    # -- helpers -----------------------------------------------------------------------------

    @property
    def step_name(self) -> str | None:
        """The name of the step running now (None for a single-step task)."""
        return self.view.step.name if self.view.step is not None else None

    @property
    def step_index(self) -> int | None:
        """The index of the step running now (None for a single-step task).

        Every phase of the step names it (``PhaseRequest.step``): it gets its step's network.
        """
        return self.view.step.index if self.view.step is not None else None

    def enter(self, phase: str) -> None:
        """Enter ``phase`` (reported to the run); an interrupted run starts no agent or grading.

        Raises:
            TrialCancelled: The run is interrupted and ``phase`` is ``execute`` or ``grade``.
        """
        self.phase = phase
        if self.settings.on_phase is not None:
            self.settings.on_phase(self.plan.id, phase)
        if phase in ("execute", "grade") and self.settings.cancel.is_set():
            # Interrupted: no agent starts and nothing is graded; the cleanup still runs.
            raise TrialCancelled(f"run interrupted before the {phase} phase")

    def fail(self, status: TrialStatus, exc: BaseException, phase: str) -> None:
        """Record ``exc`` as a failure in ``phase``; the first failure decides the status."""
        if self.status is TrialStatus.COMPLETED:
            # An error while the run is being interrupted is the interruption's doing.
            self.status = TrialStatus.CANCELLED if self.settings.cancel.is_set() else status
        error = trial_error(exc, phase, self.step_name)
        self.errors.append(error)
        if self.view.step is not None:
            self.steps[-1].errors.append(error.model_dump(mode="json"))

    def fail_in(self, phase: str, exc: BaseException) -> TrialStatus:
        """Record ``exc`` as a failure in ``phase``, its status from the one table.

        Returns:
            The status the table gives the failure (:mod:`~harness.trial.failures`); the
            trial's own status stays the first failure's.
        """
        status = failure_status(phase, exc)
        self.fail(status, exc, phase)
        return status

    def record_events(self, events: list[EvidenceEvent]) -> None:
        """Add what an evidence walk or copy reported to the record's events."""
        self.events.extend(e.as_dict() for e in events)

    def _phase_events(self, role: str, result: PhaseResult) -> None:
        step = {"step": self.step_name} if self.step_name is not None else {}
        if result.agent_services_kept:
            self.events.append(
                {
                    "type": "agent_services_kept",
                    "phase": role,
                    "detail": "processes holding a listening socket outlived the phase and "
                    "kept running (agent_services = keep)",
                    "processes": result.agent_services_kept,
                    **step,
                }
            )
        unread = result.agent_services_unread
        if unread:
            bounds = unread.get("bounds") or {}
            self.events.append(
                {
                    "type": "agent_services_unread",
                    "phase": role,
                    "detail": "the listener scan left these processes unread (past its "
                    f"{bounds.get('users')} users or {bounds.get('processes')} processes, or "
                    "with ids no single user holds): none was kept, they were killed with "
                    "the phase",
                    "count": int(unread.get("count") or 0),
                    "processes": list(unread.get("processes") or []),
                    **step,
                }
            )
        if result.agent_services_error is not None:
            self.events.append(
                {
                    "type": "agent_services_error",
                    "phase": role,
                    "detail": "no listening process was kept: " + result.agent_services_error,
                    **step,
                }
            )
        if result.agent_services_dropped is not None:
            self.events.append(
                {
                    "type": "agent_services_dropped",
                    "phase": role,
                    **result.agent_services_dropped,
                    **step,
                }
            )
        if result.agent_processes_alive is not None:
            alive = self.agent_processes_alive or []
            seen = {p.get("pid") for p in alive}
            alive += [p for p in result.agent_processes_alive if p.get("pid") not in seen]
            self.agent_processes_alive = alive
        if result.survivors:
            self.events.append(
                {
                    "type": "survivors",
                    "phase": role,
                    "detail": "processes outlived the phase and were killed before grading",
                    "processes": result.survivors[:50],
                    **step,
                }
            )
        if result.output_truncated:
            self.events.append(
                {
                    "type": "output_truncated",
                    "phase": role,
                    "stdout_bytes": result.stdout_bytes,
                    "stderr_bytes": result.stderr_bytes,
                    **step,
                }
            )

    @property
    def caps(self) -> Caps:
        """The evidence size caps of every copy out of a sandbox."""
        return Caps(self.settings.max_evidence_file_bytes, self.settings.max_evidence_total_bytes)

    def _copy(self, path: str, dest: Path, sandbox: Sandbox | None = None) -> None:
        source = sandbox or self.sandbox
        assert source is not None
        caps = self.caps
        self.record_events(
            source.copy_out(
                path, dest, max_file_bytes=caps.file_bytes, max_total_bytes=caps.total_bytes
            )
        )

    def agent_phase_env(self, extra: dict[str, str]) -> dict[str, str]:
        """The environment of an agent phase in the trial's sandbox, with ``extra`` added."""
        assert self.sandbox is not None
        return agent_env(self.sandbox, self.view, self.plan.id, extra)


__all__ = ["TrialState", "trial_error"]

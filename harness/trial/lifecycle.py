"""One trial's life, top to bottom (docs/harbor.md).

prepare → build (the image, where the backend builds one) → reset (start the sandbox,
wait for the healthcheck) → for each step (one for a single-step task): stage (the step's
files and setup, its healthcheck) → execute (the agent) → collect (logs, workspace) →
grade (in the agent's sandbox or a separate one) → artifacts; a step below its
``min_reward`` ends the steps → cleanup, which always runs in the contract order, its
errors reported with the run's → the transcript, the judges (on the
trial's final state) → persist (the record).
"""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from harness.errors import agent_fault
from harness.gateway import TrialUsage
from harness.records import (
    AgentRef,
    SandboxRef,
    TaskRef,
    TrialError,
    TrialRecord,
    TrialStatus,
    Usage,
)
from harness.records.failpoints import kill_point
from harness.records.layout import SESSION_FILENAME, STEPS_DIRNAME
from harness.records.transcript import write_transcript
from harness.tasks import Task
from harness.tasks.networks import effective_networks, trial_networks, with_network
from harness.trial.agent_phase import AgentPhase
from harness.trial.failures import failure_status
from harness.trial.grade import CollectAndGrade
from harness.trial.grading import trial_reward
from harness.trial.judging import Judging
from harness.trial.settings import TrialPlan, TrialSettings
from harness.trial.staging import Staging
from harness.trial.state import trial_error
from harness.trial.steps import StepOutcome, aggregate_rewards
from harness.trial.usage_precedence import with_usage_source
from sandbox.cleanup import CleanupStep, run_cleanup
from sandbox.errors import (
    CLEANUP_FAILED,
    RUN_AND_CLEANUP_FAILED,
    SandboxDied,
    SandboxError,
    SessionFileMissing,
    SpaceFilledByAgent,
)


class Trial(Staging, AgentPhase, CollectAndGrade, Judging):
    """One running trial: its steps in order, then the cleanup and the record.

    ``Trial(plan, settings, attempt).run()`` runs it to its record (what :func:`run_trial`
    does). A subclass changes one part of the life and keeps the rest (the episodes' agent
    and judge trials, :mod:`harness.episodes.trials`, are the worked example). Its
    extension points:

    - :meth:`run_phases`: everything between the start and the cleanup (prepare, reset,
      then each step); replace it for a different life in the same sandbox discipline.
    - :meth:`execute`: the agent phase (:mod:`~harness.trial.agent_phase`);
      :meth:`agent_phase_env` is the environment of every agent phase and
      :attr:`last_agent_phase` says whether the trial's model access ends with this one.
    - :meth:`artifacts`: after grading, the sandbox still up and the agent dead.
    - :meth:`judge`: the run's judges on the final state (:mod:`~harness.trial.judging`).
    - :meth:`cleanup_steps` and :meth:`dispose`: what the cleanup runs, in order.

    What an extension calls to record what happened: :meth:`enter` (a phase starts),
    :meth:`fail_in` (a phase's failure, its status from the one table,
    :mod:`~harness.trial.failures`), :meth:`fail` (a failure of a given status: the first
    one decides the trial's), :meth:`copy_failed` (a copy out of what the agent left
    failed), :meth:`record_events`. A failure is recorded, never raised past :meth:`run`.

    Args:
        plan: The trial's task, rollout and id.
        settings: What every trial of the run shares.
        attempt: The attempt's number (1 for the first).
    """

    # -- the whole trial ------------------------------------------------------------------

    def run(self) -> TrialRecord:
        """Run the trial to the end and return its record (errors are in the record)."""
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        if self.evidence.exists():
            shutil.rmtree(self.evidence)
        self.evidence.mkdir(parents=True)
        run_error: BaseException | None = None
        try:
            if self.settings.cancel.is_set():
                self.status = TrialStatus.CANCELLED
                self.errors.append(
                    TrialError(type="Cancelled", message="run interrupted", phase="prepare")
                )
            else:
                self.run_phases()
        except BaseException as exc:  # recorded, never lost; re-raised below if fatal
            run_error = exc
            self._escaped(exc)
        run_failed = bool(self.errors)
        run_dir = self.settings.run_dir
        kill_point("phase:cleanup")
        with self.clock.phase("cleanup"):
            outcome = run_cleanup(self.cleanup_steps())
        self.settings.track(self.sandbox, running=False)
        machines = False  # a cleanup error that is the machine's (not the agent's tree)
        for cleanup_error, step in zip(outcome.errors, outcome.failed_steps, strict=True):
            for inner in _flatten(cleanup_error):
                self.errors.append(trial_error(inner, f"cleanup:{step}"))
                if isinstance(inner, SessionFileMissing):
                    # The agent removed or swapped its own session file (tampering).
                    self._final(self.errors[-1], "the agent's session file", in_step=False)
                    if self.status is TrialStatus.COMPLETED:
                        self.status = TrialStatus.AGENT_ERROR
                    continue
                why = None if isinstance(inner, SandboxError) else agent_fault(inner, run_dir)
                if why is None:
                    machines = True
                else:  # removing what the agent left failed on it: the result stands
                    self._final(self.errors[-1], why, in_step=False)
        if outcome.errors:
            if run_failed or len(outcome.errors) > 1:
                # The aggregate's message, as sandbox.errors.aggregate_errors builds it.
                message = RUN_AND_CLEANUP_FAILED if run_failed else CLEANUP_FAILED
                self.events.append({"type": "cleanup_failed", "message": message})
            if self.status is TrialStatus.COMPLETED and machines:
                self.status = TrialStatus.ENVIRONMENT_ERROR
        self.write_transcript()
        self.judge()
        self.clock.timings["total"] = time.perf_counter() - start
        if isinstance(run_error, KeyboardInterrupt | SystemExit):
            raise run_error
        return self._record(started_at)

    def run_phases(self) -> None:
        """Prepare and reset the sandbox, then run each step (or the task) in turn."""
        try:
            with self.clock.phase("prepare"):
                self.enter("prepare")
                spec = self.prepare()
                self.sandbox = self.settings.make_sandbox(spec)
                self.settings.track(self.sandbox, running=True)
            if self.sandbox.builds_images:  # timed apart from the container's start
                with self.clock.phase("build"):
                    self.enter("build")
                    self.build()
            with self.clock.phase("reset"):
                self.enter("reset")
                self.reset()
        except Exception as exc:
            self.fail_in(self.phase, exc)
            return
        for view in self.task.views():
            going = self._run_view(view)
            if view.step is not None:
                self._step_network_events(view.step.name)
            if not going:
                break
        if self.task.steps:
            rewards = aggregate_rewards(self.steps, self.task.config.multi_step_reward_strategy)
            self.rewards = rewards or {}
            self.reward = trial_reward(rewards) if rewards else None

    def _step_network_events(self, step: str) -> None:
        """The connections the filter refused in this step's phases, named for the step.

        Each step has its own policies; a refusal says which step's phase it was.
        """
        assert self.sandbox is not None
        try:
            events = self.sandbox.network_events()
        except SandboxError:
            return  # not lost: the sandbox's last call (remove_root) collects them
        self.events.extend({**event, "step": step} for event in events)

    def _run_view(self, view: Task) -> bool:
        """Run the task (or one step of it); whether the next step may run."""
        self.view = view
        step = view.step
        if step is not None:
            self.step_evidence = self.evidence / STEPS_DIRNAME / step.name
            networks = effective_networks(self.task.config, self.settings.network, step.config)
            self.steps.append(
                StepOutcome(
                    name=step.name,
                    index=step.index,
                    network={role: policy.to_json() for role, policy in networks.items()},
                )
            )
            self.reward, self.rewards = None, {}
            try:
                with self.clock.phase("setup"):
                    self.enter("setup")
                    self.stage()
            except Exception as exc:
                self.fail_in("setup", exc)
                return self._stop("the step's setup failed")
        start = time.perf_counter()
        try:
            with self.clock.phase("execute"):
                self.enter("execute")
                slot = self.settings.agent_slot
                with slot(self.plan.id) if slot is not None else nullcontext():
                    self.execute()
        except Exception as exc:
            status = self.fail_in("execute", exc)
            # The agent's own processes brought the sandbox down, or filled a space the
            # harness writes after them (a root agent's /trial).
            if isinstance(exc, SandboxDied | SpaceFilledByAgent):
                # Scored 0 like a wrong answer: left ungraded, the trial would drop out of
                # the graded mean and pass@k, and running out of memory on purpose when
                # wrong would beat answering wrong (as breaking the grader would, _grade).
                if self.status is TrialStatus.AGENT_ERROR:  # not a run being interrupted
                    self.reward, self.rewards = 0.0, {"reward": 0.0}
                    if step is not None:
                        self.steps[-1].rewards = {"reward": 0.0}
                return self._stop(
                    "the sandbox died"
                    if isinstance(exc, SandboxDied)
                    else "the agent filled a space the harness writes"
                )
            if status is TrialStatus.ENVIRONMENT_ERROR:
                return self._stop("the environment failed")
        try:
            with self.clock.phase("collect"):
                self.enter("collect")
                self.collect()
        except Exception as exc:
            self.copy_failed(exc, "collect")
        graded = self._grade()
        try:
            self.artifacts()
        except Exception as exc:
            self.copy_failed(exc, "artifacts")
        if step is None:
            return True
        outcome = self.steps[-1]
        outcome.rewards = dict(self.rewards) if graded or self.rewards else None
        outcome.timings["total"] = time.perf_counter() - start
        if not graded:
            return self._stop("the step was not graded")
        failure = step.config.min_reward_failure(outcome.rewards)
        if failure is not None:
            return self._stop(failure)
        return True

    def _grade(self) -> bool:
        try:
            with self.clock.phase("grade"):
                self.enter("grade")
                self.grade()
            return True
        except Exception as exc:
            if isinstance(exc, SpaceFilledByAgent):
                # A space the root agent filled broke a step of grading: scored 0 like a
                # wrong answer, never retried (as what it left in its tree, below).
                self.fail_in("grade", exc)
                self.reward, self.rewards = 0.0, {"reward": 0.0}
            elif failure_status("grade", exc) is TrialStatus.ENVIRONMENT_ERROR and (
                self._agents_doing(exc, "grade")
            ):
                # What the agent left broke grading (its own storage full, say): a failed
                # attempt, scored 0 like a wrong answer. Left ungraded, it would drop out of
                # the graded mean, and breaking the grader would beat answering wrong.
                self.reward, self.rewards = 0.0, {"reward": 0.0}
            else:
                self.fail_in("grade", exc)
        return False

    # -- whose fault ----------------------------------------------------------------------
    #
    # Only faults of the machine or the engine are retried (docs/security.md, "Failures").
    # What the agent left (a tree too deep, too wide or too long, names that are not UTF-8,
    # its own storage full) can make walking or copying it fail on the host: that is the
    # agent's doing, never an environment_error, never retried.

    def _agents_doing(self, exc: BaseException, phase: str) -> bool:
        """Record ``exc`` as the agent's failure if the agent's tree caused it."""
        if isinstance(exc, SandboxError):
            return False
        why = agent_fault(exc, self.settings.run_dir)
        if why is None:
            return False
        self.fail(TrialStatus.AGENT_ERROR, exc, phase)
        self._final(self.errors[-1], why)
        return True

    def _final(self, error: TrialError, why: str, *, in_step: bool = True) -> None:
        """Mark ``error`` (just recorded) as one a retry cannot change, caused by the agent."""
        extra = error.model_extra if error.model_extra is not None else {}
        extra.update({"retryable": False, "cause": "agent", "reason": why})
        if in_step and self.view.step is not None and self.steps and self.steps[-1].errors:
            self.steps[-1].errors[-1].update(retryable=False, cause="agent", reason=why)

    def copy_failed(self, exc: BaseException, phase: str) -> None:
        """A copy out of what the agent left failed: the machine's, or the agent's doing.

        The engine failing or the run dir filling up is the machine's (an environment
        error, retried). Anything else, an error known to come from the agent's tree or one
        nobody expected, is not: the trial goes on to be graded on what was kept, and an
        ``evidence_incomplete`` event says what is missing and why.
        """
        if isinstance(exc, SandboxDied):
            # What a phase left brought the container down (out of memory): a failed
            # attempt scored 0 like a wrong answer, never retried (harness/trial/failures.py).
            self.fail_in(phase, exc)
            if self.status is TrialStatus.AGENT_ERROR:  # not a run being interrupted
                self.reward, self.rewards = 0.0, {"reward": 0.0}
            return
        why = None if isinstance(exc, SandboxError) else agent_fault(exc, self.settings.run_dir)
        if isinstance(exc, SandboxError) or (isinstance(exc, OSError) and why is None):
            self.fail(TrialStatus.ENVIRONMENT_ERROR, exc, phase)
            return
        event: dict[str, Any] = {
            "type": "evidence_incomplete",
            "phase": phase,
            "error": type(exc).__name__,
            "detail": (str(exc) or repr(exc))[:1000],
            "cause": "agent" if why is not None else "unexpected",
            "reason": why or "an unexpected error copying what the agent left",
        }
        if self.step_name is not None:
            event["step"] = self.step_name
        self.events.append(event)

    def _escaped(self, exc: BaseException) -> None:
        """An exception no phase caught: recorded; only a fault of the machine is retried."""
        self.errors.append(trial_error(exc, self.phase, self.step_name))
        if self.status is not TrialStatus.COMPLETED:
            return
        why = agent_fault(exc, self.settings.run_dir)
        if isinstance(exc, KeyboardInterrupt) or self.settings.cancel.is_set():
            self.status = TrialStatus.CANCELLED
        elif why is not None and not isinstance(exc, SandboxError):
            self.status = TrialStatus.AGENT_ERROR
            self._final(self.errors[-1], why)
        elif isinstance(exc, SandboxError | OSError | SystemExit):
            self.status = TrialStatus.ENVIRONMENT_ERROR
        else:  # the harness's own failure: recorded, never retried away
            self.status = TrialStatus.INTERNAL_ERROR
            extra = self.errors[-1].model_extra
            if extra is not None:
                extra["retryable"] = False

    def _stop(self, why: str) -> bool:
        """End the steps here (the remaining ones do not run); False."""
        if self.steps and self.view.step is not None:
            remaining = len(self.task.steps) - self.view.step.index - 1
            if remaining:
                self.steps[-1].stopped = why
                self.events.append(
                    {
                        "type": "steps_stopped",
                        "step": self.view.step.name,
                        "reason": why,
                        "skipped": [s.name for s in self.task.steps[self.view.step.index + 1 :]],
                    }
                )
        return False

    # -- cleanup --------------------------------------------------------------------------

    def snapshot_session(self) -> None:
        """The agent's session file, then its own logs (an installed CLI's, converted)."""
        try:
            self._snapshot_session_file()
        finally:
            self.settings.agent.collect(self.sandbox, self.evidence)

    def _snapshot_session_file(self) -> None:
        name = self.settings.agent.session_file
        if name is None or self.sandbox is None:
            return
        data, event = self.sandbox.read_file(
            f"{self.sandbox.paths.session}/{name}", max_bytes=self.settings.max_evidence_file_bytes
        )
        if event is not None:
            self.record_events([event])
            if event.kind == "missing":
                raise SessionFileMissing(f"Agent produced no session file ({name}).")
            raise SessionFileMissing(
                f"Session file {name} is a {event.kind}, not a regular file; recorded as tampering"
            )
        assert data is not None
        self.evidence.mkdir(parents=True, exist_ok=True)
        (self.evidence / SESSION_FILENAME).write_bytes(data)

    def dispose(self) -> None:
        """Dispose of the agent's per-trial state; its model token is dead by now."""
        try:
            self.revoke_model_access()
        finally:
            self.settings.agent.dispose()

    def remove_root(self) -> None:
        """Stop the sandbox, its network filter's refusals kept in the record's events first."""
        if self.sandbox is None:
            return
        try:
            self.events.extend(self.sandbox.network_events())
        finally:
            self.sandbox.stop()

    def cleanup_steps(self) -> list[CleanupStep]:
        """The cleanup, in the contract's order: session snapshot, dispose, remove the root."""
        return [
            CleanupStep("snapshot_session", self.snapshot_session),
            CleanupStep("dispose", self.dispose),
            CleanupStep("remove_root", self.remove_root),
        ]

    # -- persist --------------------------------------------------------------------------

    def write_transcript(self) -> None:
        """Derive ``transcript.jsonl`` from the session and the model calls (if any)."""
        try:
            write_transcript(self.evidence)
        except Exception as exc:  # evidence is kept as is; the failure is recorded
            self.events.append(
                {"type": "transcript_failed", "detail": f"{type(exc).__name__}: {exc}"}
            )

    def _record(self, started_at: datetime) -> TrialRecord:
        task = self.task
        info = dict(self.sandbox_info)
        backend = str(info.pop("backend", "unknown"))
        image = info.pop("image", None)
        extra: dict[str, Any] = self.judge_fields()
        networks = trial_networks(
            task.config, self.settings.network, (step.config for step in task.steps)
        )
        if task.steps:
            extra["steps"] = [step.as_record() for step in self.steps]
        if self.root_log.summaries:
            extra["root_changes"] = self.root_log.summaries
        if self.root_log.tampered_verdict and self.reward is not None:
            extra["tampered_verdict"] = True
        if self.agent_processes_alive is not None:
            # agent_services = keep: the verdict was taken beside these (empty: none alive).
            extra["agent_processes_alive"] = self.agent_processes_alive
        return TrialRecord(
            id=self.plan.id,
            task=TaskRef(
                name=task.name,
                key=task.key,
                hash=task.hash,
                path=str(task.path),
                version=task.config.task.version,
            ),
            agent=AgentRef(model=self.settings.model, **self.settings.agent.describe()),
            sandbox=SandboxRef(backend=backend, image=image, **info),
            rollout=self.plan.rollout,
            attempt=self.attempt,
            status=self.status,
            ok=self.status is TrialStatus.COMPLETED and not self.errors,
            reward=self.reward,
            rewards=self.rewards,
            errors=self.errors,
            timings=self.clock.timings,
            usage=with_usage_source(usage_of(self.model_usage), self.evidence),
            versions=dict(self.settings.versions),
            started_at=started_at,
            finished_at=datetime.now(UTC),
            evidence_dir=str(self.evidence.relative_to(self.settings.run_dir)),
            events=self.events,
            posture=with_network(self.posture, networks["agent"]),
            verifier_posture=with_network(self.verifier_posture, networks["verifier"]),
            **extra,
        )


def usage_of(usage: TrialUsage | None) -> Usage:
    """A record's usage from the gateway's totals of a trial."""
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cost_usd=usage.cost_usd,
        calls=usage.calls,
        cached_tokens=usage.cached_tokens,
        refused_calls=usage.refused,
    )


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_flatten(inner))
        return out
    return [exc]


def run_trial(plan: TrialPlan, settings: TrialSettings, *, attempt: int = 1) -> TrialRecord:
    """Run one trial to the end and return its record (errors are in the record)."""
    return Trial(plan, settings, attempt).run()

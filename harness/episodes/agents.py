"""An episode's agents: each run is its own trial, with its own identity.

:class:`EpisodeAgent` plays one role. Each of its runs is a trial of its own: its own id
(``<episode>-<name>``), gateway token and budget, sandbox (so its own sandbox user: the
local backend's per-trial uid slot, a container of its own), and evidence dir
(``trials/<episode>/agents/<name>``). Its outcome becomes a :class:`Trace` that joins the
episode when the run ends, whatever happened to the agent. The episode's gate
(``max_concurrent_agents``) is held for each run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from harness.agents.kinds import Agent
from harness.episodes.records import Episode, Trace
from harness.episodes.trials import EpisodeTrial, JudgeTrial
from harness.errors import EnvError
from harness.records import TrialRecord
from harness.records.layout import episode_agent_evidence_dir
from harness.tasks import Task
from harness.trial.settings import TrialPlan, TrialSettings

TrialFactory = Callable[[TrialPlan, TrialSettings, int], EpisodeTrial]


@dataclass
class EpisodeContext:
    """What an episode's agents share: the episode plan, settings, gate and episode."""

    plan: TrialPlan
    settings: TrialSettings
    attempt: int
    episode: Episode
    gate: threading.Semaphore | None
    on_agent: Callable[[str, str], None] | None = None
    _held: threading.local = field(default_factory=threading.local, repr=False)

    def agent_plan(self, name: str) -> TrialPlan:
        """The plan of one agent's run: its own id, its evidence inside the episode's."""
        return TrialPlan(
            id=f"{self.plan.id}-{name}",
            task=self.plan.task,
            rollout=self.plan.rollout,
            evidence=episode_agent_evidence_dir(self.plan.id, name),
        )

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold the episode's agent gate (``max_concurrent_agents``).

        An agent run inside another's (a judge after its solver, on the solver's thread)
        takes no second permit: the first agent is dead by then.
        """
        if self.gate is None or getattr(self._held, "yes", False):
            yield
            return
        self.gate.acquire()
        self._held.yes = True
        try:
            yield
        finally:
            self._held.yes = False
            self.gate.release()


class EpisodeAgent:
    """The agent playing one role of an episode (fresh for each episode).

    Args:
        role: The role.
        agent: The agent (built for this episode).
        context: The episode's shared context.
    """

    def __init__(self, role: str, agent: Agent, context: EpisodeContext) -> None:
        self.role = role
        self.agent = agent
        self.context = context
        self._runs = 0
        self._lock = threading.Lock()

    def _name(self, name: str | None) -> str:
        with self._lock:
            self._runs += 1
            return name or (self.role if self._runs == 1 else f"{self.role}-{self._runs}")

    def settings(self, name: str) -> TrialSettings:
        """The trial settings of one of this agent's runs (its agent; its phases shown)."""
        context = self.context
        outer = context.settings.on_phase
        report = context.on_agent

        def on_phase(_trial_id: str, phase: str) -> None:
            if report is not None:
                report(name, phase)
            elif outer is not None:
                outer(context.plan.id, f"{name}:{phase}")

        return replace(context.settings, agent=self.agent, on_phase=on_phase)

    def run(
        self,
        task: Task,
        *,
        name: str | None = None,
        drive: Callable[[EpisodeTrial], None] | None = None,
        after: Callable[[EpisodeTrial], None] | None = None,
        keep_access: bool = False,
    ) -> Trace:
        """One run of this agent as a trial of its own: sandbox, agent, grade.

        Args:
            task: The task (its verifier grades the run).
            name: The agent's name in the episode (default: the role, then ``role-2``...).
            drive: Runs the execute phase (e.g. a conversation's turns).
            after: Runs after grading in the still living sandbox (e.g. a shared judge).
            keep_access: Keep the gateway socket open past the agent phase (for ``after``).

        Returns:
            Its trace (also added to the episode). An agent's failure is on the trace;
            an exception of ``drive``/``after`` (the env's code) is raised as ``EnvError``.
        """
        name = self._name(name)
        plan = self.context.agent_plan(name)

        def make(plan: TrialPlan, settings: TrialSettings, attempt: int) -> EpisodeTrial:
            return EpisodeTrial(
                plan, settings, attempt, drive=drive, after=after, keep_access=keep_access
            )

        return self._run(make, plan, name, task)

    def judge(self, solver: EpisodeTrial, *, mode: str, instruction: str) -> Trace:
        """Judge a solver's run (its sandbox up, its processes dead): see :class:`JudgeTrial`."""
        name = self._name(None)
        plan = self.context.agent_plan(name)

        def make(plan: TrialPlan, settings: TrialSettings, attempt: int) -> EpisodeTrial:
            return JudgeTrial(
                plan, settings, attempt, solver=solver, mode=mode, instruction=instruction
            )

        return self._run(make, plan, name, plan.task)

    def _run(self, make: TrialFactory, plan: TrialPlan, name: str, task: Task) -> Trace:
        del task  # the plan holds it (one task per episode)
        context = self.context
        with context.slot():
            trial = make(plan, self.settings(name), context.attempt)
            record = trial.run()
        trace = trace_of(record, name=name, role=self.role, trial=trial)
        context.episode.add(trace)
        if context.on_agent is not None:
            context.on_agent(name, "done")
        if trial.env_error is not None:
            error = trial.env_error
            raise EnvError(f"{type(error).__name__}: {error}") from error
        return trace


def trace_of(record: TrialRecord, *, name: str, role: str, trial: EpisodeTrial) -> Trace:
    """An agent's trace from its trial's record."""
    extra: dict[str, Any] = {}
    if record.events:
        extra["events"] = record.events
    judges = (record.model_extra or {}).get("judges")
    if judges:  # the task's judges ran on this agent's graded trial (docs/episodes.md)
        extra["judges"] = judges
    return Trace(
        name=name,
        role=role,
        agent=record.agent.name,
        id=record.id,
        status=record.status,
        ok=record.ok,
        reward=record.reward,
        rewards=record.rewards,
        metrics=dict(trial.metrics),
        info=dict(trial.info),
        usage=record.usage,
        errors=record.errors,
        evidence_dir=record.evidence_dir,
        started_at=record.started_at,
        finished_at=record.finished_at,
        timings=record.timings,
        sandbox=record.sandbox.model_dump(mode="json"),
        posture=record.posture,
        **extra,
    )


__all__ = ["EpisodeAgent", "EpisodeContext", "trace_of"]

"""Running one episode to its record: setup → run → finalize, each behind a boundary.

An exception out of the env (or a deadline passed) is the episode's error (``EnvError``,
status ``environment_error``, retried by the run's retry rules); whatever happened to an
agent is on its trace. The record is a :class:`~harness.records.TrialRecord` (the episode's
reward, its agents' usage summed) whose ``episode`` field holds the traces.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.agents.kinds import Agent
from harness.config import AgentConfig, EnvConfig
from harness.episodes.agents import EpisodeAgent, EpisodeContext
from harness.episodes.env import Agents, Env, EnvParams
from harness.episodes.records import EPISODE_FIELD, Episode, EpisodeRecord, sum_usage
from harness.errors import EnvError, TrialCancelled
from harness.models.catalog import ModelSpec
from harness.records import AgentRef, SandboxRef, TaskRef, TrialError, TrialRecord, TrialStatus
from harness.records.layout import trial_evidence_dir
from harness.trial.settings import TrialPlan, TrialSettings

AgentBuilder = Callable[[AgentConfig], Agent]


@dataclass
class EnvSetup:
    """A run's env, checked at prepare: its class, parameters and role agents' configs."""

    env_class: type[Env]
    params: EnvParams
    config: EnvConfig
    roles: Mapping[str, AgentConfig]
    build_agent: AgentBuilder
    model: ModelSpec | None = None
    #: Called as ``(episode id, agent name, phase)`` as an episode's agents move on.
    on_agent: Callable[[str, str, str], None] | None = field(default=None, repr=False)

    def fresh_agents(self, context: EpisodeContext) -> Agents:
        """New agent objects for one episode, on the run's shared gateway and backend."""
        agents = {}
        for role, config in self.roles.items():
            agent = self.build_agent(config)
            if self.model is not None and agent.model_use != "none":
                agent.bind_model(self.model)
            agents[role] = EpisodeAgent(role, agent, context)
        return Agents(agents, context)

    def describe(self) -> dict[str, Any]:
        """The env as the record names it."""
        return {"id": self.config.id, "params": self.params.model_dump(mode="json")}

    def run_attempt(self, plan: TrialPlan, settings: TrialSettings, attempt: int) -> TrialRecord:
        """Run one attempt as an episode of this env (a :data:`~harness.trial.AttemptRunner`).

        The runner hands this to the trials as ``TrialSettings.attempt``, so an executor
        runs episodes without knowing this layer.
        """
        return run_episode(plan, settings, self, attempt=attempt)


def _bounded(what: str, action: Callable[[], None], timeout: float | None, key: str) -> None:
    """Run the env's ``action`` in a thread: its exception or a passed deadline → EnvError."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            action()
        except BaseException as exc:  # carried to the episode's errors
            failure.append(exc)

    worker = threading.Thread(target=target, name=f"env-{what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise EnvError(f"{what} exceeded its {timeout:g}s deadline ({key})")
    if failure:
        exc = failure[0]
        if isinstance(exc, EnvError | TrialCancelled):
            raise exc
        raise EnvError(f"{what}: {type(exc).__name__}: {exc}") from exc


def run_episode(
    plan: TrialPlan, settings: TrialSettings, setup: EnvSetup, *, attempt: int = 1
) -> TrialRecord:
    """Run one episode to the end and return its record (errors are in the record)."""
    started_at = datetime.now(UTC)
    start = time.perf_counter()
    episode = Episode()
    gate = setup.config.max_concurrent_agents
    on_agent = setup.on_agent

    def report(name: str, phase: str) -> None:
        if on_agent is not None:
            on_agent(plan.id, name, phase)

    context = EpisodeContext(
        plan=plan,
        settings=settings,
        attempt=attempt,
        episode=episode,
        gate=threading.Semaphore(gate) if gate else None,
        on_agent=report if on_agent is not None else None,
    )
    env = setup.env_class(setup.params)
    cls = type(env).__name__
    evidence = settings.run_dir / trial_evidence_dir(plan.id)
    evidence.mkdir(parents=True, exist_ok=True)
    status = TrialStatus.COMPLETED
    try:
        agents = setup.fresh_agents(context)

        def setup_and_run() -> None:
            _bounded(f"{cls}.setup()", lambda: env.setup(agents), None, "")
            env.run(plan.task, agents)
            if not episode.traces:
                raise EnvError(f"{cls}.run() ran no agent: every episode must run at least one")

        _bounded(f"{cls}.run()", setup_and_run, setup.config.timeout_sec, "env.timeout_sec")
        _bounded(
            f"{cls}.finalize()",
            lambda: env.finalize(plan.task, episode),
            setup.config.finalize_timeout_sec,
            "env.finalize_timeout_sec",
        )
    except TrialCancelled as exc:
        status = TrialStatus.CANCELLED
        episode.errors.append(TrialError(type="Cancelled", message=str(exc), phase="episode"))
    except Exception as exc:
        status = TrialStatus.ENVIRONMENT_ERROR
        episode.errors.append(TrialError(type=type(exc).__name__, message=str(exc), phase="env"))
    if status is TrialStatus.COMPLETED and settings.cancel.is_set() and not episode.ok:
        status = TrialStatus.CANCELLED
    return _record(plan, settings, setup, episode, env, attempt, status, started_at, start)


def _record(
    plan: TrialPlan,
    settings: TrialSettings,
    setup: EnvSetup,
    episode: Episode,
    env: Env,
    attempt: int,
    status: TrialStatus,
    started_at: datetime,
    start: float,
) -> TrialRecord:
    task = plan.task
    try:
        complete = bool(env.complete(episode)) and status is TrialStatus.COMPLETED
    except Exception as exc:
        complete = False
        episode.errors.append(
            TrialError(type="EnvError", message=f"complete(): {exc}", phase="env")
        )
    by_agent = {trace.name: trace.usage for trace in episode.traces}
    main = setup.env_class.main_role()
    main_traces = episode.by_role(main) or episode.traces
    sandbox = main_traces[0].sandbox if main_traces else None
    info = EpisodeRecord(
        env=setup.describe(),
        ok=episode.ok,
        complete=complete,
        errors=list(episode.errors),
        traces=list(episode.traces),
        metrics=dict(episode.metrics),
        usage_by_agent=by_agent,
    )
    return TrialRecord.model_validate(
        {
            "id": plan.id,
            "task": TaskRef(name=task.name, key=task.key, hash=task.hash, path=str(task.path)),
            "agent": AgentRef.model_validate(
                {"name": setup.roles[main].name, "model": settings.model, "env": setup.config.id}
            ),
            "sandbox": SandboxRef.model_validate(sandbox or {"backend": "unknown"}),
            "rollout": plan.rollout,
            "attempt": attempt,
            "status": status,
            "ok": episode.ok and status is TrialStatus.COMPLETED,
            "reward": episode.reward,
            "rewards": episode.rewards,
            "errors": episode.errors,
            "timings": {"total": time.perf_counter() - start},
            "usage": sum_usage(list(by_agent.values())),
            "versions": dict(settings.versions),
            "started_at": started_at,
            "finished_at": datetime.now(UTC),
            "evidence_dir": trial_evidence_dir(plan.id),
            EPISODE_FIELD: info.model_dump(mode="json"),
        }
    )


__all__ = ["EnvSetup", "run_episode"]

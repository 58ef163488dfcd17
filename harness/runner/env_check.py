"""Checking the run's env before anything is written: its class, parameters and role agents.

The runner's part of episodes (docs/episodes.md): it finds the env in its registry, builds an
agent per role, refuses an executor that cannot run episodes, and checks every selected task
against the env and each role's agent. What it returns, an
:class:`~harness.episodes.run.EnvSetup`, runs each attempt as an episode
(``TrialSettings.attempt``).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.agents.kinds import Agent
from harness.agents.registry import build_agent
from harness.config import AgentConfig, RunConfig
from harness.episodes.env import Env
from harness.episodes.registry import env_class
from harness.episodes.run import EnvSetup
from harness.errors import UsageError
from harness.executors.registry import EXECUTORS
from harness.tasks import Task

SINGLE = "single"
"""The default env: today's trial (its record has no ``episode`` field)."""


def is_single(config: RunConfig) -> bool:
    """Whether the run's env is the default one (run as a plain trial)."""
    return config.env.id == SINGLE and not config.env.roles and not config.env.params


def refuse_executor(config: RunConfig) -> None:
    """Episodes run only on an executor that runs them (``local``): refused before anything.

    Raises:
        UsageError: The run's executor does not run episodes (``--executor ray``).
        PluginError: The executor is not installed.
    """
    executor = EXECUTORS.get(config.executor.name)
    if not executor.runs_episodes:
        raise UsageError(
            f"--env {config.env.id}: episodes are refused with --executor "
            f"{config.executor.name} (an episode's env and agents run in the harness process, "
            "not on worker nodes); run with --executor local"
        )


def role_configs(config: RunConfig, cls: type[Env]) -> dict[str, AgentConfig]:
    """Role → agent config.

    The run's ``[agent]`` plays the main role, ``[env.roles]`` the others (else the env's
    default for the role).

    Raises:
        UsageError: A role the env does not declare, or one with no agent.
    """
    unknown = sorted(set(config.env.roles) - set(cls.roles))
    if unknown:
        raise UsageError(
            f"[env.roles] names {', '.join(unknown)}, which {cls.__name__} does not declare "
            f"(its roles: {', '.join(cls.roles)})"
        )
    roles: dict[str, AgentConfig] = {}
    for index, (role, default) in enumerate(cls.roles.items()):
        chosen = config.env.roles.get(role) or (config.agent if index == 0 else default)
        if chosen is None:
            raise UsageError(f"[env.roles.{role}]: {cls.__name__} needs an agent for {role!r}")
        roles[role] = chosen
    return roles


def prepare_env(config: RunConfig) -> tuple[EnvSetup, list[Agent]]:
    """The run's env and one agent per role (to check the tasks and choose the model).

    Raises:
        PluginError: The env is not installed or does not load.
        UsageError: Bad parameters or roles.
    """
    cls: type[Env] = env_class(config.env.id)
    params = cls.parse_params(config.env.params)
    roles = role_configs(config, cls)
    setup = EnvSetup(
        env_class=cls, params=params, config=config.env, roles=roles, build_agent=build_agent
    )
    return setup, [build_agent(role) for role in roles.values()]


def model_agent(agents: Sequence[Agent]) -> Agent:
    """The agent the run's model is chosen for: the first that needs one (else the first)."""
    for use in ("required", "optional"):
        for agent in agents:
            if agent.model_use == use:
                return agent
    return agents[0]


def check_tasks(setup: EnvSetup, agents: Sequence[Agent], tasks: Sequence[Task]) -> None:
    """Every selected task must suit the env and every role's agent; all problems listed.

    Raises:
        UsageError: The problems, one per line.
    """
    env = setup.env_class(setup.params)
    problems = []
    for task in tasks:
        for check in (env.check, *(agent.check for agent in agents)):
            try:
                check(task)
            except UsageError as exc:
                problems.append(str(exc))
    if problems:
        raise UsageError("\n".join(dict.fromkeys(problems)))


__all__ = [
    "SINGLE",
    "check_tasks",
    "is_single",
    "model_agent",
    "prepare_env",
    "refuse_executor",
    "role_configs",
]

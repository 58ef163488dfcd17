"""The agents registry: the ``harness.agents`` entry points, and building a run's agent.

A distribution adds an agent (either kind) by declaring it::

    [project.entry-points."harness.agents"]
    myagent = "my_package.agent:MyAgent"        # a harness.Agent subclass

``harness agents list`` shows what is installed; ``python:module:Class`` names trusted code
by its import path instead (:mod:`harness.agents.python_agent`).
"""

from __future__ import annotations

from harness.agents.kinds import Agent
from harness.agents.python_agent import PREFIX as PYTHON_PREFIX
from harness.agents.python_agent import PythonAgent
from harness.config import AgentConfig
from harness.registry import Registry, subclass_of

AGENTS_GROUP = "harness.agents"
"""The entry-point group of agents."""

AGENTS: Registry[type[Agent]] = Registry(AGENTS_GROUP, "agent", subclass_of(Agent))
"""Agents: ``SandboxAgent`` or ``HarnessAgent`` subclasses (``oracle``, ``nop``...)."""


def build_agent(config: AgentConfig) -> Agent:
    """The agent of ``[agent]``: an installed one by name, or ``python:module:Class``.

    Raises:
        PluginError: The name is not installed (or does not load).
        AgentConfigError: A command or options it does not take.
    """
    if config.name.startswith(PYTHON_PREFIX):
        # Trusted code named by its import path, not an installed plug-in.
        return PythonAgent.from_config(config)
    agent = AGENTS.get(config.name).from_config(config)
    agent.name = config.name
    return agent


__all__ = ["AGENTS", "AGENTS_GROUP", "PYTHON_PREFIX", "build_agent"]

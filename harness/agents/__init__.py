"""Agents under evaluation: the two kinds (:mod:`.kinds`), the context of a harness agent.

Installed agents are found through the ``harness.agents`` entry points
(:data:`harness.agents.registry.AGENTS`); the built-ins are registered there too: ``oracle``,
``nop``, ``command``, ``builtin`` (this package's modules of the same names), while
``python:module:Class`` names trusted code by its import path (:mod:`.python_agent`).
"""

from harness.agents.context import AgentContext, ExecResult
from harness.agents.kinds import (
    Agent,
    AgentCommand,
    AgentRunner,
    HarnessAgent,
    ModelUse,
    SandboxAgent,
)

__all__ = [
    "Agent",
    "AgentCommand",
    "AgentContext",
    "AgentRunner",
    "ExecResult",
    "HarnessAgent",
    "ModelUse",
    "SandboxAgent",
]

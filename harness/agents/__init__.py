"""Agents under evaluation."""

from harness.agents.base import Agent, AgentCommand
from harness.agents.builtin import (
    AGENT_NAMES,
    CommandAgent,
    NopAgent,
    OracleAgent,
    make_agent,
)

__all__ = [
    "AGENT_NAMES",
    "Agent",
    "AgentCommand",
    "CommandAgent",
    "NopAgent",
    "OracleAgent",
    "make_agent",
]

"""The ``nop`` agent: does nothing (every task should score 0: a check that tests can fail)."""

from __future__ import annotations

from typing_extensions import override

from harness.agents.kinds import AgentCommand, SandboxAgent
from harness.tasks import Task
from sandbox.backend import Sandbox


class NopAgent(SandboxAgent):
    """Does nothing: every task should score 0 with it (a check that tests can fail)."""

    name = "nop"

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        return AgentCommand(["true"])


__all__ = ["NopAgent"]

"""The ``command`` agent: any program, run in the sandbox as the agent user."""

from __future__ import annotations

import shlex
from typing import Any

from typing_extensions import override

from harness.agents.kinds import AgentCommand, SandboxAgent, reject_options
from harness.config import AgentConfig
from harness.errors import AgentConfigError
from harness.tasks import Task
from sandbox.backend import Sandbox


class CommandAgent(SandboxAgent):
    """Runs a user command line; ``{instruction_file}`` and ``{workspace}`` are filled in.

    The instruction is also given on stdin. The command is split like a shell would
    (``shlex``) but never run through a shell, so placeholders cannot inject syntax.
    """

    name = "command"
    model_use = "optional"
    PLACEHOLDERS = ("instruction_file", "workspace")

    def __init__(self, command_line: str) -> None:
        try:
            argv = shlex.split(command_line)
        except ValueError as exc:
            raise AgentConfigError(f"--agent-cmd: cannot parse {command_line!r}: {exc}") from exc
        if not argv:
            raise AgentConfigError("--agent-cmd: the command is empty")
        for part in argv:
            try:
                part.format_map({p: "" for p in self.PLACEHOLDERS})
            except (KeyError, IndexError, ValueError) as exc:
                raise AgentConfigError(
                    f"--agent-cmd: unknown placeholder in {part!r}: {exc}; "
                    f"use {{instruction_file}} or {{workspace}} (double braces for a literal)"
                ) from exc
        self.command_line = command_line
        self.argv = argv

    @classmethod
    def from_config(cls, config: AgentConfig) -> CommandAgent:
        """The agent of ``[agent] cmd`` (``--agent-cmd``); it takes no other option.

        Raises:
            AgentConfigError: No command, or options it does not take.
        """
        if not config.cmd:
            raise AgentConfigError("--agent command needs --agent-cmd 'PROGRAM ARGS...'")
        reject_options(config.name, list(config.kwargs))
        return cls(config.cmd)

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        values = {
            "instruction_file": sandbox.paths.instruction,
            "workspace": sandbox.paths.workspace,
        }
        return AgentCommand([p.format_map(values) for p in self.argv], stdin=task.instruction)

    @override
    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.command_line}


__all__ = ["CommandAgent"]

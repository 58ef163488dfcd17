"""The ``builtin`` agent: a stdlib tool loop that runs inside the sandbox, after the drop.

Its code is ``sandbox/inside/agent_loop.py``; the supervisor runs it in-process in the dropped
child (no interpreter of the task image is trusted, none is needed). It talks to the model
only through the trial's gateway and writes ``session.jsonl`` (docs/model-access.md §3).
"""

from __future__ import annotations

import json
from typing import Any

from typing_extensions import override

from harness.agents.command import CommandAgent
from harness.agents.kinds import AgentCommand, SandboxAgent
from harness.errors import AgentConfigError, UsageError
from harness.tasks import Task
from sandbox.backend import PhaseResult, Sandbox
from sandbox.inside.agent_loop import SESSION_FILE  # the loop's own name for the file it writes

DEFAULT_MAX_TURNS = 30


class BuiltinAgent(SandboxAgent):
    """The built-in tool-using agent (read, write, edit, ls, grep, find, shell)."""

    name = "builtin"
    session_file = SESSION_FILE
    model_use = "required"

    def __init__(self, *, max_turns: int = DEFAULT_MAX_TURNS) -> None:
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise AgentConfigError(
                f"max_turns must be a whole number of at least 1, not {max_turns!r}"
            )
        self.max_turns = max_turns

    @override
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        if self.model is None:
            raise UsageError("the builtin agent has no model; select one with --model")
        api = "anthropic-messages" if self.model.api == "anthropic-messages" else "openai-chat"
        config: dict[str, Any] = {
            "api": api,
            "model": self.model.upstream,
            "model_label": self.model.id,
            "max_turns": self.max_turns,
        }
        return AgentCommand(
            argv=["harness-builtin-agent"],
            entry={"module": "agent_loop", "config": config},
        )

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The ``end`` line's error from the session (the strict-completion message)."""
        data, event = sandbox.read_file(
            f"{sandbox.paths.session}/{SESSION_FILE}", max_bytes=16 << 20
        )
        if data is None or event is not None:
            return None
        for line in reversed(data.decode("utf-8", "replace").splitlines()):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("type") == "end":
                error = entry.get("error")
                return str(error) if error else None
        return None

    @override
    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_turns": self.max_turns}


#: harness 0.1 exported the ``command`` agent from this module; that import path still works.
__all__ = ["DEFAULT_MAX_TURNS", "SESSION_FILE", "BuiltinAgent", "CommandAgent"]

"""The agent seam: what runs in the sandbox during the agent phase."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from harness.tasks import Task
from sandbox.backend import Sandbox


@dataclass(frozen=True)
class AgentCommand:
    """The process the supervisor starts for the agent phase."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None


class Agent(ABC):
    """An agent under evaluation.

    Subprocess agents return an ``AgentCommand``; the supervisor runs it as the sandbox
    user. ``session_file`` names the JSONL transcript the agent writes under the session
    dir, if it writes one: the cleanup snapshot then treats a missing file as an error.
    """

    name: str = "agent"
    session_file: str | None = None

    def check(self, task: Task) -> None:  # noqa: B027 - optional hook
        """Raise ``AgentConfigError`` if this agent cannot run ``task`` (before any trial)."""

    def prepare(self, task: Task, sandbox: Sandbox) -> None:  # noqa: B027 - optional hook
        """Stage what the agent needs inside the sandbox before it starts."""

    @abstractmethod
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        """The command of the agent phase."""

    def dispose(self) -> None:  # noqa: B027 - optional hook
        """Release per-trial agent state (a cleanup step; must be idempotent)."""

    def describe(self) -> dict[str, Any]:
        """Agent facts for the trial record."""
        return {"name": self.name}

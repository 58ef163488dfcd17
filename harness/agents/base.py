"""The agent seam: what runs in the sandbox during the agent phase."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from harness.tasks import Task
from sandbox.backend import PhaseResult, Sandbox

if TYPE_CHECKING:
    from harness.agents.context import AgentContext

ModelUse = Literal["required", "optional", "none"]


@dataclass(frozen=True)
class AgentCommand:
    """The process the supervisor starts for the agent phase."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    #: Run an in-sandbox stdlib entry point after the drop instead of exec'ing ``argv``.
    entry: dict[str, Any] | None = None


class Agent(ABC):
    """An agent under evaluation.

    Subprocess agents return an ``AgentCommand``; the supervisor runs it as the sandbox
    user. ``session_file`` names the JSONL transcript the agent writes under the session
    dir, if it writes one: the cleanup snapshot then treats a missing file as an error.
    """

    name: str = "agent"
    session_file: str | None = None
    #: Whether the agent needs a model (``required``), can use one (``optional``: it gets
    #: the gateway when a model is selected) or never calls one (``none``).
    model_use: ModelUse = "none"
    #: Trusted agents run in the harness process (``run_in_harness``) and act on the
    #: sandbox through ``AgentContext.exec``; all others run as a sandbox phase.
    in_process: bool = False

    def check(self, task: Task) -> None:  # noqa: B027 - optional hook
        """Raise ``AgentConfigError`` if this agent cannot run ``task`` (before any trial)."""

    def prepare(self, task: Task, sandbox: Sandbox) -> None:  # noqa: B027 - optional hook
        """Stage what the agent needs inside the sandbox before it starts."""

    @abstractmethod
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        """The command of the agent phase."""

    def run_in_harness(self, context: AgentContext) -> None:
        """Run a trusted in-process agent (only when ``in_process`` is true)."""
        raise NotImplementedError(f"{self.name} runs in the sandbox, not in the harness")

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The agent's own message for a failed run (e.g. from its session), if it has one."""
        return None

    def dispose(self) -> None:  # noqa: B027 - optional hook
        """Release per-trial agent state (a cleanup step; must be idempotent)."""

    def describe(self) -> dict[str, Any]:
        """Agent facts for the trial record."""
        return {"name": self.name}

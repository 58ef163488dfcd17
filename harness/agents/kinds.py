"""The agent seam: two kinds of agent, and what runs them.

- :class:`SandboxAgent` runs as a command inside the sandbox, as the sandbox's agent user,
  under the supervisor (``oracle``, ``nop``, ``command``, ``builtin``). It is untrusted: it
  sees only the sandbox, and a model only through the trial's gateway socket.
- :class:`HarnessAgent` is trusted Python run in the harness process (``python:module:Class``
  and plug-ins): its :meth:`HarnessAgent.run` acts on the sandbox through an
  :class:`~harness.agents.context.AgentContext` (one supervised phase per ``exec``) and calls
  the model through ``context.chat``.

A trial runs an agent with ``agent.run_by(runner)``: each kind calls the one method of
:class:`AgentRunner` that runs it, so the trial needs no flag and no type check.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from typing_extensions import override

from harness.config import AgentConfig
from harness.errors import AgentConfigError
from harness.tasks import Task
from sandbox.backend import PhaseResult, Sandbox

if TYPE_CHECKING:
    from harness.agents.context import AgentContext
    from harness.models.catalog import ModelSpec

ModelUse = Literal["required", "optional", "none"]


@dataclass(frozen=True)
class AgentCommand:
    """The process the supervisor starts for a sandbox agent's phase.

    Attributes:
        argv: The command (never run through a shell).
        env: Extra environment variables of the phase.
        stdin: Text given on the phase's stdin.
        entry: Run an in-sandbox stdlib entry point after the privilege drop instead of
            exec'ing ``argv`` (``{"module": "agent_loop", "config": {...}}``).
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    entry: dict[str, Any] | None = None


class AgentRunner(Protocol):
    """What runs an agent (a trial): one method per kind of agent."""

    def run_in_sandbox(self, agent: SandboxAgent) -> None:
        """Run ``agent.command(...)`` as the sandbox's agent phase."""

    def run_in_harness(self, agent: HarnessAgent) -> None:
        """Run ``agent.run(context)`` in the harness under the agent timeout."""


class Agent(ABC):
    """An agent under evaluation: a :class:`SandboxAgent` or a :class:`HarnessAgent`.

    Attributes:
        name: The name it is installed under (``harness agents list``).
        kind: Which kind it is, for listings (``sandbox`` or ``harness``).
        model_use: Whether it needs a model (``required``), can use one (``optional``: it
            gets the gateway when a model is selected) or never calls one (``none``).
        session_file: The JSONL session the agent writes under the sandbox's session dir,
            if it writes one; the cleanup snapshot then treats a missing file as an error.
        model: The run's model, once bound (see :meth:`bind_model`).
    """

    name: str = "agent"
    kind: ClassVar[str] = "agent"
    model_use: ModelUse = "none"
    session_file: str | None = None
    model: ModelSpec | None = None

    @classmethod
    def from_config(cls, config: AgentConfig) -> Agent:
        """Build the agent from ``[agent]``: its ``kwargs`` are the constructor's options.

        Agents that take a command line (``command``) override this.

        Raises:
            AgentConfigError: A command was given, or an option the agent does not take.
        """
        reject_command(config)
        if config.version is not None:
            raise AgentConfigError(
                f"agent.version is only taken by installed agent CLIs, not --agent {config.name}"
            )
        return construct(cls, config.name, config.kwargs)

    @abstractmethod
    def run_by(self, runner: AgentRunner) -> None:
        """Be run by ``runner`` the way this kind of agent runs."""

    @abstractmethod
    def gateway_socket(self, socket: Path) -> Path | None:
        """The trial's gateway socket to hand to the sandbox, or None to keep it out."""

    def bind_model(self, model: ModelSpec) -> None:
        """Take the run's model (chosen explicitly, checked before any trial)."""
        self.model = model

    def check(self, task: Task) -> None:  # noqa: B027 - optional hook
        """Raise ``AgentConfigError`` if this agent cannot run ``task`` (before any trial)."""

    def prepare(self, task: Task, sandbox: Sandbox) -> None:  # noqa: B027 - optional hook
        """Stage what the agent needs inside the sandbox before it starts."""

    def sandbox_mounts(self) -> Mapping[str, Path]:
        """Host dirs the sandbox shows the agent read-only: in-sandbox path -> host dir."""
        return {}

    def mount_points(self) -> tuple[str, ...]:
        """The in-sandbox paths of :meth:`sandbox_mounts`, known without fetching anything.

        Asked before the run, so that a backend that cannot show host dirs refuses it
        before anything is fetched (:meth:`~sandbox.plugin.SandboxBackend.mount_problem`).
        """
        return tuple(self.sandbox_mounts())

    def collect(self, sandbox: Sandbox | None, evidence: Path) -> None:  # noqa: B027
        """Turn the agent's own logs into evidence (a cleanup step, after the grade)."""

    def dispose(self) -> None:  # noqa: B027 - optional hook
        """Release per-trial agent state (a cleanup step; must be idempotent)."""

    def describe(self) -> dict[str, Any]:
        """Agent facts for the trial record."""
        return {"name": self.name}

    def expect_install(self, planned: Mapping[str, Any]) -> None:  # noqa: B027 - optional
        """Run only from an install like ``planned`` (the driver's copy's ``install`` facts).

        Called on another node (a Ray worker) before its trial, with what the run's own
        copy of the agent described after its check (:meth:`describe`). Default: nothing.
        """


class SandboxAgent(Agent):
    """An agent run as a command inside the sandbox, as the agent user (untrusted)."""

    kind: ClassVar[str] = "sandbox"
    #: Whether a run that exits 0 with the trial's last model call failed is an
    #: ``agent_error``: true of a CLI whose whole job is talking to its model, which may
    #: print a provider's error and exit 0 (aider does); false of a command line that may
    #: probe the gateway on purpose and whose exit status is its author's to choose.
    exit_0_after_a_failed_call_fails: ClassVar[bool] = False

    @abstractmethod
    def command(self, task: Task, sandbox: Sandbox) -> AgentCommand:
        """The command of the agent phase."""

    def explain_failure(self, sandbox: Sandbox, result: PhaseResult) -> str | None:
        """The agent's own message for a failed run (e.g. from its session), if it has one."""
        return None

    @override
    def run_by(self, runner: AgentRunner) -> None:
        runner.run_in_sandbox(self)

    def gateway_socket(self, socket: Path) -> Path | None:
        """The socket: the agent calls the model from inside the sandbox."""
        return socket


class HarnessAgent(Agent):
    """Trusted Python run in the harness process, acting on the sandbox through a context."""

    kind: ClassVar[str] = "harness"

    @abstractmethod
    def run(self, context: AgentContext) -> None:
        """Solve the task: ``context.exec(...)`` in the sandbox, ``context.chat(...)``."""

    @override
    def run_by(self, runner: AgentRunner) -> None:
        runner.run_in_harness(self)

    def gateway_socket(self, socket: Path) -> Path | None:
        """None: the agent calls the model through ``context.chat``, never from the sandbox."""
        return None


def reject_command(config: AgentConfig) -> None:
    """Refuse ``[agent] cmd`` for an agent that runs no command line of the user's.

    Raises:
        AgentConfigError: A command was given.
    """
    if config.cmd is not None:
        raise AgentConfigError(
            f"--agent-cmd is only used with --agent command, not --agent {config.name}"
        )


def reject_options(name: str, unknown: Sequence[str], options: Sequence[str] = ()) -> None:
    """Refuse options an agent does not take, naming those it does.

    Raises:
        AgentConfigError: ``unknown`` is not empty.
    """
    if unknown:
        raise AgentConfigError(
            f"--agent {name} has no option {', '.join(unknown)} "
            f"(its options: {', '.join(options) or 'none'})"
        )


def construct(cls: type[Agent], name: str, options: Mapping[str, Any]) -> Agent:
    """``cls(**options)``, or an error naming the options ``--agent name`` takes.

    Raises:
        AgentConfigError: An unknown option, or one the constructor rejects.
    """
    params = inspect.signature(cls).parameters.values()
    named = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        reject_options(name, [key for key in options if key not in named], named)
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise AgentConfigError(f"--agent {name}: {exc}") from None


__all__ = [
    "Agent",
    "AgentCommand",
    "AgentRunner",
    "HarnessAgent",
    "ModelUse",
    "SandboxAgent",
    "construct",
    "reject_command",
    "reject_options",
]

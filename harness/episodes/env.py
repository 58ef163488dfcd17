"""The env seam: who takes part in an episode, and how (docs/episodes.md).

An :class:`Env` declares its roles; each episode gets fresh agents for them (on the run's
shared gateway and sandbox backend) and runs ``setup(agents)``, ``run(task, agents)`` and
``finalize(task, episode)``, each behind an error boundary and a deadline. An agent's failure
is data on its :class:`~harness.episodes.records.Trace` (an
:class:`~harness.episodes.records.Episode` holds them); only an exception out of the env
fails the episode. ``complete(episode)`` decides what ``--resume`` keeps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config import AgentConfig
from harness.episodes.records import Episode
from harness.errors import EnvError, UsageError
from harness.tasks import Task

if TYPE_CHECKING:
    from harness.episodes.agents import EpisodeAgent, EpisodeContext


class EnvParams(BaseModel):
    """An env's parameters (``[env]`` keys beyond the section's own); none by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Agents:
    """An episode's agents by role: ``agents.solver``, or ``agents["solver"]``."""

    def __init__(self, agents: Mapping[str, EpisodeAgent], context: EpisodeContext) -> None:
        self._agents = dict(agents)
        #: The episode's plan, settings and gate (for envs that talk to the gateway).
        self.context = context

    def __getitem__(self, role: str) -> EpisodeAgent:
        try:
            return self._agents[role]
        except KeyError:
            raise EnvError(f"no agent {role!r}; this env declares {sorted(self._agents)}") from None

    def __getattr__(self, role: str) -> EpisodeAgent:
        if role.startswith("_"):
            raise AttributeError(role)
        return self[role]

    def roles(self) -> list[str]:
        """The roles, in the env's order."""
        return list(self._agents)


class Env(ABC):
    """An episode's orchestration, in plain Python.

    Subclasses set ``roles`` (role → the default agent config of a role the run does not
    name; the first role is the main one, played by the run's ``[agent]``), may set
    ``Params`` (a pydantic model of their ``[env]`` parameters), and implement :meth:`run`.

    Args:
        params: The env's parameters, validated by ``Params``.
    """

    id: ClassVar[str] = ""
    roles: ClassVar[Mapping[str, AgentConfig | None]] = {"agent": None}
    Params: ClassVar[type[EnvParams]] = EnvParams

    def __init__(self, params: EnvParams) -> None:
        self.params = params

    @classmethod
    def parse_params(cls, raw: Mapping[str, Any]) -> EnvParams:
        """Validate ``[env]`` parameters.

        Raises:
            UsageError: An unknown key or a bad value, naming it.
        """
        try:
            return cls.Params.model_validate(dict(raw))
        except ValidationError as exc:
            problems = "; ".join(
                f"env.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise UsageError(f"[env] of {cls.__name__}: {problems}") from None

    @classmethod
    def main_role(cls) -> str:
        """The role the run's ``[agent]`` plays."""
        return next(iter(cls.roles))

    def check(self, task: Task) -> None:  # noqa: B027 - optional hook
        """Refuse a task this env cannot run (``UsageError``), before anything starts."""

    def setup(self, agents: Agents) -> None:  # noqa: B027 - optional hook
        """Once per episode, before :meth:`run`."""

    @abstractmethod
    def run(self, task: Task, agents: Agents) -> None:
        """Run the agents; each finished agent's trace joins the episode by itself."""

    def finalize(self, task: Task, episode: Episode) -> None:
        """Cross-agent scoring; by default the episode's reward is its last trace's."""
        if episode.traces:
            last = episode.traces[-1]
            episode.reward, episode.rewards = last.reward, dict(last.rewards)

    def complete(self, episode: Episode) -> bool:
        """Whether ``--resume`` keeps this episode (default: ``episode.ok``)."""
        return episode.ok


__all__ = ["Agents", "Env", "EnvParams", "Episode"]

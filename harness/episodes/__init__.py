"""Episodes: several agents in one trial, orchestrated in plain Python (docs/episodes.md).

An :class:`Env` declares roles and runs their agents; the built-ins are ``single`` (today's
trial, the default), ``best-of-n``, ``user-sim`` and ``judge`` (``shared``/``isolated``).
Custom envs come through the ``harness.envs`` entry points or as ``python:module:Class``.
"""

from harness.episodes.agents import EpisodeAgent, EpisodeContext
from harness.episodes.env import Agents, Env, EnvParams
from harness.episodes.records import Episode, EpisodeRecord, Trace, episode_of
from harness.episodes.run import EnvSetup, run_episode

__all__ = [
    "Agents",
    "Env",
    "EnvParams",
    "EnvSetup",
    "Episode",
    "EpisodeAgent",
    "EpisodeContext",
    "EpisodeRecord",
    "Trace",
    "episode_of",
    "run_episode",
]

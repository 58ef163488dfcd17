"""Plug-in registries, found through entry points; the built-ins register the same way.

A distribution adds a sandbox backend or an agent by declaring an entry point in its
``pyproject.toml`` (``harness`` declares its built-ins exactly so)::

    [project.entry-points."harness.sandboxes"]
    mybox = "my_package.backend:MyBackend"      # a sandbox.plugin.SandboxBackend

    [project.entry-points."harness.agents"]
    myagent = "my_package.agent:MyAgent"        # a harness.Agent (either kind)

    [project.entry-points."harness.executors"]
    mycluster = "my_package.executor:MyExecutor"  # a harness.executors.TrialExecutor

    [project.entry-points."harness.envs"]
    myenv = "my_package.envs:MyEnv"             # a harness.episodes.Env (docs/episodes.md)

``harness sandbox list``, ``harness agents list`` and ``harness executors list`` show what is
installed; ``--env`` takes an env's name or ``python:module:Class``. :meth:`Registry.register`
adds an entry in-process (tests, notebooks).

This module is the public face only: the mechanism is :mod:`harness.registry`, and each
registry lives beside its concept (:mod:`harness.agents.registry`,
:mod:`harness.backends.registry`, :mod:`harness.executors.registry`,
:mod:`harness.episodes.registry`; judge types: :mod:`harness.judges.registry`). The
harness's own layers import a registry from its concept's folder; this module imports only
those, so it never closes an import cycle.
"""

from harness.agents.registry import AGENTS, AGENTS_GROUP, PYTHON_PREFIX, build_agent
from harness.backends.registry import SANDBOXES, SANDBOXES_GROUP, open_backend
from harness.episodes.registry import ENVS, ENVS_GROUP, env_class
from harness.executors.registry import EXECUTORS, EXECUTORS_GROUP, open_executor
from harness.registry import Plugin, PluginInfo, Registry, subclass_of

__all__ = [
    "AGENTS",
    "AGENTS_GROUP",
    "ENVS",
    "ENVS_GROUP",
    "EXECUTORS",
    "EXECUTORS_GROUP",
    "PYTHON_PREFIX",
    "SANDBOXES",
    "SANDBOXES_GROUP",
    "Plugin",
    "PluginInfo",
    "Registry",
    "build_agent",
    "env_class",
    "open_backend",
    "open_executor",
    "subclass_of",
]

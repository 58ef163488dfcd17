"""The episode envs registry: the ``harness.envs`` entry points, and finding ``[env].id``.

A distribution adds an env by declaring it::

    [project.entry-points."harness.envs"]
    myenv = "my_package.envs:MyEnv"             # a harness.episodes.Env (docs/episodes.md)

``--env`` takes an env's name or ``python:module:Class`` (trusted code, no entry point).
"""

from __future__ import annotations

import importlib
from typing import cast

from harness.agents.python_agent import PREFIX as PYTHON_PREFIX
from harness.episodes.env import Env
from harness.errors import PluginError
from harness.registry import Registry, subclass_of

ENVS_GROUP = "harness.envs"
"""The entry-point group of episode envs."""

_env_class = subclass_of(Env)

ENVS: Registry[type[Env]] = Registry(ENVS_GROUP, "episode env", _env_class)
"""Episode envs: ``harness.episodes.Env`` subclasses (``single``, ``best-of-n``,
``user-sim``, ``judge``)."""


def env_class(name: str) -> type[Env]:
    """The env class named by ``[env].id``: installed, or ``python:module:Class``.

    Raises:
        PluginError: Not installed, not importable, or not an ``Env`` subclass.
    """
    if not name.startswith(PYTHON_PREFIX):
        return ENVS.get(name)
    module_name, _, attr = name[len(PYTHON_PREFIX) :].partition(":")
    try:
        loaded = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise PluginError(f"env {name}: cannot import it ({exc})") from None
    problem = _env_class(loaded)
    if problem is not None:
        raise PluginError(f"env {name} {problem}")
    return cast(type[Env], loaded)


__all__ = ["ENVS", "ENVS_GROUP", "env_class"]

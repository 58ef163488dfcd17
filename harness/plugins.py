"""Plug-in registries, found through entry points; the built-ins register the same way.

A distribution adds a sandbox backend or an agent by declaring an entry point in its
``pyproject.toml`` (``harness`` declares its built-ins exactly so)::

    [project.entry-points."harness.sandboxes"]
    mybox = "my_package.backend:MyBackend"      # a harness.backends.SandboxBackend

    [project.entry-points."harness.agents"]
    myagent = "my_package.agent:MyAgent"        # a harness.Agent (either kind)

    [project.entry-points."harness.executors"]
    mycluster = "my_package.executor:MyExecutor"  # a harness.executors.TrialExecutor

    [project.entry-points."harness.envs"]
    myenv = "my_package.envs:MyEnv"             # a harness.episodes.Env (docs/episodes.md)

``harness sandbox list``, ``harness agents list`` and ``harness executors list`` show what is
installed; ``--env`` takes an env's name or ``python:module:Class``. :meth:`Registry.register`
adds an entry in-process (tests, notebooks).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar, cast

from harness.agents.kinds import Agent
from harness.agents.python_agent import PREFIX as PYTHON_PREFIX
from harness.agents.python_agent import PythonAgent
from harness.backends.base import BackendOptions, SandboxBackend
from harness.config import AgentConfig, RunConfig
from harness.errors import PluginError
from harness.executors.base import ExecutorOptions, TrialExecutor

T = TypeVar("T")

SANDBOXES_GROUP = "harness.sandboxes"
AGENTS_GROUP = "harness.agents"
EXECUTORS_GROUP = "harness.executors"
ENVS_GROUP = "harness.envs"


@dataclass(frozen=True)
class Plugin:
    """One registered entry.

    Attributes:
        name: The name users select it by.
        target: ``module:attribute`` it loads from.
        distribution: The installed distribution declaring it (None when registered
            in-process).
        version: That distribution's version.
    """

    name: str
    target: str
    distribution: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class PluginInfo:
    """An entry as listings show it.

    Attributes:
        plugin: The entry.
        summary: The first line of its docstring.
        loaded: What it loads (None when it cannot be loaded).
        error: Why it cannot be loaded, if so.
    """

    plugin: Plugin
    summary: str = ""
    loaded: Any = None
    error: str | None = None


class Registry(Generic[T]):
    """The entries of one entry-point group, loaded on demand.

    Args:
        group: The entry-point group.
        what: What an entry is, for messages (``sandbox backend``).
        check: Returns an error message when a loaded object is not a valid entry.
    """

    def __init__(self, group: str, what: str, check: Callable[[Any], str | None]) -> None:
        self.group = group
        self.what = what
        self._check = check
        self._local: dict[str, tuple[Plugin, T]] = {}

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        found: dict[str, metadata.EntryPoint] = {}
        for entry in metadata.entry_points(group=self.group):
            found.setdefault(entry.name, entry)  # the first on sys.path wins, as imports do
        return found

    def plugins(self) -> list[Plugin]:
        """Every entry, sorted by name (in-process registrations shadow installed ones)."""
        listed: dict[str, Plugin] = {}
        for name, entry in self._entry_points().items():
            dist = entry.dist
            listed[name] = Plugin(
                name,
                entry.value,
                dist.metadata["Name"] if dist is not None else None,
                dist.version if dist is not None else None,
            )
        listed.update({name: plugin for name, (plugin, _obj) in self._local.items()})
        return [listed[name] for name in sorted(listed)]

    def names(self) -> list[str]:
        """The names users can select."""
        return [plugin.name for plugin in self.plugins()]

    def get(self, name: str) -> T:
        """Load the entry ``name``.

        Raises:
            PluginError: No such entry (the message lists the installed ones), or it fails
                to import or is not a valid entry.
        """
        if name in self._local:
            return self._local[name][1]
        entry = self._entry_points().get(name)
        if entry is None:
            installed = ", ".join(self.names()) or "none"
            raise PluginError(
                f"unknown {self.what} {name!r}; installed: {installed} (a plug-in adds one "
                f"through the {self.group!r} entry-point group)"
            )
        try:
            loaded = entry.load()
        except Exception as exc:
            raise PluginError(
                f"{self.what} {name!r} ({entry.value}) cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        problem = self._check(loaded)
        if problem is not None:
            raise PluginError(f"{self.what} {name!r} ({entry.value}) {problem}")
        return cast(T, loaded)

    def register(self, name: str, obj: T) -> None:
        """Add (or replace) an entry in this process only.

        Raises:
            PluginError: ``obj`` is not a valid entry.
        """
        problem = self._check(obj)
        if problem is not None:
            raise PluginError(f"{self.what} {name!r} {problem}")
        target = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"
        self._local[name] = (Plugin(name, target), obj)

    def describe(self) -> list[PluginInfo]:
        """Every entry with what loading it tells (a broken plug-in says why, never raises)."""
        infos = []
        for plugin in self.plugins():
            try:
                loaded: Any = self.get(plugin.name)
            except PluginError as exc:
                infos.append(PluginInfo(plugin, error=str(exc)))
                continue
            doc = inspect.getdoc(loaded) or ""
            infos.append(PluginInfo(plugin, summary=doc.split("\n", 1)[0], loaded=loaded))
        return infos

    def unregister(self, name: str) -> None:
        """Drop an in-process entry (installed entries are untouched)."""
        self._local.pop(name, None)


def subclass_of(base: type) -> Callable[[Any], str | None]:
    """A registry check: the entry must be a concrete subclass of ``base``."""

    def check(obj: Any) -> str | None:
        if (
            isinstance(obj, type)
            and issubclass(obj, base)
            and not getattr(obj, "__abstractmethods__", None)
        ):
            return None
        return f"is not a concrete subclass of {base.__module__}.{base.__qualname__}"

    return check


SANDBOXES: Registry[type[SandboxBackend]] = Registry(
    SANDBOXES_GROUP, "sandbox backend", subclass_of(SandboxBackend)
)
"""Sandbox backends: ``SandboxBackend`` subclasses (built-ins: ``local``, ``docker``)."""

AGENTS: Registry[type[Agent]] = Registry(AGENTS_GROUP, "agent", subclass_of(Agent))
"""Agents: ``SandboxAgent`` or ``HarnessAgent`` subclasses (``oracle``, ``nop``...)."""

EXECUTORS: Registry[type[TrialExecutor]] = Registry(
    EXECUTORS_GROUP, "executor", subclass_of(TrialExecutor)
)
"""Trial executors: ``TrialExecutor`` subclasses (built-ins: ``local``, ``ray``)."""


def _env_class(obj: Any) -> str | None:
    from harness.episodes.env import Env  # the episodes package imports the trial's

    return subclass_of(Env)(obj)


ENVS: Registry[Any] = Registry(ENVS_GROUP, "episode env", _env_class)
"""Episode envs: ``harness.episodes.Env`` subclasses (``single``, ``best-of-n``,
``user-sim``, ``judge``)."""


def env_class(name: str) -> Any:
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
    return loaded


def build_agent(config: AgentConfig) -> Agent:
    """The agent of ``[agent]``: an installed one by name, or ``python:module:Class``.

    Raises:
        PluginError: The name is not installed (or does not load).
        AgentConfigError: A command or options it does not take.
    """
    if config.name.startswith(PYTHON_PREFIX):
        # Trusted code named by its import path, not an installed plug-in.
        return PythonAgent.from_config(config)
    agent = AGENTS.get(config.name).from_config(config)
    agent.name = config.name
    return agent


def open_backend(config: RunConfig, run_name: str) -> SandboxBackend:
    """The run's sandbox backend, opened (nothing started yet).

    Raises:
        PluginError: The backend is not installed (or does not load).
        UsageError: The backend refused its options (e.g. the engine is unreachable).
    """
    backend_class = SANDBOXES.get(config.sandbox.backend)
    backend = backend_class(
        BackendOptions(run_name=run_name, config=config.sandbox, concurrency=config.concurrency)
    )
    backend.name = config.sandbox.backend
    return backend


def open_executor(config: RunConfig, run_name: str) -> TrialExecutor:
    """The run's trial executor, opened (connected, nothing dispatched yet).

    Raises:
        PluginError: The executor is not installed (or does not load).
        UsageError: The executor refused its options (e.g. Ray is not installed, or the
            cluster is unreachable).
    """
    executor_class = EXECUTORS.get(config.executor.name)
    executor = executor_class(ExecutorOptions(run_name=run_name, config=config))
    executor.name = config.executor.name
    return executor


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

"""The mechanism of every plug-in registry: the entries of one entry-point group, on demand.

Each concept keeps its own registry beside it (:mod:`harness.agents.registry`,
:mod:`harness.backends.registry`, :mod:`harness.executors.registry`,
:mod:`harness.episodes.registry`, :mod:`harness.judges.registry`); :mod:`harness.plugins`
is their public face (docs/plugins.md). This module sits at the ground floor: it imports
only :mod:`harness.errors` and the standard library, so any layer can keep a registry.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar, cast

from harness.errors import PluginError

T = TypeVar("T")


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
        summary: The first line of its docstring, as plain text (:func:`plain_text`).
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
            summary = plain_text(doc.split("\n", 1)[0])
            infos.append(PluginInfo(plugin, summary=summary, loaded=loaded))
        return infos

    def unregister(self, name: str) -> None:
        """Drop an in-process entry (installed entries are untouched)."""
        self._local.pop(name, None)


#: reST markup a docstring's line may hold: a role (``:class:`~a.b.C` ``, ``:meth:`x` ``) and
#: an inline literal (````x````).
_ROLE = re.compile(r":(?:[\w-]+:)+`(?P<short>~?)(?P<target>[^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")


def _role_text(match: re.Match[str]) -> str:
    # Sphinx shows ``~a.b.C`` as its last part.
    target = match["target"]
    return target.rsplit(".", 1)[-1] if match["short"] else target


def plain_text(line: str) -> str:
    """A docstring's line without its reST markup, as a terminal should show it.

    ``:class:`~a.b.C` `` becomes ``C``, ````x```` becomes ``x``.
    """
    return _LITERAL.sub(r"\1", _ROLE.sub(_role_text, line))


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


__all__ = ["Plugin", "PluginInfo", "Registry", "plain_text", "subclass_of"]

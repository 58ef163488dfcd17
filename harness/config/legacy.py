"""Harness 0.1's flat config keys, and where they live in the sections now.

A 0.1 ``config.toml`` holds ``[run]`` with ``agent = "command"``, ``agent_cmd``,
``sandbox = "local"``, ``paths``, ``task_names``, ``sandbox_uid`` and so on. Each is moved to
its place (``agent.name``, ``agent.cmd``, ``sandbox.backend``, ``tasks.paths``,
``tasks.names``, ``sandbox.uid``...), in files, in options and in ``--set`` keys alike, so
every old config loads and every old ``--set`` still works.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from harness.errors import ConfigError
from sandbox.options import DEFAULT_SANDBOX_GID, DEFAULT_SANDBOX_UID

LEGACY_KEYS: dict[str, tuple[str, ...]] = {
    "paths": ("tasks", "paths"),
    "num_tasks": ("tasks", "num_tasks"),
    "shuffle": ("tasks", "shuffle"),
    "seed": ("tasks", "seed"),
    "task_names": ("tasks", "names"),
    "exclude_tasks": ("tasks", "exclude"),
    "categories": ("tasks", "categories"),
    "agent_cmd": ("agent", "cmd"),
    "max_turns": ("agent", "kwargs", "max_turns"),
    "runtime": ("sandbox", "runtime"),
    "base_aliases": ("sandbox", "base_aliases"),
    "sandbox_uid": ("sandbox", "uid"),
    "sandbox_gid": ("sandbox", "gid"),
    "expose": ("sandbox", "expose"),
    # Flat in the Harbor-format work before the sections existed (never released).
    "pull": ("sandbox", "pull"),
    "skip_invalid": ("tasks", "skip_invalid"),
}
"""A flat key of harness 0.1 → its dotted place in the sections."""

#: 0.1 wrote its default local uid/gid base (65532) into every config.toml. That range held
#: ``nobody`` (65534), whose processes a trial's end-of-phase sweep would kill: it loads as
#: today's default instead (the uids a trial runs as are not part of what it measures).
OLD_DEFAULT_IDS = {
    "sandbox_uid": (65532, DEFAULT_SANDBOX_UID),
    "sandbox_gid": (65532, DEFAULT_SANDBOX_GID),
}

SECTION_SHORTHAND: dict[str, str] = {"agent": "name", "sandbox": "backend", "executor": "name"}
"""A section given a string means this key of it (``agent = "nop"`` → ``agent.name``)."""


def new_key(parts: Sequence[str], value: Any) -> list[str]:
    """The sectioned form of a dotted key (a ``--set`` key, or a key of a flat config).

    Args:
        parts: The key's parts (``["agent_cmd"]``, ``["retry", "max_retries"]``).
        value: The value set there (a section set to a string is its shorthand).

    Returns:
        The key's parts in the sections (``["agent", "cmd"]``); other keys are unchanged.
    """
    head, rest = parts[0], list(parts[1:])
    if head in LEGACY_KEYS:
        return [*LEGACY_KEYS[head], *rest]
    if head in SECTION_SHORTHAND and not rest and isinstance(value, str):
        return [head, SECTION_SHORTHAND[head]]
    return [head, *rest]


def sectioned(data: Mapping[str, Any]) -> dict[str, Any]:
    """One layer of config keys with every flat key moved into its section.

    Args:
        data: Config keys (a file's, the command line's, or a constructor's).

    Returns:
        A new mapping; sections given as tables are merged with the flat keys moved there.

    Raises:
        ConfigError: A flat key and its sectioned place are both given, with other values.
    """
    out: dict[str, Any] = {}
    moved: list[tuple[list[str], Any, str]] = []
    for key, value in copy.deepcopy(dict(data)).items():
        if key in OLD_DEFAULT_IDS and value == OLD_DEFAULT_IDS[key][0]:
            value = OLD_DEFAULT_IDS[key][1]
        parts = new_key([key], value)
        if parts == [key]:
            out[key] = value
        else:
            moved.append((parts, value, key))
    for parts, value, old in moved:
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"config key {old!r} needs {part!r} to be a table, not {child!r}")
            node = child
        where = ".".join(parts)
        if parts[-1] in node and node[parts[-1]] != value:
            raise ConfigError(
                f"config keys {old!r} and {where!r} both given, with different values; "
                f"keep {where!r}"
            )
        node[parts[-1]] = value
    return out


__all__ = ["LEGACY_KEYS", "SECTION_SHORTHAND", "new_key", "sectioned"]

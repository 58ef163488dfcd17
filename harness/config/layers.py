"""Where a run config comes from: layers, files, ``--set``, the saved ``config.toml``.

A run's config comes from, lowest precedence first: the defaults, a TOML file
(``harness run -c run.toml``), the options given on the command line, then every
``--set a.b=value`` in order. Each layer's flat 0.1 keys are moved into their sections
(:mod:`harness.config.legacy`), then the layers are deep-merged into one mapping and
validated once by :class:`~harness.config.model.RunConfig` (an unknown key is an error
naming it).

A config file holds the config's keys and sections at the top level, or under a ``[run]``
table — the layout of the ``config.toml`` a run writes, so a run dir's config can start a
new run. Relative ``tasks.paths``, ``models`` and ``output_dir`` in a file are relative to
the file's directory; on the command line they are relative to the working directory. The
resolved config stores them absolute, so ``harness run --resume RUN_DIR`` works from
anywhere.
"""

from __future__ import annotations

import copy
import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.config.legacy import new_key, sectioned
from harness.config.model import NO_TASKS, RunConfig
from harness.config.toml import to_toml
from harness.errors import ConfigError
from harness.records.atomic import write_bytes_atomic
from harness.records.layout import CONFIG_FILENAME
from sandbox.beneath import is_file_beneath

RESUME_FREE_KEYS: tuple[str, ...] = (
    "concurrency",
    "agent_concurrency",
    "executor.name",
    "executor.ray_address",
)
"""Config keys that may differ on ``--resume`` (they change speed or place, never results)."""

_KEY_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
#: Config keys holding filesystem paths (rebased to absolute when the config is resolved).
_PATH_KEYS = (
    ("tasks", "paths"),
    ("tasks", "datasets", "registry_path"),
    ("tasks", "datasets", "from_lock"),
    ("output_dir",),
    ("models",),
)


def save_config(config: RunConfig, path: Path, *, extra: Mapping[str, Any] | None = None) -> None:
    """Write the resolved config as ``[run]`` (plus facts such as ``[versions]``) as TOML.

    Atomically: a crash or a full disk leaves the whole file or none (never half a file
    that a ``--resume`` would refuse).
    """
    data: dict[str, Any] = {"run": config.model_dump(mode="json")}
    if extra:
        data.update(extra)
    write_bytes_atomic(path, to_toml(data).encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Resolving a config from its sources
# --------------------------------------------------------------------------------------------


def _absolute(path: str, base: Path) -> str:
    """``path`` made absolute against ``base`` (normalised, symlinks kept)."""
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _rebase_paths(data: dict[str, Any], base: Path) -> None:
    """Make the path-valued keys of ``data`` (:data:`_PATH_KEYS`) absolute against ``base``."""
    for *sections, key in _PATH_KEYS:
        node: Any = data
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        value = node.get(key)
        if isinstance(value, str):
            node[key] = _absolute(value, base)
        elif isinstance(value, list):
            node[key] = [_absolute(v, base) if isinstance(v, str) else v for v in value]


def read_config_file(path: Path, *, base: Path | None = None) -> dict[str, Any]:
    """Read a config file into a mapping (not validated yet), paths made absolute.

    Args:
        path: A TOML file holding :class:`RunConfig` keys at the top level or under
            ``[run]`` (next to which only an informational ``[versions]`` table may be).
        base: What relative paths are relative to (default: the file's directory).

    Returns:
        The config keys in sections, with relative path-valued keys resolved against
        ``base``.

    Raises:
        ConfigError: The file is missing, not TOML, or has unexpected top-level tables.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if isinstance(data.get("run"), dict):
        others = sorted(set(data) - {"run", "versions"})
        if others:
            raise ConfigError(
                f"{path}: unknown top-level key(s) {', '.join(others)} next to [run]; put "
                "config keys inside [run]"
            )
        data = data["run"]
    try:
        data = sectioned(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    _rebase_paths(data, base if base is not None else path.resolve().parent)
    return data


def file_layer(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """A config layer from a table of some other file (e.g. an experiment's ``[run]``).

    Flat 0.1 keys go to their sections and relative paths become absolute against ``base``
    (the file's directory), as for a config file.

    Raises:
        ConfigError: A flat key and its sectioned place disagree.
    """
    layer = sectioned(copy.deepcopy(dict(data)))
    _rebase_paths(layer, base)
    return layer


def parse_set(item: str) -> tuple[list[str], Any]:
    """Parse one ``--set KEY=VALUE`` item.

    The key is a dotted path (``retry.max_retries``, ``agent.kwargs.max_turns``); a flat 0.1
    key is moved to its section (``agent_cmd`` → ``agent.cmd``, ``agent`` → ``agent.name``).
    The value is parsed as a TOML value (``3``, ``true``, ``["a", "b"]``, ``"text"``) and,
    when it is not valid TOML, taken as a plain string (so ``--set agent=nop`` works).

    Args:
        item: The text after ``--set``.

    Returns:
        The key's parts (in the sections) and the value.

    Raises:
        ConfigError: No ``=``, or a malformed key.
    """
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set retry.max_retries=3")
    parts = key.split(".")
    bad = [part for part in parts if not _KEY_PART.match(part)]
    if bad:
        raise ConfigError(
            f"--set {item!r}: {key!r} is not a dotted key of names (letters, digits, '_', '-')"
        )
    try:
        value = tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw
    return new_key(parts, value), value


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``overlay`` into a copy of ``base``: tables merge key by key, the rest replaces.

    Args:
        base: The lower-precedence mapping.
        overlay: The higher-precedence mapping.

    Returns:
        A new mapping; neither input is changed.
    """
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _apply_set(data: dict[str, Any], parts: Sequence[str], value: Any, item: str) -> None:
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"--set {item!r}: {where} is a value, not a table")
        node = child
    node[parts[-1]] = value


def _describe_errors(exc: ValidationError) -> str:
    lines = []
    for item in exc.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "config"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown config key {where!r}")
        elif (item["type"] == "missing" and where in ("tasks", "tasks.paths")) or (
            where == "tasks" and NO_TASKS in item["msg"]
        ):
            lines.append(f"tasks.paths: {NO_TASKS}")
        else:
            lines.append(f"{where}: {item['msg']}")
    return "\n".join(lines)


def validate_config(data: Mapping[str, Any]) -> RunConfig:
    """Validate a merged config mapping (once).

    Raises:
        ConfigError: Every problem, one per line; unknown keys are named.
    """
    try:
        return RunConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(_describe_errors(exc)) from None


def resolve_config(
    *,
    base: Mapping[str, Any] | None = None,
    file: Path | None = None,
    options: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
    cwd: Path | None = None,
) -> RunConfig:
    """Build the run config from its layers and validate it once.

    Args:
        base: Lowest layer (e.g. a saved config, for ``--resume``); defaults apply below it.
        file: A config file (see :func:`read_config_file`).
        options: Options given on the command line (only those given; sectioned or flat).
        sets: ``--set KEY=VALUE`` items, applied in order, last.
        cwd: Directory that relative command-line paths are relative to.

    Returns:
        The validated config, with absolute ``tasks.paths``, ``models`` and ``output_dir``.

    Raises:
        ConfigError: A bad file or ``--set``, an unknown key, or an invalid value.
    """
    here = Path(cwd) if cwd is not None else Path.cwd()
    data: dict[str, Any] = copy.deepcopy(dict(base or {}))
    if file is not None:
        data = deep_merge(data, read_config_file(file))
    if options:
        data = deep_merge(data, sectioned(options))
    for item in sets:
        parts, value = parse_set(item)
        _apply_set(data, parts, value, item)
    # The default output dir is relative to where the run starts: store it absolute too.
    data.setdefault("output_dir", RunConfig.model_fields["output_dir"].default)
    _rebase_paths(data, here)
    return validate_config(data)


def load_saved_config(run_dir: Path) -> RunConfig:
    """Load a run dir's ``config.toml`` back into the config it was written from.

    Raises:
        ConfigError: No ``config.toml`` (not a run dir), or it is not a valid config.
    """
    path = Path(run_dir) / CONFIG_FILENAME
    if not path.is_file():
        raise ConfigError(
            f"{run_dir} is not a run dir: it has no {CONFIG_FILENAME} (give the directory a "
            "`harness run` created, e.g. runs/<name>)"
        )
    if not is_file_beneath(run_dir, CONFIG_FILENAME):  # a run dir is untrusted input
        raise ConfigError(
            f"{path} is a symlink; a run dir's config.toml never is (it is not followed)"
        )
    # This version saves paths absolute; a run dir written before it holds them relative
    # to where that run was started, most likely where the resume is started too.
    data = read_config_file(path, base=Path.cwd())
    try:
        return validate_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resume_config(
    run_dir: Path,
    *,
    file: Path | None = None,
    options: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
) -> RunConfig:
    """The saved config of ``run_dir``; anything given beside it must agree with it.

    A resume continues the saved config exactly: only the keys in
    :data:`RESUME_FREE_KEYS` (speed, never results) may differ.

    Args:
        run_dir: The run dir being resumed.
        file: A config file given beside ``--resume``.
        options: Command-line options given beside ``--resume``.
        sets: ``--set`` items given beside ``--resume``.

    Returns:
        The saved config with the free keys as given.

    Raises:
        ConfigError: Not a run dir, or a given value differs from the saved config (every
            differing key is named with both values).
    """
    saved = load_saved_config(run_dir)
    requested = resolve_config(
        base=saved.model_dump(mode="json"), file=file, options=options, sets=sets
    )
    refuse_changes(run_dir, saved, requested)
    return requested


def refuse_changes(run_dir: Path, saved: RunConfig, requested: RunConfig) -> None:
    """A resume continues the saved config: refuse any difference but speed.

    Raises:
        ConfigError: Every differing key, with the saved and the given value.
    """
    differences = config_diff(saved, requested)
    if differences:
        lines = [
            f"--resume {run_dir}: the options given differ from the run's saved config "
            f"({', '.join(key for key, _old, _new in differences)}); a resume continues the "
            "saved config: give only -j, the executor and display options, or start a new run"
        ]
        lines += [
            f"{key}: saved {json.dumps(old)}, given {json.dumps(new)}"
            for key, old, new in differences
        ]
        raise ConfigError("\n".join(lines))


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_diff(
    saved: RunConfig, requested: RunConfig, *, ignore: Iterable[str] = RESUME_FREE_KEYS
) -> list[tuple[str, Any, Any]]:
    """The keys whose values differ between two configs.

    Args:
        saved: The config a run was started with.
        requested: The config asked for now.
        ignore: Dotted keys allowed to differ.

    Returns:
        ``(dotted key, saved value, requested value)`` for every difference, sorted by key.
    """
    skip = set(ignore)
    left = _flatten(saved.model_dump(mode="json"))
    right = _flatten(requested.model_dump(mode="json"))
    return [
        (key, left.get(key), right.get(key))
        for key in sorted(set(left) | set(right))
        if key not in skip and left.get(key) != right.get(key)
    ]


def secret_keys(config: RunConfig, secrets: Iterable[str]) -> list[str]:
    """Dotted keys of ``config`` whose value contains one of ``secrets``.

    Args:
        config: The resolved config.
        secrets: Secret values the harness knows of (e.g. provider keys it took from the
            environment).

    Returns:
        The offending keys (never the values), sorted.
    """
    values = [s for s in secrets if s and len(s) >= 8]
    if not values:
        return []
    found = []
    for key, value in _flatten(config.model_dump(mode="json")).items():
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(t, str) and any(s in t for s in values) for t in texts):
            found.append(key)
    return sorted(found)


__all__ = [
    "CONFIG_FILENAME",
    "RESUME_FREE_KEYS",
    "config_diff",
    "deep_merge",
    "file_layer",
    "load_saved_config",
    "parse_set",
    "read_config_file",
    "refuse_changes",
    "resolve_config",
    "resume_config",
    "save_config",
    "secret_keys",
    "validate_config",
]

"""Prompt and docs overlays: a variant's copy of its task set, changed as declared.

The task paths of the variant are copied into the experiment dir (``overlays/<variant>/``,
each under its own name, so task keys and the task-set name stay the same); then every
task's ``instruction.md`` gets the prepended and appended text and its ``workspace/`` the
overlay dir's files. A task set's ``models.toml`` is copied with its faux scripts' paths
made absolute (they are relative to the original); it stays a task-set catalog, so it may
still declare faux models only.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

from harness.config import RunConfig, to_toml
from harness.errors import ConfigError
from harness.experiments.design import Overlay
from harness.models.catalog import CATALOG_FILENAME
from harness.tasks import INSTRUCTION_MD, discover

__all__ = ["apply_overlay"]

_WORKSPACE = "workspace"


def _change_task(task_dir: Path, overlay: Overlay, workspace: Path | None) -> None:
    instruction = task_dir / INSTRUCTION_MD
    text = instruction.read_text(encoding="utf-8")
    if overlay.instruction_prepend:
        text = f"{overlay.instruction_prepend.rstrip()}\n\n{text}"
    if overlay.instruction_append:
        text = f"{text.rstrip()}\n\n{overlay.instruction_append.rstrip()}\n"
    instruction.write_text(text, encoding="utf-8")
    if workspace is not None:
        shutil.copytree(workspace, task_dir / _WORKSPACE, symlinks=False, dirs_exist_ok=True)


def _copy_catalog(source: Path, copy: Path) -> None:
    """The task set's ``models.toml`` beside its copy, scripts pointing at the originals.

    Raises:
        ConfigError: The catalog is not valid TOML.
    """
    catalog = source / CATALOG_FILENAME
    if not catalog.is_file():
        return
    try:
        data: dict[str, Any] = tomllib.loads(catalog.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{catalog}: not valid TOML: {exc}") from None
    for entry in (data.get("models") or {}).values():
        if isinstance(entry, dict) and isinstance(entry.get("script"), str):
            entry["script"] = str((source / entry["script"]).resolve())
    (copy / CATALOG_FILENAME).write_text(to_toml(data), encoding="utf-8")


def apply_overlay(config: RunConfig, overlay: Overlay, target: Path, base: Path) -> RunConfig:
    """Copy the config's task paths under ``target``, apply ``overlay``, point the config there.

    Args:
        config: The variant's run config.
        overlay: Its overlay.
        target: Where the copies go (``<experiment>/overlays/<variant>``).
        base: What the overlay's ``workspace`` is relative to (the experiment file's dir).

    Raises:
        ConfigError: The overlay's workspace dir does not exist.
    """
    workspace = None
    if overlay.workspace is not None:
        workspace = (base / overlay.workspace).resolve()
        if not workspace.is_dir():
            raise ConfigError(
                f"overlay.workspace {overlay.workspace}: not a directory under {base}"
            )
    paths = []
    for index, given in enumerate(Path(p) for p in config.tasks.paths):
        copy = target / str(index) / given.name
        shutil.copytree(given, copy, symlinks=True)
        _copy_catalog(given, copy)
        paths.append(str(copy))
        for task_dir in discover([copy]):
            _change_task(task_dir, overlay, workspace)
    tasks = config.tasks.model_copy(update={"paths": paths})
    return config.model_copy(update={"tasks": tasks})

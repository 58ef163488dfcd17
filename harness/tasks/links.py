"""Symlinks in a task dir: which ones the harness refuses.

A task dir is read and copied by the harness as root (its ``workspace/`` seeded, its
``tests/`` and ``solution/`` put into sandboxes, its instruction and rubric read), so a
symlink in it must not hand a host file to the agent or the judge model. Refused, with the
entry named:

- a symlink whose target leaves the task dir (at any depth, resolved as the kernel would);
- the entries the harness itself reads or copies being symlinks at all (``instruction.md``,
  ``workspace``, ``tests``, ``solution``, ``judge``, ``user``, ``steps`` and each step's own),
  since they are opened without following a link.

A symlink inside a task dir that stays inside it is kept (copied as a symlink, hashed by
its target).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import TaskError
from sandbox.beneath import walk_beneath

__all__ = ["READ_ENTRIES", "link_problems"]

#: Entries of a task dir (and of each ``steps/<name>/``) opened without following a link.
READ_ENTRIES = (
    "task.toml",
    "instruction.md",
    "workspace",
    "tests",
    "solution",
    "judge",
    "judge/rubric.md",
    "user",
    "user/goal.md",
    "steps",
    "workdir",
    "environment",
)


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip("/") + "/")


def link_problems(task_dir: Path) -> list[TaskError]:
    """Every symlink of ``task_dir`` the harness refuses (see the module doc)."""
    problems: list[TaskError] = []
    root = os.path.realpath(task_dir)
    steps = [""]
    try:
        entries = list(walk_beneath(task_dir))
    except OSError as exc:
        return [TaskError(task_dir, f"cannot read the task dir: {exc.strerror or exc}")]
    for entry in entries:
        parts = entry.rel.split("/")
        if len(parts) == 2 and parts[0] == "steps" and stat.S_ISDIR(entry.info.st_mode):
            steps.append(f"{entry.rel}/")
    named = {f"{step}{name}" for step in steps for name in READ_ENTRIES}
    named |= {
        f"steps/{entry.rel.split('/')[1]}"
        for entry in entries
        if entry.rel.startswith("steps/") and entry.rel.count("/") == 1
    }
    for entry in entries:
        if not stat.S_ISLNK(entry.info.st_mode):
            continue
        path = Path(task_dir) / entry.rel
        if entry.rel in named:
            problems.append(
                TaskError(
                    path,
                    "is a symlink; the harness reads it without following links: make it a "
                    "regular file or directory of the task",
                )
            )
            continue
        if not _inside(os.path.realpath(path), root):
            problems.append(
                TaskError(
                    path,
                    f"symlink to {os.readlink(path)!r} leaves the task dir (it would hand a "
                    "host file to the trial); copy the file into the task instead",
                )
            )
    return problems

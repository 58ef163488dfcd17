"""Where a task's files are: the names of Harbor's layout, and its optional parts.

Defined once here for the loader, the task and its steps (docs/tasks.md has the layout).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "INSTRUCTION_MD",
    "SOLVE_SCRIPT",
    "STEPS_DIR",
    "TASK_TOML",
    "TEST_SCRIPT",
    "dir_or_none",
    "file_or_none",
]

TASK_TOML = "task.toml"
"""The config file that makes a directory a task dir."""
INSTRUCTION_MD = "instruction.md"
"""The prompt given to the agent."""
TEST_SCRIPT = "tests/test.sh"
"""The verifier, relative to the task dir."""
SOLVE_SCRIPT = "solution/solve.sh"
"""The reference solution, relative to the task dir."""
STEPS_DIR = "steps"
"""Where a multi-step task's steps live (``steps/<name>/``), relative to the task dir."""


def dir_or_none(path: Path) -> Path | None:
    """``path`` when it is a directory (an optional part of a task), else None."""
    return path if path.is_dir() else None


def file_or_none(path: Path) -> Path | None:
    """``path`` when it is a regular file (an optional part of a task), else None."""
    return path if path.is_file() else None

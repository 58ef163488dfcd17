"""How much of a task's own text files the harness reads, and reading them within that.

A task dir is untrusted input as much as its task set is: an ``instruction.md`` (or a
rubric, a simulated user's goal, a step's instruction) of 100 MB must not cost the harness
100 MB of memory before anything is refused. :func:`read_task_text` reads in bounded chunks
beneath the task dir, never following a link at any component, and refuses a file past its
cap with a message naming the file and the cap.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import TaskError
from sandbox.beneath import read_beneath

__all__ = [
    "MAX_INSTRUCTION_BYTES",
    "MAX_TASK_TEXT_BYTES",
    "read_task_bytes",
    "read_task_text",
]

MAX_INSTRUCTION_BYTES = 4 << 20
"""The largest ``instruction.md`` (of a task or a step) accepted: 4 MiB."""

MAX_TASK_TEXT_BYTES = 1 << 20
"""The largest rubric or goal file accepted: 1 MiB."""


def read_task_text(task_dir: Path, rel: str, cap: int) -> str | None:
    """A text file of a task, read beneath ``task_dir`` (None: missing).

    Bad UTF-8 is replaced; see :func:`read_task_bytes` for what is refused.
    """
    raw = read_task_bytes(task_dir, rel, cap)
    return None if raw is None else raw.decode("utf-8", errors="replace")


def read_task_bytes(task_dir: Path, rel: str, cap: int) -> bytes | None:
    """A file of a task, read beneath ``task_dir`` in bounded chunks (None: missing).

    Args:
        task_dir: The task dir (opened as given).
        rel: The file's path relative to it (``instruction.md``, ``judge/rubric.md``...).
        cap: The most bytes accepted.

    Raises:
        TaskError: The file is a symlink (or reached through one), not a regular
            file, or larger than ``cap``.
    """
    path = Path(task_dir) / rel
    if not path.parent.exists() and not path.parent.is_symlink():
        return None
    read = read_beneath(task_dir, rel, cap + 1)
    if read is None:
        if not path.exists() and not path.is_symlink():
            return None
        raise TaskError(
            path,
            "not a regular file of the task dir (a symlink, or one under a symlink, is never "
            "followed); make it a regular file",
        )
    if read.size > cap or len(read.data) > cap:
        raise TaskError(
            path,
            f"{read.size} bytes is more than the {cap} bytes ({cap >> 10} KiB) this task file "
            "may hold; shorten it",
        )
    return read.data

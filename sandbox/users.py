"""Who a process or a task's user is: root or not (both backends and the harness ask)."""

from __future__ import annotations

import os


def is_root() -> bool:
    """Whether this process can drop privileges (effective uid 0)."""
    return os.geteuid() == 0


def is_root_user(user: str | int | None) -> bool:
    """Whether a task's ``user`` value names root."""
    return user is not None and str(user).split(":")[0] in ("root", "0")


__all__ = ["is_root", "is_root_user"]

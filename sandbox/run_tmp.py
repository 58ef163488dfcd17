"""A run's private temp dir: where its trial roots and trial filesystems live.

``$TMPDIR/harness-run-<run name>/``, one per run, so whatever a killed invocation left there
(trial roots, mounted trial filesystems) is found and removed by the next one.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from sandbox.errors import UsageError
from sandbox.removal import remove_tree
from sandbox.storage import release_leftovers

RUN_TMP_PREFIX = "harness-run-"
"""A run's temp dir is ``$TMPDIR/harness-run-<run name>/``."""
NODE_DIR_PREFIX = "harness-ray-"
"""A run's dir on a Ray node: ``$TMPDIR/harness-ray-<run name>/`` (tasks, trial scratch)."""


def run_tmp_dir(run_name: str) -> Path:
    """The private temp dir of the run ``run_name``."""
    return Path(tempfile.gettempdir()) / f"{RUN_TMP_PREFIX}{run_name}"


def ensure_private_dir(path: Path) -> bool:
    """Create ``path`` (mode 0711) unless it is already this user's private dir.

    Returns:
        True when it was created, False when it existed (its content is left as it is).

    Raises:
        UsageError: The path exists but is not a private dir of this user (someone else
            made it: never used, never followed).
    """
    try:
        os.mkdir(path, 0o711)
        os.chmod(path, 0o711)
        return True
    except FileExistsError:
        pass
    info = os.lstat(path)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise UsageError(
            f"{path} exists but is not a private directory of this user; remove it (it is "
            "where this run's trial roots go)"
        )
    return False


def fresh_private_dir(path: Path) -> list[str]:
    """Create ``path`` (mode 0711), or empty it if it is already this user's private dir.

    Trial filesystems a dead run left mounted there are unmounted first.

    Returns:
        The names of the leftovers removed.

    Raises:
        UsageError: The path exists but is not a private dir of this user.
    """
    if ensure_private_dir(path):
        return []
    release_leftovers(path)
    removed = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        remove_tree(Path(entry.path))
        removed.append(entry.name)
    os.chmod(path, 0o711)
    return removed


def remove_private_dir(path: Path) -> list[str]:
    """Remove the run's temp dir (unmounting what is mounted in it first).

    Returns:
        The names of what was left in it (leaked trial roots).
    """
    if not path.exists():
        return []
    left = [entry.name for entry in os.scandir(path)]
    release_leftovers(path)
    remove_tree(path)
    return left


__all__ = [
    "NODE_DIR_PREFIX",
    "RUN_TMP_PREFIX",
    "ensure_private_dir",
    "fresh_private_dir",
    "remove_private_dir",
    "remove_tree",
    "run_tmp_dir",
]

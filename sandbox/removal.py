"""Removing a tree a sandbox (or a killed run) left behind: the one ``remove_tree``."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any


def remove_tree(path: Path) -> None:
    """Remove a tree (or a file) without following symlinks, even where parts are read-only.

    An agent may chmod its dirs 000 or make its files read-only: each failed removal makes the
    failed entry and its parent dir the owner's again, then retries. Only entries of the tree
    are ever changed, never what holds it: a top that cannot go (a mount point still busy, a
    dir still being written) must not make ``/tmp`` or a run's output dir root's alone. A
    symlink is removed itself, never followed; an absent path is left alone.

    Args:
        path: The dir, file or symlink to remove.

    Raises:
        OSError: An entry could not be removed even after its permissions were restored.
    """
    top = os.path.abspath(path)

    def fix_and_retry(func: Any, failed: str, _exc: Any) -> None:
        for target in (os.path.dirname(failed), failed):
            inside = os.path.commonpath([top, os.path.abspath(target)]) == top
            try:
                if inside and not os.path.islink(target):
                    os.chmod(target, stat.S_IRWXU)
            except OSError:
                pass
        try:
            func(failed)
        except FileNotFoundError:
            pass

    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, onerror=fix_and_retry)


__all__ = ["remove_tree"]

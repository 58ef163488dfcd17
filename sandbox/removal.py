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
    failed entry and its parent dir the owner's again, then retries. A symlink is removed
    itself, never followed; an absent path is left alone.

    Args:
        path: The dir, file or symlink to remove.

    Raises:
        OSError: An entry could not be removed even after its permissions were restored.
    """

    def fix_and_retry(func: Any, failed: str, _exc: Any) -> None:
        for target in (os.path.dirname(failed), failed):
            try:
                if not os.path.islink(target):
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

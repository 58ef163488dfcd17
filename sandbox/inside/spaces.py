"""Emptying what an agent left in a dir, whatever its depth, without following a link.

Stdlib-only (Python >= 3.9), run by the supervisor (root) when no process of the agent is
alive. A root agent writes every root-only space of its container (``/trial``, ``/logs``,
``/tests``): the supervisor empties them before the harness writes there again, so what the
agent left can neither fill them (``ENOSPC`` in a grading step) nor break their emptying.
``shutil.rmtree`` recurses once per level (a tree 1,200 deep raises ``RecursionError``) and
walks by path (a deep one ends in ``ENAMETOOLONG``): :func:`remove_entry` descends by
directory fd and climbs back through ``..``, holding two fds and a list of names.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Dict, List, Optional

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _first_subdir_emptying(fd: int) -> Optional[str]:
    """Unlink the non-dir entries of the dir ``fd`` until a subdir is met; its name.

    None once a whole pass met nothing left (a pass that unlinked is repeated: a listing
    changed under it may have skipped an entry).
    """
    while True:
        unlinked = False
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    return entry.name
                try:
                    os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                unlinked = True
        if not unlinked:
            return None


def remove_entry(parent_fd: int, name: str) -> None:
    """Remove ``name`` in the dir ``parent_fd``: a file, a link, or a whole tree.

    Iterative, by dir fd: any depth and any path length. A mount point inside the tree
    fails with ``EBUSY`` (the caller keeps its own mount points out).
    """
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    names: List[str] = []  # the path from ``name`` down to the dir ``fd`` is open on
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        while True:
            sub = _first_subdir_emptying(fd)
            if sub is not None:
                child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            # This dir is empty: climb to its parent (no process moves things now).
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _trim(parent_fd: int, name: str, max_bytes: int) -> None:
    """Cut the regular file ``name`` to ``max_bytes``; anything else there is removed."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        remove_entry(parent_fd, name)
        return
    if st.st_size <= max_bytes:
        return
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        os.ftruncate(fd, max_bytes)
    finally:
        os.close(fd)


def clear_dir(path: str, keep: List[str], trim: Dict[str, int]) -> int:
    """Remove every entry of the dir ``path`` but those named in ``keep`` or ``trim``.

    ``keep`` names are left as they are (the caller's mount points); each ``trim`` name,
    a file the harness writes, is cut to its size (what a writer capped at that size
    wrote is all kept) or removed when it is not a regular file.

    Returns:
        How many entries were removed.
    """
    fd = os.open(path, _DIR_FLAGS)
    removed = 0
    try:
        for name in os.listdir(fd):
            if name in keep:
                continue
            if name in trim:
                _trim(fd, name, int(trim[name]))
                continue
            remove_entry(fd, name)
            removed += 1
    finally:
        os.close(fd)
    return removed


def op_clear_dir(req: Dict[str, Any]) -> Dict[str, Any]:
    """The supervisor op: :func:`clear_dir` on ``path`` with ``keep`` and ``trim``."""
    keep = [str(name) for name in req.get("keep") or []]
    trim = {str(name): int(size) for name, size in (req.get("trim") or {}).items()}
    return {"removed": clear_dir(str(req["path"]), keep, trim)}

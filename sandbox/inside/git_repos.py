"""The git repositories under the agent's workspace, for the verifier's ``safe.directory``.

The workspace belongs to the agent's uid and the verifier is another user, so ``git``
refuses its repositories ("detected dubious ownership") unless HOME's ``.gitconfig`` names
them. ``<workspace>/*`` names every repo below it only for git 2.46 and later; older git
(Ubuntu 24.04 has 2.43, Debian 12 2.39) compares each entry with the repository's path
exactly. So the supervisor lists the repositories themselves, found by a walk that:

- starts at the workspace (its real path) and opens each dir ``O_NOFOLLOW`` relative to
  its parent's fd: a symlink is never followed, and a dir swapped for one mid-walk is not
  entered;
- sees a repository where a dir holds ``.git`` (a dir or a gitfile, not a link), or is a
  bare one (``HEAD``, ``objects/`` and ``refs/``), and does not enter ``.git`` dirs;
- goes breadth first and stops at :data:`MAX_DEPTH` levels, :data:`MAX_ENTRIES` entries
  read and :data:`MAX_REPOS` repositories (``truncated``): a repo beyond them stays
  untrusted, and a shallow one is found before a large tree beside it uses the budget.

The dir names are the agent's: an entry becomes a quoted ``.gitconfig`` value
(:func:`config_value`), and a path git could not be given safely (a control character,
bytes that are not UTF-8) is skipped, never written, so a name cannot add a line of config
(``core.fsmonitor``) to the verifier's git.

Stdlib-only, Python >= 3.9 (it runs in the supervisor).
"""

from __future__ import annotations

import os
import stat
from collections import deque
from typing import Deque, List, Optional, Set, Tuple

MAX_DEPTH = 6
MAX_ENTRIES = 100_000
MAX_REPOS = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def config_value(path: str) -> Optional[str]:
    """``path`` as a quoted git config value, or None if it cannot be one safely."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        return None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes of a non-UTF-8 name
        return None
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _open_below(top_fd: int, parts: List[str]) -> Optional[int]:
    """The dir ``top/parts...``, each step ``O_NOFOLLOW`` from its parent's fd (or None)."""
    fd = os.dup(top_fd)
    for name in parts:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:  # swapped for a link, removed, unreadable: not entered
            os.close(fd)
            return None
        os.close(fd)
        fd = sub
    return fd


def _list(fd: int, budget: int) -> Tuple[List[str], Set[str], int]:
    """Subdir names (``.git`` aside), the names seen (dirs with a ``/``), entries read."""
    subdirs: List[str] = []
    names: Set[str] = set()
    read = 0
    try:
        with os.scandir(fd) as it:
            for entry in it:
                read += 1
                if read > budget:
                    break
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    names.add(entry.name + "/")
                    if entry.name != ".git":
                        subdirs.append(entry.name)
                elif stat.S_ISREG(mode):
                    names.add(entry.name)
    except OSError:  # unreadable: its repositories stay untrusted, the seeding goes on
        pass
    return sorted(subdirs), names, read


def find(root: str) -> Tuple[List[str], bool]:
    """The repositories at and under ``root`` (real paths) and whether a bound was met.

    Breadth first, so the shallow repositories are found before a bound is met in a
    large tree (a ``node_modules`` beside the repository).
    """
    top = os.path.realpath(root)
    try:
        top_fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return [], False
    repos: List[str] = []
    entries = 0
    truncated = False
    queue: Deque[List[str]] = deque([[]])
    try:
        while queue:
            parts = queue.popleft()
            fd = _open_below(top_fd, parts)
            if fd is None:
                continue
            try:
                subdirs, names, read = _list(fd, MAX_ENTRIES - entries)
            finally:
                os.close(fd)
            entries += read
            path = "/".join([top.rstrip("/")] + parts) if parts else top
            if ".git/" in names or ".git" in names:
                repos.append(path)
            elif {"HEAD", "objects/", "refs/"} <= names:
                repos.append(path)
                continue  # a bare repository: its dirs are git's
            if entries >= MAX_ENTRIES or len(repos) >= MAX_REPOS:
                truncated = True
                break
            if len(parts) >= MAX_DEPTH:
                truncated = truncated or bool(subdirs)
                continue
            queue.extend(parts + [name] for name in subdirs)
    finally:
        os.close(top_fd)
    return repos[:MAX_REPOS], truncated

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
- stops at :data:`MAX_DEPTH` levels, :data:`MAX_ENTRIES` entries read and
  :data:`MAX_REPOS` repositories (``truncated``): a repo beyond them stays untrusted.

The dir names are the agent's: an entry becomes a quoted ``.gitconfig`` value
(:func:`config_value`), and a path git could not be given safely (a control character,
bytes that are not UTF-8) is skipped, never written, so a name cannot add a line of config
(``core.fsmonitor``) to the verifier's git.

Stdlib-only, Python >= 3.9 (it runs in the supervisor).
"""

from __future__ import annotations

import os
import stat
from typing import List, Optional, Tuple

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


class _Walk:
    def __init__(self) -> None:
        self.repos: List[str] = []
        self.entries = 0
        self.truncated = False

    def full(self) -> bool:
        if self.entries >= MAX_ENTRIES or len(self.repos) >= MAX_REPOS:
            self.truncated = True
        return self.truncated

    def visit(self, fd: int, path: str, depth: int) -> None:
        subdirs: List[str] = []
        names = set()
        with os.scandir(fd) as it:
            for entry in it:
                self.entries += 1
                if self.full():
                    return
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
        if ".git/" in names or ".git" in names:
            self.repos.append(path)
        elif {"HEAD", "objects/", "refs/"} <= names:
            self.repos.append(path)
            return  # a bare repository: its dirs are git's
        if depth >= MAX_DEPTH:
            if subdirs:
                self.truncated = True
            return
        for name in sorted(subdirs):
            if self.full():
                return
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:  # swapped for a link, removed, unreadable: not entered
                continue
            try:
                self.visit(sub, path.rstrip("/") + "/" + name, depth + 1)
            finally:
                os.close(sub)


def find(root: str) -> Tuple[List[str], bool]:
    """The repositories at and under ``root`` (real paths) and whether a bound was met."""
    walk = _Walk()
    top = os.path.realpath(root)
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return [], False
    try:
        walk.visit(fd, top, 0)
    finally:
        os.close(fd)
    return walk.repos, walk.truncated

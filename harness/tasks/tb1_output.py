"""The converted task dir ``harness tasks migrate`` writes: only its own, never through a link.

:class:`NewTree` is rooted at a dir the migration created itself (a private dir beside the
destination, renamed into place once the task is whole). Every write opens its parent by
directory fd beneath that root (``sandbox/beneath.py``: no symlink followed at any
component) and creates the file with ``O_CREAT | O_EXCL | O_NOFOLLOW``; a file the
conversion replaces (a Dockerfile it appends to, a task's own ``tests/test.sh``) is
unlinked first, never opened for writing in place. Copies read their source (the
migration's private snapshot of the TB1 task) beneath its root the same way.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.tasks.tb1_source import MigrationError, write_all
from sandbox.beneath import lstat_beneath, open_beneath, relative_parts, walk_beneath

__all__ = ["NewTree"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 16


class NewTree:
    """A dir tree this process created and alone writes (see the module doc).

    Attributes:
        root: Its top dir.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        """``rel``'s path (for messages and for reading back what was written)."""
        return self.root / rel

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists (reached without a link)."""
        return lstat_beneath(self.root, rel) is not None

    def mkdir(self, rel: str) -> None:
        """Make ``rel`` and its missing parents (an existing dir is kept)."""
        fd = os.open(self.root, _DIR)
        try:
            for part in relative_parts(rel):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = os.open(part, _DIR, dir_fd=fd)  # a non-dir or a link: refused here
                os.close(fd)
                fd = nxt
        finally:
            os.close(fd)

    def _create(self, rel: str) -> tuple[int, int]:
        """``(parent dir fd, new file fd)`` of ``rel``, a file replacing any file there."""
        parts = relative_parts(rel)
        if not parts:
            raise MigrationError(f"{self.root}: not a file path")
        self.mkdir("/".join(parts[:-1]))
        parent = open_beneath(self.root, "/".join(parts[:-1]) or ".", _DIR)
        name = parts[-1]
        try:
            try:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISDIR(info.st_mode):
                    raise MigrationError(
                        f"{self.root / rel}: a directory where the converted task needs a file"
                    )
                os.unlink(name, dir_fd=parent)
            return parent, os.open(name, _NEW_FILE, 0o600, dir_fd=parent)
        except BaseException:
            os.close(parent)
            raise

    def write(self, rel: str, data: str | bytes, mode: int = 0o644) -> None:
        """Write ``rel`` anew with ``data`` (text as UTF-8) and ``mode``."""
        raw = data.encode() if isinstance(data, str) else data
        parent, fd = self._create(rel)
        try:
            write_all(fd, raw)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
            os.close(parent)

    def copy_file(self, src_root: Path, src_rel: str, rel: str, mode: int | None = None) -> None:
        """Copy the regular file ``src_root/src_rel`` (no link followed) to ``rel``.

        Its mode is ``mode``, else ``0755`` or ``0644`` as the source is executable or not.
        """
        src = open_beneath(src_root, src_rel)
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):
                raise MigrationError(f"{src_root / src_rel}: not a regular file")
            parent, fd = self._create(rel)
            try:
                while chunk := os.read(src, _CHUNK):
                    write_all(fd, chunk)
                if mode is None:
                    mode = 0o755 if info.st_mode & 0o111 else 0o644
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
                os.close(parent)
        finally:
            os.close(src)

    def copy_tree(self, src_root: Path, src_rel: str, rel: str) -> None:
        """Copy the dir ``src_root/src_rel`` into ``rel`` (merged; files replaced)."""
        self.mkdir(rel)
        for entry in walk_beneath(src_root, src_rel):
            if stat.S_ISDIR(entry.info.st_mode):
                self.mkdir(f"{rel}/{entry.rel}")
            elif stat.S_ISREG(entry.info.st_mode):
                self.copy_file(src_root, f"{src_rel}/{entry.rel}", f"{rel}/{entry.rel}")
            else:
                raise MigrationError(f"{src_root / src_rel / entry.rel}: not a regular file")

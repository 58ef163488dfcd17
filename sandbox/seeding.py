"""Seeding a trial workspace with fixture files, never escaping it."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from sandbox.beneath import copy_file_beneath, lstat_beneath, read_beneath, walk_beneath
from sandbox.errors import SeedingError


def check_fixture_path(name: str) -> PurePosixPath:
    """Validate a workspace-relative fixture path.

    Raises:
        SeedingError: for an empty, absolute or escaping path.
    """
    if not name or not name.strip() or "\0" in name:
        raise SeedingError(f"Invalid workspace fixture path: {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("~"):
        raise SeedingError(f"Invalid workspace fixture path: {name}")
    if ".." in path.parts:
        raise SeedingError(f"Workspace fixture escapes the workspace: {name}")
    if not path.parts or path.name in ("", "."):
        raise SeedingError(f"Invalid workspace fixture path: {name}")
    return path


def _open_parent(workspace_fd: int, parts: tuple[str, ...]) -> int:
    """Walk to a fixture's parent dir with O_NOFOLLOW at each step, creating dirs."""
    fd = os.dup(workspace_fd)
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise SeedingError(
                    f"Workspace fixture escapes the workspace through a symlink: {part}"
                ) from exc
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_fixture(workspace: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write one fixture file under ``workspace`` without following any symlink."""
    path = check_fixture_path(name)
    ws_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        parent = _open_parent(ws_fd, path.parts[:-1])
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            try:
                fd = os.open(path.name, flags, mode, dir_fd=parent)
            except OSError as exc:
                raise SeedingError(
                    f"Workspace fixture escapes the workspace through a symlink: {name}"
                ) from exc
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        finally:
            os.close(parent)
    finally:
        os.close(ws_fd)


#: A fixture's content, optionally with its file mode (executable scripts keep their bit).
Fixture = bytes | tuple[bytes, int]


def seed_workspace(workspace: Path, files: Mapping[str, Fixture]) -> None:
    """Write every fixture; all paths are validated before anything is written."""
    for name in files:
        check_fixture_path(name)
    for name, fixture in files.items():
        data, mode = fixture if isinstance(fixture, tuple) else (fixture, 0o644)
        write_fixture(workspace, name, data, mode)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Hand a tree to ``uid:gid`` without following a symlink (none is entered or changed)."""
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def collect_fixture_dir(source: Path, *, max_bytes: int = 256 << 20) -> dict[str, Fixture]:
    """Read a task's ``workspace/`` dir as fixtures: regular files only, no symlinks.

    The dir is walked by directory fd, ``O_NOFOLLOW`` at every component
    (:mod:`sandbox.beneath`): ``source`` itself must be a real directory (its parent, the
    task dir, is opened as given) and nothing below it is reached through a link.

    Raises:
        SeedingError: for a symlink (``source`` itself included) or special file in the
            fixture dir, or if the fixtures exceed ``max_bytes`` in total.
    """
    parent, name = source.parent, source.name
    info = lstat_beneath(parent, name)
    if info is None or not stat.S_ISDIR(info.st_mode):
        kind = "a symlink" if info is not None and stat.S_ISLNK(info.st_mode) else "not a dir"
        raise SeedingError(f"Workspace fixture dir is {kind}: {source}")
    files: dict[str, Fixture] = {}
    total = 0
    for entry in walk_beneath(parent, name):
        full = os.path.join(source, entry.rel)
        mode = entry.info.st_mode
        if stat.S_ISDIR(mode):
            continue
        if stat.S_ISLNK(mode):
            raise SeedingError(f"Workspace fixture is a symlink: {full}")
        if not stat.S_ISREG(mode):
            raise SeedingError(f"Workspace fixture is not a regular file: {full}")
        total += entry.info.st_size
        if total > max_bytes:
            raise SeedingError(f"Workspace fixtures exceed {max_bytes} bytes in {source}")
        read = read_beneath(parent, f"{name}/{entry.rel}", entry.info.st_size + 1)
        if read is None or len(read.data) != entry.info.st_size:
            raise SeedingError(f"Workspace fixture changed while read: {full}")
        files[entry.rel] = (read.data, 0o755 if mode & 0o111 else 0o644)
    return files


def copy_tree_nofollow(source: Path, target: Path) -> None:
    """Copy the tree ``source`` to the new dir ``target`` without following any link.

    ``source`` itself is opened beneath its parent (it must be a real dir), every entry
    below by dir fd with ``O_NOFOLLOW`` (:mod:`sandbox.beneath`): dirs and regular files
    are copied, a symlink is copied as a symlink (its target is never read), other
    entries are left out. What a task's ``tests/`` or ``solution/`` holds is copied this
    way into a trial.

    Raises:
        SeedingError: ``source`` is a symlink or not a directory.
        OSError: A copy failed.
    """
    parent, name = source.parent, source.name
    info = lstat_beneath(parent, name)
    if info is None or not stat.S_ISDIR(info.st_mode):
        raise SeedingError(f"not a directory of its own (a symlink is never followed): {source}")
    os.mkdir(target, 0o755)
    for entry in walk_beneath(parent, name):
        dest = target / entry.rel
        mode = entry.info.st_mode
        if stat.S_ISDIR(mode):
            os.mkdir(dest, 0o755)
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(source / entry.rel), dest)
        elif stat.S_ISREG(mode):
            if copy_file_beneath(parent, f"{name}/{entry.rel}", dest) is None:
                raise SeedingError(f"changed while copied: {source / entry.rel}")
            os.chmod(dest, stat.S_IMODE(mode) & 0o755)

"""Seeding a trial workspace with fixture files, never escaping it."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

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

    Raises:
        SeedingError: for a symlink or special file in the fixture dir, or if the
            fixtures exceed ``max_bytes`` in total.
    """
    files: dict[str, Fixture] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        for name in list(dirnames):
            if os.path.islink(os.path.join(dirpath, name)):
                raise SeedingError(f"Workspace fixture is a symlink: {os.path.join(dirpath, name)}")
        for name in filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode):
                raise SeedingError(f"Workspace fixture is not a regular file: {full}")
            total += st.st_size
            if total > max_bytes:
                raise SeedingError(f"Workspace fixtures exceed {max_bytes} bytes in {source}")
            rel = os.path.relpath(full, source).replace(os.sep, "/")
            with open(full, "rb") as fh:
                files[rel] = (fh.read(), 0o755 if st.st_mode & 0o111 else 0o644)
    return files

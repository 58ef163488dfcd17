"""Hub task packages: a ``tar.gz`` archive unpacked safely and checked against its digest.

A package comes from the Hub and is hostile until checked. :func:`unpack` reads the
archive as a stream, member by member, and writes it through directory fds into a fresh
private dir: a member whose name is absolute, holds ``..``, a NUL or an empty part, a
symlink, a hard link, a device, a FIFO, a name given twice, more than :data:`MAX_MEMBERS`
members, a path deeper than :data:`MAX_DEPTH`, a file larger than :data:`MAX_FILE_BYTES`
or a total past :data:`MAX_TOTAL_BYTES` refuses the whole archive (checked on each header,
before its data is read, and again on the bytes written). Nothing is followed: every
directory is opened ``O_NOFOLLOW`` from its parent's fd and every file is created
``O_EXCL``.

:func:`package_digest` is Harbor's package digest: SHA-256 over one record
``PATH NUL SHA256(FILE) LF`` per file, in order of path, for ``task.toml``,
``instruction.md``, ``README.md``, ``trajectory.json`` and every file under
``environment/``, ``tests/``, ``solution/`` and ``steps/`` (``__pycache__``, ``*.pyc``,
``.DS_Store``, editor swap and backup files left out). A member the digest does not cover
is not written at all, so the task dir on disk is exactly what the digest pins.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from harness.errors import HarnessError
from harness.records.layout import TRAJECTORY_FILENAME

#: Caps on one archive (its members, its bytes, its depth).
MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 4 << 30
MAX_FILE_BYTES = 2 << 30
MAX_DEPTH = 64
_SINGLE_FILES = ("task.toml", "instruction.md", "README.md", TRAJECTORY_FILENAME)
_DIRECTORIES = ("environment", "tests", "solution", "steps")
_IGNORED = ("__pycache__", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class PackageError(HarnessError, ValueError):
    """An archive refused: the message names the member and why."""


def covered(rel: str) -> bool:
    """Whether Harbor's package digest covers the file at ``rel`` (a clean relative path)."""
    parts = rel.split("/")
    if any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in _IGNORED):
        return False
    if len(parts) == 1:
        return parts[0] in _SINGLE_FILES
    return parts[0] in _DIRECTORIES


def package_digest(top: Path) -> str:
    """``sha256:<hex>``: Harbor's digest of the task dir ``top`` (see the module docstring).

    Raises:
        PackageError: ``top`` holds a symlink or a special file among the covered paths.
    """
    outer = hashlib.sha256()
    for rel, full in _files(top):
        inner = hashlib.sha256()
        with open(full, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                inner.update(chunk)
        outer.update(f"{rel}\0{inner.hexdigest()}\n".encode())
    return "sha256:" + outer.hexdigest()


def _files(top: Path) -> Iterator[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel_dir = os.path.relpath(dirpath, top)
        for name in [*filenames, *(d for d in dirnames if os.path.islink(f"{dirpath}/{d}"))]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if not covered(rel):
                continue
            full = os.path.join(dirpath, name)
            if not stat.S_ISREG(os.lstat(full).st_mode):
                raise PackageError(f"{rel!r} is not a regular file")
            found.append((rel, full))
    yield from sorted(found)


def _member_parts(name: str) -> tuple[str, ...]:
    """A member's name as clean parts; ``()`` for the archive's root (``.`` or ``./``)."""
    if "\0" in name or name.startswith("/") or "\\" in name:
        raise PackageError(f"member {name[:120]!r} has an absolute or unclean path")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise PackageError(f"member {name[:120]!r} leaves the archive ('..')")
    if len(parts) > MAX_DEPTH:
        raise PackageError(f"member {name[:120]!r} is deeper than {MAX_DEPTH} levels")
    return parts


def unpack(archive: IO[bytes], dest: Path) -> int:
    """Unpack the ``tar.gz`` stream ``archive`` into the new empty dir ``dest``.

    Returns:
        The number of files written.

    Raises:
        PackageError: The archive is refused (see the module docstring); ``dest`` may then
            hold part of it and must be removed by the caller.
    """
    root = os.open(dest, _DIR_FLAGS)
    written = members = total = 0
    try:
        try:
            with tarfile.open(fileobj=archive, mode="r|gz") as tar:
                for member in tar:
                    members += 1
                    if members > MAX_MEMBERS:
                        raise PackageError(f"the archive has more than {MAX_MEMBERS} members")
                    parts = _member_parts(member.name)
                    if member.issym() or member.islnk():
                        raise PackageError(
                            f"member {member.name[:120]!r} is a link (to "
                            f"{member.linkname[:120]!r}); a package holds none"
                        )
                    if not (member.isreg() or member.isdir()):
                        raise PackageError(
                            f"member {member.name[:120]!r} is a device, FIFO or other special "
                            "file; a package holds none"
                        )
                    if not parts:
                        continue
                    if member.isdir():
                        _close(_dir(root, parts, create=True))
                        continue
                    if member.size > MAX_FILE_BYTES or total + member.size > MAX_TOTAL_BYTES:
                        raise PackageError(
                            f"member {member.name[:120]!r} ({member.size} bytes) takes the "
                            f"archive past its caps ({MAX_FILE_BYTES} bytes a file, "
                            f"{MAX_TOTAL_BYTES} in all)"
                        )
                    total += member.size
                    if not covered("/".join(parts)):
                        continue
                    source = tar.extractfile(member)
                    if source is None:  # pragma: no cover - a regular member always has one
                        raise PackageError(f"member {member.name[:120]!r} has no data")
                    _write(root, parts, source, member.size, member.mode & 0o100 != 0)
                    written += 1
        except (tarfile.TarError, EOFError, OSError, UnicodeError) as exc:
            if isinstance(exc, PackageError):
                raise
            raise PackageError(f"the archive is not a readable tar.gz ({exc})") from None
    finally:
        os.close(root)
    return written


def _close(fd: int) -> None:
    os.close(fd)


def _dir(root: int, parts: tuple[str, ...], *, create: bool) -> int:
    """The fd of the dir ``parts`` under ``root``, each part opened ``O_NOFOLLOW``."""
    fd = os.dup(root)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise PackageError(
                        f"{'/'.join(parts)[:120]!r} is both a file and a dir in the archive"
                    ) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(root: int, parts: tuple[str, ...], source: IO[bytes], size: int, exe: bool) -> None:
    parent = _dir(root, parts[:-1], create=True)
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, 0o755 if exe else 0o644, dir_fd=parent)
        except FileExistsError:
            raise PackageError(f"member {'/'.join(parts)[:120]!r} is given twice") from None
        with os.fdopen(fd, "wb") as out:
            left = size
            while left > 0:
                chunk = source.read(min(_CHUNK, left))
                if not chunk:
                    raise PackageError(f"member {'/'.join(parts)[:120]!r} is cut short")
                out.write(chunk)
                left -= len(chunk)
            if source.read(1):
                raise PackageError(f"member {'/'.join(parts)[:120]!r} is longer than it says")
    finally:
        os.close(parent)


__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_MEMBERS",
    "MAX_TOTAL_BYTES",
    "PackageError",
    "covered",
    "package_digest",
    "unpack",
]

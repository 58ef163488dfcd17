"""Reading a tree the harness does not trust (a run dir, a task dir) without leaving it.

A run dir handed to ``harness report``/``view``/``regrade``/``export``, and a task dir
handed to ``harness run``, are untrusted input: a symlink anywhere in them may point at a
host file only root can read. Every path here is relative to a *root* that the caller
names (the run dir, the task dir: opened as given), and is resolved from the root's
directory fd with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel has
it, else one component at a time with ``O_NOFOLLOW`` (``openat``): a symlink at any depth
is refused (``ELOOP``/``ENOTDIR``/``EXDEV``), never followed, and ``..`` is refused before
anything is opened. Files are opened ``O_NONBLOCK`` (a planted FIFO never blocks) and must
be regular files before a byte is read; reads are bounded.

Stdlib only, Python >= 3.9 (the in-sandbox code may import it; ``sandbox/`` never imports
``harness/``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Union

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "SHA256_RE",
    "ReadResult",
    "is_file_beneath",
    "Entry",
    "copy_file_beneath",
    "is_dir_beneath",
    "lstat_beneath",
    "open_beneath",
    "read_beneath",
    "relative_parts",
    "safe_relative",
    "walk_beneath",
]

#: A content address: exactly 64 lowercase hex characters (a manifest's ``sha256``).
SHA256_RE = re.compile(r"[0-9a-f]{64}")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 16

PathLike = Union[str, "Path", "os.PathLike[str]"]


def safe_relative(rel: object) -> str | None:
    """``rel`` as a clean relative POSIX path, or None when it is not one.

    Refused: a non-string, empty, absolute, a NUL byte, a backslash-free ``..`` component,
    or one that is empty after dropping ``.`` components. ``a//b`` and ``./a`` are refused
    too (a manifest written by the harness never holds them: such an entry is forged).
    """
    if not isinstance(rel, str) or not rel or "\0" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return rel


def relative_parts(rel: PathLike) -> tuple[str, ...]:
    """The components of a relative path (``.`` and empty ones dropped).

    Raises:
        OSError: ``EINVAL`` for an absolute path, a NUL byte or a ``..`` component.
    """
    text = os.fspath(rel)
    if "\0" in text or text.startswith("/"):
        raise OSError(errno.EINVAL, f"not a relative path: {text!r}")
    parts = tuple(part for part in text.split("/") if part not in ("", "."))
    if ".." in parts:
        raise OSError(errno.EINVAL, f"path leaves its root: {text!r}")
    return parts


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


#: ``openat2`` (Linux >= 5.6) is the same syscall number on x86_64 and aarch64.
_OPENAT2_NR = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
#: RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH.
_RESOLVE = 0x02 | 0x04 | 0x08
#: None until tried; False where the kernel (or a seccomp filter) does not have it.
_openat2_usable: bool | None = None if _OPENAT2_NR is not None else False
_libc: Any = None


def _openat2(dirfd: int, path: str, flags: int) -> int | None:
    """``openat2(dirfd, path, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``; None: unavailable.

    One syscall resolves the whole path and refuses a symlink (``ELOOP``) or an escape
    (``EXDEV``) at any component. Where the kernel or a seccomp filter lacks it, the caller
    walks component by component instead.
    """
    global _openat2_usable, _libc
    number = _OPENAT2_NR
    if _openat2_usable is False or number is None:
        return None
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.syscall.restype = ctypes.c_long
        except OSError:
            _openat2_usable = False
            return None
    how = _OpenHow(flags, 0, _RESOLVE)
    fd = int(
        _libc.syscall(
            ctypes.c_long(number),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd >= 0:
        _openat2_usable = True
        return fd
    err = ctypes.get_errno()
    if not _openat2_usable and err in (errno.ENOSYS, errno.EPERM, errno.E2BIG):
        _openat2_usable = False
        return None
    raise OSError(err, os.strerror(err), path)


def _open_dir(root: PathLike, parts: tuple[str, ...]) -> int:
    """The dir fd of ``root/parts...``: the root as given, every part below ``O_NOFOLLOW``."""
    fd = os.open(os.fspath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if parts:
        try:
            found = _openat2(fd, "/".join(parts), _DIR_FLAGS)
        except BaseException:
            os.close(fd)
            raise
        if found is not None:
            os.close(fd)
            return found
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: PathLike, rel: PathLike, flags: int = _READ_FLAGS) -> int:
    """Open ``root/rel`` without following a symlink at any component below ``root``.

    Args:
        root: The trusted starting point (opened as given).
        rel: A path relative to it; ``""`` or ``"."`` is the root itself (a dir fd).
        flags: ``os.open`` flags for the last component (``O_NOFOLLOW`` is always added).

    Returns:
        A new fd, owned by the caller.

    Raises:
        OSError: ``ELOOP``/``ENOTDIR`` where a symlink was met, ``EINVAL`` for a path that
            is absolute or holds ``..``, or any error of the opens.
    """
    parts = relative_parts(rel)
    if not parts:
        return _open_dir(root, ())
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.open(os.fspath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found = _openat2(top, "/".join(parts), flags)
    finally:
        os.close(top)
    if found is not None:
        return found
    parent = _open_dir(root, parts[:-1])
    try:
        return os.open(parts[-1], flags, dir_fd=parent)
    finally:
        os.close(parent)


def lstat_beneath(root: PathLike, rel: PathLike) -> os.stat_result | None:
    """The entry's own ``lstat`` (a link is not followed), or None.

    None: missing, reached through a symlink, or not a valid relative path.
    """
    try:
        parts = relative_parts(rel)
        if not parts:
            return os.stat(os.fspath(root))
        parent = _open_dir(root, parts[:-1])
    except OSError:
        return None
    try:
        return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(parent)


def is_dir_beneath(root: PathLike, rel: PathLike) -> bool:
    """Whether ``root/rel`` is a real directory reached without a symlink."""
    info = lstat_beneath(root, rel)
    return info is not None and stat.S_ISDIR(info.st_mode)


def is_file_beneath(root: PathLike, rel: PathLike) -> bool:
    """Whether ``root/rel`` is a regular file reached without a symlink."""
    info = lstat_beneath(root, rel)
    return info is not None and stat.S_ISREG(info.st_mode)


class ReadResult(NamedTuple):
    """A bounded read: the bytes read (at most the limit) and the file's whole size."""

    data: bytes
    size: int


def read_beneath(root: PathLike, rel: PathLike, limit: int) -> ReadResult | None:
    """At most ``limit`` bytes of the regular file ``root/rel``, with its size.

    None: missing, a link anywhere on the way, not a regular file, or unreadable.

    Read in chunks: a file larger than the limit costs at most ``limit`` bytes of memory.
    """
    try:
        fd = open_beneath(root, rel)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks = []
        left = max(limit, 0)
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return ReadResult(b"".join(chunks), info.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)


def copy_file_beneath(
    root: PathLike, rel: PathLike, target: PathLike, *, limit: int | None = None
) -> os.stat_result | None:
    """Copy the regular file ``root/rel`` to ``target`` (created new, never followed).

    Returns:
        The source's ``fstat`` (its mode, size...), or None when the source is not a
        regular file reached without a link, or is larger than ``limit``.
    """
    try:
        src = open_beneath(root, rel)
    except OSError:
        return None
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(os.fspath(target), flags, 0o600)
        try:
            copied = 0
            while True:
                chunk = os.read(src, _CHUNK)
                if not chunk:
                    break
                copied += len(chunk)
                if limit is not None and copied > limit:  # grew while read
                    raise OSError(errno.EFBIG, "file grew past its limit while copied")
                os.write(dst, chunk)
        finally:
            os.close(dst)
        return info
    finally:
        os.close(src)


class Entry(NamedTuple):
    """One entry met by :func:`walk_beneath`.

    Its path relative to the walk's root, and its own ``lstat`` (a symlink is reported as
    one, never followed).
    """

    rel: str
    info: os.stat_result


def walk_beneath(root: PathLike, rel: PathLike = "") -> Iterator[Entry]:
    """Every entry under ``root/rel`` (dirs too, before their content), by dir fd.

    Directories are entered with ``O_NOFOLLOW``; a symlink is yielded as a symlink and not
    entered. Entries are sorted by name. Unreadable dirs are skipped. ``rel`` of each entry
    is relative to ``root/rel``.

    Raises:
        OSError: When ``root/rel`` itself cannot be opened as a dir without a link.
    """
    base = relative_parts(rel)
    os.close(_open_dir(root, base))  # the walk's own root must be reachable: else raise
    stack: list[tuple[str, ...]] = [()]
    while stack:
        parts = stack.pop()
        try:  # re-opened from the root: at most one fd held, however wide the tree
            fd = _open_dir(root, base + parts)
        except OSError:
            continue
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            names = []
        subdirs = []
        try:
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    subdirs.append(parts + (name,))
                entry_rel = "/".join(parts + (name,))
                yield Entry(entry_rel, info)
        finally:
            os.close(fd)
        stack.extend(reversed(subdirs))

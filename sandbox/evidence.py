"""Copying evidence out of a trial without trusting anything the agent could have planted.

Every open uses ``O_NOFOLLOW | O_NONBLOCK`` relative to a directory fd, and ``fstat`` must
say "regular file" before a byte is read: a planted symlink is never followed, a FIFO never
blocks us, a device is never read, and sizes are capped. Whatever is refused becomes an
``EvidenceEvent`` in the trial record (tampering is data, never silently ignored).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:  # the supervisor imports this module at every trial: keep imports cheap
    from pathlib import Path

_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 16
#: Event kinds that name an entry which is not a regular file (never followed or opened).
SPECIAL_KINDS = ("symlink", "fifo", "socket", "device", "not_regular")


class EvidenceEvent(NamedTuple):
    """Something found while copying evidence that was not a plain, small regular file."""

    kind: str  # symlink | fifo | socket | device | not_regular | too_large | missing | error
    path: str
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The event as a record-ready dict."""
        return {"type": "evidence", "kind": self.kind, "path": self.path, "detail": self.detail}


def _kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "not_regular"


def _open_beneath(root: Path, rel: str) -> tuple[int, str]:
    """Open the parent of ``rel`` under ``root`` component by component with O_NOFOLLOW."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"bad evidence path {rel!r}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _copy_fd(src_fd: int, dest: Path, max_bytes: int) -> tuple[int, bool]:
    dest.parent.mkdir(parents=True, exist_ok=True)
    copied = 0
    truncated = False
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        while True:
            chunk = os.read(src_fd, _CHUNK)
            if not chunk:
                break
            room = max_bytes - copied
            if len(chunk) > room:
                os.write(out, chunk[:room])
                copied += room
                truncated = True
                break
            os.write(out, chunk)
            copied += len(chunk)
    finally:
        os.close(out)
    return copied, truncated


def copy_file(
    root: Path, rel: str, dest: Path, *, max_bytes: int, required: bool = False
) -> list[EvidenceEvent]:
    """Copy ``root/rel`` to ``dest`` if it is a regular file reached without symlinks.

    Returns:
        Events for anything refused; a ``missing`` event only when ``required``.
    """
    try:
        parent, name = _open_beneath(root, rel)
    except FileNotFoundError:
        return [EvidenceEvent("missing", rel)] if required else []
    except OSError as exc:
        return [EvidenceEvent("symlink", rel, f"a parent dir is not a plain dir: {exc}")]
    try:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return [EvidenceEvent("missing", rel)] if required else []
        if not stat.S_ISREG(st.st_mode):
            target = ""
            if stat.S_ISLNK(st.st_mode):
                target = f"-> {os.readlink(name, dir_fd=parent)}"
            return [EvidenceEvent(_kind_of(st.st_mode), rel, target)]
        try:
            fd = os.open(name, _NOFOLLOW_READ, dir_fd=parent)
        except OSError as exc:  # swapped for a symlink or FIFO since the stat
            return [EvidenceEvent("error", rel, str(exc))]
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                return [EvidenceEvent(_kind_of(fst.st_mode), rel, "swapped during copy")]
            _, truncated = _copy_fd(fd, dest, max_bytes)
        finally:
            os.close(fd)
        if truncated:
            return [EvidenceEvent("too_large", rel, f"{fst.st_size} bytes, kept {max_bytes}")]
        return []
    finally:
        os.close(parent)


def read_file(
    root: Path, rel: str, *, max_bytes: int, truncate: bool = False
) -> tuple[bytes | None, EvidenceEvent | None]:
    """Read a small regular file under ``root`` safely; (None, event) when refused.

    A file over ``max_bytes`` is refused, or with ``truncate`` returned cut to
    ``max_bytes`` together with a ``too_large`` event.
    """
    try:
        parent, name = _open_beneath(root, rel)
    except FileNotFoundError:
        return None, EvidenceEvent("missing", rel)
    except OSError as exc:
        return None, EvidenceEvent("symlink", rel, f"a parent dir is not a plain dir: {exc}")
    try:
        try:
            fd = os.open(name, _NOFOLLOW_READ, dir_fd=parent)
        except FileNotFoundError:
            return None, EvidenceEvent("missing", rel)
        except OSError:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            return None, EvidenceEvent(_kind_of(st.st_mode), rel)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                return None, EvidenceEvent(_kind_of(fst.st_mode), rel)
            data, truncated = read_fd(fd, max_bytes)
        finally:
            os.close(fd)
        if truncated:
            event = EvidenceEvent("too_large", rel, f"over {max_bytes} bytes")
            return (data, event) if truncate else (None, event)
        return data, None
    finally:
        os.close(parent)


def copy_tree(
    root: Path,
    rel: str,
    dest: Path,
    *,
    max_file_bytes: int,
    max_total_bytes: int,
    max_files: int = 10_000,
) -> list[EvidenceEvent]:
    """Copy the regular files under ``root/rel`` into ``dest``, walking by dir fd.

    Symlinks, FIFOs, sockets and devices are recorded, never followed or opened; the copy
    stops at ``max_files`` files or ``max_total_bytes`` bytes with a ``too_large`` event.
    """
    return walk_tree(
        root,
        rel,
        lambda sub, fd, limit: _copy_fd(fd, dest / sub, limit),
        max_file_bytes=max_file_bytes,
        max_total_bytes=max_total_bytes,
        max_files=max_files,
    )


def copy_path(
    root: Path, rel: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
) -> list[EvidenceEvent]:
    """Copy ``root/rel`` — a dir tree, or one file — as evidence (see the two above)."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(os.path.join(root, rel)).st_mode)
    except OSError:
        is_dir = False
    if is_dir:
        return copy_tree(
            root, rel, dest, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
        )
    return copy_file(root, rel, dest, max_bytes=min(max_file_bytes, max_total_bytes))


def read_fd(fd: int, limit: int) -> tuple[bytes, bool]:
    """Read at most ``limit`` bytes of an open file; (data, truncated)."""
    chunks = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    return data[:limit], len(data) > limit


def walk_tree(
    root: Path,
    rel: str,
    sink: Callable[[str, int, int], tuple[int, bool]],
    *,
    max_file_bytes: int,
    max_total_bytes: int,
    max_files: int = 10_000,
) -> list[EvidenceEvent]:
    """Hand every regular file under ``root/rel`` to ``sink(sub_path, fd, limit)``.

    ``sink`` returns (bytes taken, truncated). The walk goes by dir fd with O_NOFOLLOW, so a
    dir swapped for a symlink mid-walk is never entered.
    """
    events: list[EvidenceEvent] = []
    try:
        parent, name = _open_beneath(root, rel)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [EvidenceEvent("symlink", rel, str(exc))]
    try:
        try:
            top = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            return []
        except OSError:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            return [EvidenceEvent(_kind_of(st.st_mode), rel)]
    finally:
        os.close(parent)
    total = 0
    files = 0
    stack: list[tuple[int, str]] = [(top, rel)]
    try:
        while stack:
            dir_fd, dir_rel = stack.pop()
            try:
                for entry in sorted(os.listdir(dir_fd)):
                    entry_rel = f"{dir_rel}/{entry}"
                    st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            sub = os.open(
                                entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd
                            )
                        except OSError as exc:
                            events.append(EvidenceEvent("error", entry_rel, str(exc)))
                            continue
                        stack.append((sub, entry_rel))
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        detail = ""
                        if stat.S_ISLNK(st.st_mode):
                            detail = f"-> {os.readlink(entry, dir_fd=dir_fd)}"
                        events.append(EvidenceEvent(_kind_of(st.st_mode), entry_rel, detail))
                        continue
                    if files >= max_files or total >= max_total_bytes:
                        events.append(EvidenceEvent("too_large", entry_rel, "evidence cap reached"))
                        return events
                    try:
                        fd = os.open(entry, _NOFOLLOW_READ, dir_fd=dir_fd)
                    except OSError as exc:
                        events.append(EvidenceEvent("error", entry_rel, str(exc)))
                        continue
                    try:
                        if not stat.S_ISREG(os.fstat(fd).st_mode):
                            events.append(EvidenceEvent("not_regular", entry_rel, "swapped"))
                            continue
                        limit = min(max_file_bytes, max_total_bytes - total)
                        copied, truncated = sink(entry_rel[len(rel) :].lstrip("/"), fd, limit)
                    finally:
                        os.close(fd)
                    total += copied
                    files += 1
                    if truncated:
                        events.append(EvidenceEvent("too_large", entry_rel, f"kept {copied} bytes"))
            finally:
                os.close(dir_fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return events

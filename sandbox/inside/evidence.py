"""Copying evidence out of a trial without trusting anything the agent could have planted.

Every open uses ``O_NOFOLLOW | O_NONBLOCK`` relative to a directory fd, and ``fstat`` must
say "regular file" before a byte is read: a planted symlink is never followed, a FIFO never
blocks us, a device is never read, and sizes are capped. Whatever is refused becomes an
``EvidenceEvent`` in the trial record (tampering is data, never silently ignored).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:  # the supervisor imports this module at every trial: keep imports cheap
    from pathlib import Path

_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Errors writing the copy that say the host's disk is full: raised, never an event.
_HOST_FULL = (errno.ENOSPC, errno.EDQUOT)
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 16
#: Event kinds that name an entry which is not a regular file (never followed or opened).
SPECIAL_KINDS = ("symlink", "fifo", "socket", "device", "not_regular")


class EvidenceEvent(NamedTuple):
    """Something found while copying evidence that was not a plain, small regular file."""

    #: symlink | fifo | socket | device | not_regular | too_large | limit | missing | error
    kind: str
    path: str
    detail: str = ""
    #: Which cap a ``limit`` (or ``too_large``) event hit: depth, path_bytes, entries,
    #: files, alloc_bytes, total_bytes, file_bytes, events (see :class:`Limits`).
    cap: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The event as a record-ready dict (``cap`` only when set)."""
        found = {"type": "evidence", "kind": self.kind, "path": self.path, "detail": self.detail}
        if self.cap:
            found["cap"] = self.cap
        return found

    @classmethod
    def from_dict(cls, data: Any) -> EvidenceEvent:
        """An event from :meth:`as_dict` (e.g. the supervisor's answer)."""
        return cls(
            str(data["kind"]),
            str(data["path"]),
            str(data.get("detail", "")),
            str(data.get("cap", "")),
        )


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
    max_files: int | None = None,
    limits: Limits | None = None,
) -> list[EvidenceEvent]:
    """Copy the regular files under ``root/rel`` into ``dest``, walking by dir fd.

    Symlinks, FIFOs, sockets and devices are recorded, never followed or opened; the copy
    stops at a cap of ``limits`` (or ``max_files`` files, or ``max_total_bytes`` bytes)
    with a ``limit`` event (see :func:`walk_tree`).
    """
    return walk_tree(
        root,
        rel,
        lambda sub, fd, limit: _copy_fd(fd, dest / sub, limit),
        max_file_bytes=max_file_bytes,
        max_total_bytes=max_total_bytes,
        max_files=max_files,
        limits=limits,
    )


def copy_path(
    root: Path,
    rel: str,
    dest: Path,
    *,
    max_file_bytes: int,
    max_total_bytes: int,
    limits: Limits | None = None,
) -> list[EvidenceEvent]:
    """Copy ``root/rel`` — a dir tree, or one file — as evidence (see the two above)."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(os.path.join(root, rel)).st_mode)
    except OSError:
        is_dir = False
    if is_dir:
        return copy_tree(
            root,
            rel,
            dest,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
            limits=limits,
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


class Limits(NamedTuple):
    """The caps of one evidence walk, besides its byte caps (docs/run-dir.md, "Evidence caps").

    Attributes:
        max_depth: Dir levels below the walked dir that are entered; a deeper dir is
            skipped (its subtree not kept) with a ``limit`` event (cap ``depth``).
        max_path_bytes: Bytes of an entry's path below the walked dir; a longer one is
            skipped with a ``limit`` event (cap ``path_bytes``), so every kept path fits
            the host's PATH_MAX under the run dir.
        max_entries: Entries (files, dirs, anything) a walk lists; the walk stops there
            (cap ``entries``). It bounds the walk's time, memory and the manifest.
        max_files: Files whose content is kept; the walk stops there (cap ``files``).
        max_alloc_bytes: Disk the kept copy may take, counted as allocated blocks (each
            kept file rounded up to whole 4 KiB blocks, each dir it needs one block), so
            many tiny files are bounded too; the walk stops there (cap ``alloc_bytes``).
        max_events: Events one walk records one by one; the rest are counted in one
            last ``limit`` event (cap ``events``).
    """

    max_depth: int = 128
    max_path_bytes: int = 2048
    max_entries: int = 100_000
    max_files: int = 10_000
    max_alloc_bytes: int = 128 << 20
    max_events: int = 100

    def as_dict(self) -> dict[str, int]:
        """The caps as a JSON-ready dict (the supervisor's request)."""
        return dict(self._asdict())

    @classmethod
    def from_dict(cls, data: Any) -> Limits:
        """Caps from :meth:`as_dict` (absent or unknown keys: the defaults)."""
        if not isinstance(data, dict):
            return cls()
        return cls(**{k: int(v) for k, v in data.items() if k in cls._fields})


DEFAULT_LIMITS = Limits()
#: What a kept file or dir is charged per block (the common filesystem block size).
BLOCK = 4096
#: fds one walk holds on its path at most (its top dir and the deepest levels); shallower
#: levels are closed and re-opened by name (checked by device and inode) on the way back.
FD_WINDOW = 8


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class _Level:
    """One dir on the walk's current path."""

    __slots__ = ("charged", "dev", "fd", "ino", "name", "names", "rel")

    def __init__(self, fd: int, name: str, rel: str, names: list[str], st: os.stat_result):
        self.fd = fd
        self.name = name
        self.rel = rel
        self.names = names  # still to visit, last first
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.charged = False  # its copy's dir counted against max_alloc_bytes


class _StopWalk(Exception):
    """A whole-walk cap was reached: nothing more is kept."""


class _Walk:
    """One bounded walk (see :func:`walk_tree`)."""

    def __init__(
        self,
        sink: Callable[..., Any],
        rel: str,
        max_file_bytes: int,
        max_total_bytes: int,
        max_files: int,
        limits: Limits,
    ) -> None:
        self.sink = sink
        self.prefix = rel
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.max_files = max_files
        self.limits = limits
        self.events: list[EvidenceEvent] = []
        self.dropped = 0
        self.total = 0
        self.files = 0
        self.alloc = 0
        self.entries = 0
        self.path: list[_Level] = []

    def note(self, event: EvidenceEvent) -> None:
        if len(self.events) < self.limits.max_events:
            self.events.append(event)
        else:
            self.dropped += 1

    def stop(self, cap: str, path: str, detail: str) -> None:
        self.note(EvidenceEvent("limit", path, detail, cap))
        raise _StopWalk

    def list_dir(self, fd: int, rel: str) -> list[str] | None:
        """The names of a dir (at most what the entries cap leaves), sorted, last first."""
        room = self.limits.max_entries - self.entries
        names: list[str] = []
        try:
            with os.scandir(fd) as found:
                for entry in found:
                    if len(names) >= room:
                        self.entries += len(names)
                        self.stop(
                            "entries", rel, f"over {self.limits.max_entries} entries, rest not kept"
                        )
                    names.append(entry.name)
        except OSError as exc:
            self.note(EvidenceEvent("error", rel, f"not listed: {_errno(exc)}"))
            return None
        self.entries += len(names)
        names.sort(reverse=True)
        return names

    def reopen(self, index: int) -> bool:
        """Give ``path[index]`` an fd again, from its nearest open ancestor, by name.

        Each dir on the way must be the one first entered (device and inode), or the
        subtree is dropped with an event; the deepest levels re-opened stay open.
        """
        start = index
        while self.path[start].fd < 0:
            start -= 1
        prev, prev_kept = self.path[start].fd, True
        for at in range(start + 1, index + 1):
            level = self.path[at]
            err = ""
            try:
                nxt = os.open(level.name, _DIR_OPEN, dir_fd=prev)
            except OSError as exc:
                nxt, err = -1, _errno(exc)
            else:
                st = os.fstat(nxt)
                if (st.st_dev, st.st_ino) != (level.dev, level.ino):
                    err = "replaced by another dir"
            if not prev_kept:
                os.close(prev)
            if err:
                if nxt >= 0:
                    os.close(nxt)
                self.note(EvidenceEvent("error", level.rel, f"changed during the walk: {err}"))
                return False
            prev, prev_kept = nxt, at > index - FD_WINDOW + 1
            if prev_kept:
                level.fd = nxt
        return True

    def hold_window(self) -> None:
        """Close the shallowest open levels past the window (never the top dir)."""
        open_levels = [lv for lv in self.path[1:] if lv.fd >= 0]
        for level in open_levels[: max(0, len(open_levels) - FD_WINDOW + 1)]:
            os.close(level.fd)
            level.fd = -1

    def pop(self) -> None:
        level = self.path.pop()
        if level.fd >= 0:
            os.close(level.fd)

    def run(self, top: int, rel: str) -> None:
        try:
            names = self.list_dir(top, rel)
        except BaseException:
            os.close(top)
            raise
        if names is None:
            os.close(top)
            return
        self.path.append(_Level(top, "", rel, names, os.fstat(top)))
        self.path[0].charged = True  # the destination itself: made by the caller
        while self.path:
            level = self.path[-1]
            if not level.names:
                self.pop()
                continue
            if level.fd < 0 and not self.reopen(len(self.path) - 1):
                self.pop()
                continue
            self.visit(level, level.names.pop())

    def visit(self, level: _Level, name: str) -> None:
        entry_rel = f"{level.rel}/{name}"
        sub = entry_rel[len(self.prefix) :].lstrip("/")
        if len(os.fsencode(sub)) > self.limits.max_path_bytes:
            self.note(
                EvidenceEvent(
                    "limit",
                    entry_rel,
                    f"path over {self.limits.max_path_bytes} bytes, not kept",
                    "path_bytes",
                )
            )
            return
        try:
            st = os.stat(name, dir_fd=level.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.note(EvidenceEvent("error", entry_rel, _errno(exc)))
            return
        if stat.S_ISDIR(st.st_mode):
            self.enter(name, entry_rel, st)
            return
        if not stat.S_ISREG(st.st_mode):
            detail = ""
            if stat.S_ISLNK(st.st_mode):
                try:
                    detail = f"-> {os.readlink(name, dir_fd=level.fd)}"
                except OSError:
                    detail = "-> ?"
            self.note(EvidenceEvent(_kind_of(st.st_mode), entry_rel, detail))
            return
        self.keep(level, name, entry_rel, sub)

    def enter(self, name: str, entry_rel: str, st: os.stat_result) -> None:
        if len(self.path) > self.limits.max_depth:
            self.note(
                EvidenceEvent(
                    "limit",
                    entry_rel,
                    f"deeper than {self.limits.max_depth} levels, subtree not kept",
                    "depth",
                )
            )
            return
        parent = self.path[-1]
        try:
            fd = os.open(name, _DIR_OPEN, dir_fd=parent.fd)
        except OSError as exc:
            kind = "symlink" if exc.errno == errno.ELOOP else "error"
            self.note(EvidenceEvent(kind, entry_rel, f"not entered: {_errno(exc)}"))
            return
        try:
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                self.note(EvidenceEvent("not_regular", entry_rel, "swapped during the walk"))
                os.close(fd)
                return
            names = self.list_dir(fd, entry_rel)
        except BaseException:
            os.close(fd)
            raise
        if names is None:
            os.close(fd)
            return
        self.path.append(_Level(fd, name, entry_rel, names, fst))
        self.hold_window()

    def keep(self, level: _Level, name: str, entry_rel: str, sub: str) -> None:
        if self.files >= self.max_files:
            self.stop("files", entry_rel, f"{self.files} files kept, the rest not")
        if self.total >= self.max_total_bytes:
            self.stop("total_bytes", entry_rel, f"{self.total} bytes kept, the rest not")
        if self.alloc >= self.limits.max_alloc_bytes:
            self.stop("alloc_bytes", entry_rel, f"{self.alloc} bytes of blocks kept, the rest not")
        try:
            fd = os.open(name, _NOFOLLOW_READ, dir_fd=level.fd)
        except OSError as exc:
            kind = "symlink" if exc.errno == errno.ELOOP else "error"
            self.note(EvidenceEvent(kind, entry_rel, _errno(exc)))
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self.note(EvidenceEvent("not_regular", entry_rel, "swapped"))
                return
            limit = min(self.max_file_bytes, self.max_total_bytes - self.total)
            try:
                result = self.sink(sub, fd, limit)
            except OSError as exc:
                if exc.errno in _HOST_FULL:  # the run dir's disk: the host's problem
                    raise
                self.note(EvidenceEvent("error", entry_rel, f"not kept: {_errno(exc)}"))
                return
        finally:
            os.close(fd)
        copied, truncated = result[0], result[1]
        stored = result[2] if len(result) > 2 else True
        if not stored:
            return
        self.total += copied
        self.files += 1
        self.alloc += _blocks(copied)
        for ancestor in self.path:  # the dirs its copy needs, each charged once
            if not ancestor.charged:
                ancestor.charged = True
                self.alloc += BLOCK
        if truncated:
            self.note(EvidenceEvent("too_large", entry_rel, f"kept {copied} bytes", "file_bytes"))

    def close(self) -> None:
        while self.path:
            self.pop()
        if self.dropped:
            self.events.append(
                EvidenceEvent(
                    "limit", self.prefix, f"{self.dropped} more events not kept", "events"
                )
            )


def _errno(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror}" if name else str(exc)


def walk_tree(
    root: Path,
    rel: str,
    sink: Callable[..., Any],
    *,
    max_file_bytes: int,
    max_total_bytes: int,
    max_files: int | None = None,
    limits: Limits | None = None,
) -> list[EvidenceEvent]:
    """Hand every regular file under ``root/rel`` to ``sink(sub_path, fd, limit)``.

    ``sink`` returns (bytes kept, truncated) or (bytes kept, truncated, stored): ``stored``
    False says the file was looked at but nothing of it kept (an unchanged seed file),
    which counts against no content cap.

    The walk is iterative and bounded whatever the tree: every dir is opened relative to
    its parent's fd with ``O_NOFOLLOW | O_DIRECTORY`` (a dir swapped for a symlink is never
    entered, one swapped for another dir is refused by device and inode), at most
    :data:`FD_WINDOW` + 2 fds are open at any time, and the caps of ``limits`` (depth,
    path length, entries, kept files, allocated blocks) and the byte caps hold. Past a cap
    the walk keeps what it has and records a ``limit`` event naming the cap; an error of
    the tree (ENAMETOOLONG, ELOOP, EMFILE, EACCES, ...) is an ``error`` event, never an
    exception. Names that are not UTF-8 stay ``str`` with surrogate escapes.
    """
    limits = limits or DEFAULT_LIMITS
    try:
        parent, name = _open_beneath(root, rel)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [EvidenceEvent("symlink", rel, _errno(exc))]
    try:
        try:
            top = os.open(name, _DIR_OPEN, dir_fd=parent)
        except FileNotFoundError:
            return []
        except OSError as exc:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError:
                return [EvidenceEvent("error", rel, _errno(exc))]
            return [EvidenceEvent(_kind_of(st.st_mode), rel)]
    finally:
        os.close(parent)
    walk = _Walk(
        sink,
        rel,
        max_file_bytes,
        max_total_bytes,
        limits.max_files if max_files is None else min(max_files, limits.max_files),
        limits,
    )
    try:
        walk.run(top, rel)
    except _StopWalk:
        pass
    finally:
        walk.close()
    return walk.events

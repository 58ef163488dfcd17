r"""Listing what a container's writable layer holds: its root changes, read safely.

An overlay upper dir (a docker container's ``diff``) holds exactly what the container
changed in its image root: new and changed entries as themselves, removed ones as
*whiteouts* (a char device 0/0), and dirs that replaced a lower dir whole as *opaque* dirs
(xattr ``trusted.overlay.opaque = y``). Its content is written by the agent, so it is read
here as hostile input:

- by dir fd, one component at a time with ``O_NOFOLLOW``: a symlink is listed, never
  followed; nothing is read but names and ``lstat`` (and one xattr per dir);
- bounded: at most :data:`~sandbox.root_changes.MAX_ROOT_CHANGES` changes are kept (the
  first by path), :data:`MAX_VISITED` entries visited, :data:`MAX_DEPTH` dirs deep and
  :data:`MAX_PATH_BYTES` long; past any bound the listing says it was cut (``truncated``);
- names are kept lossless: ``path`` with ``\xNN`` escapes for bytes that are not UTF-8
  (and for control characters), ``path_b64`` the raw bytes then.

Whether an entry was ``added`` or ``modified`` is decided by the image's layers (the
lowers, topmost first, read the same way): present there (and not whited out above) is
``modified``. A dir the overlay only copied up to hold a changed child (same type and
mode as below) is not itself a change. An opaque dir is ``modified`` and the lower
entries it hides (its direct children only) are ``removed``.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from sandbox.beneath import lstat_beneath, open_beneath
from sandbox.root_changes import MAX_ROOT_CHANGES, ChangeKind, EntryType, RootChange, RootChanges

#: Entries visited at most in one scan (the walk stops, ``truncated``).
MAX_VISITED = 500_000
#: Dirs entered at most this deep (one fd is held per level).
MAX_DEPTH = 128
#: Paths longer than this are not listed (``truncated``).
MAX_PATH_BYTES = 4096
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "trusted.overlay.opaque"

#: What an entry of the upper dir is, for the baseline: (type, mode, size, mtime_ns).
Fingerprint = tuple[str, int, int, int]


def escape_path(raw: bytes) -> tuple[str, str | None]:
    r"""``raw`` as text (undecodable bytes and control characters as ``\xNN``), and its b64.

    The b64 is None when the text alone says it exactly (valid UTF-8, no control
    character, no backslash).
    """
    text = raw.decode("utf-8", errors="backslashreplace")
    shown = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    try:
        exact = shown == raw.decode("utf-8") and "\\" not in shown
    except UnicodeDecodeError:
        exact = False
    return shown, None if exact else base64.b64encode(raw).decode()


def _type_of(mode: int) -> EntryType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


class _Cuts:
    """Whether a walk left something out (a bound was met)."""

    def __init__(self) -> None:
        self.any = False


def _walk(
    upper: Path, skip: frozenset[bytes], cuts: _Cuts
) -> Iterator[tuple[bytes, os.stat_result, bool]]:
    """(raw path relative to ``upper``, lstat, opaque dir?) of every entry, depth first.

    ``skip``: relative raw paths not listed nor entered (the trial's own mount points).
    At most one fd is held per level. What lies past :data:`MAX_DEPTH` or
    :data:`MAX_PATH_BYTES` is left out, and ``cuts`` says so; the walk goes on beside it.

    Raises:
        OSError: ``upper`` itself cannot be read.
    """
    top = os.open(os.fspath(upper), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[tuple[int, bytes, Iterator[os.DirEntry[str]]]] = []
    try:
        listing = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        os.close(top)
        raise
    stack.append((top, b"", iter(listing)))
    try:
        while stack:
            fd, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            raw = prefix + os.fsencode(entry.name)
            if raw in skip:
                continue
            try:
                info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if len(raw) + 1 > MAX_PATH_BYTES:
                cuts.any = True
                continue
            opaque = False
            child = -1
            if stat.S_ISDIR(info.st_mode):
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    child = -1
                if child >= 0:
                    try:
                        opaque = os.getxattr(child, _OPAQUE) == b"y"
                    except OSError:
                        opaque = False
            yield raw, info, opaque
            if child >= 0:
                if len(stack) >= MAX_DEPTH:
                    os.close(child)
                    cuts.any = True
                    continue
                try:
                    listing = sorted(os.scandir(child), key=lambda e: e.name)
                except OSError:
                    os.close(child)
                    continue
                stack.append((child, raw + b"/", iter(listing)))
    finally:
        for fd, _prefix, _entries in stack:
            os.close(fd)


class _Cut(Exception):
    """A bound was reached: the listing is truncated."""


def fingerprint(info: os.stat_result) -> Fingerprint:
    """What decides whether an entry of the upper dir changed since the baseline."""
    size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    return (_type_of(info.st_mode), info.st_mode, size, info.st_mtime_ns)


def baseline(upper: Path, skip: Iterable[str] = ()) -> dict[bytes, Fingerprint]:
    """The upper dir right after the container started (what the engine made there)."""
    found: dict[bytes, Fingerprint] = {}
    try:
        for raw, info, _opaque in _walk(upper, _skip_set(skip), _Cuts()):
            found[raw] = fingerprint(info)
            if len(found) >= MAX_ROOT_CHANGES:
                break
    except (_Cut, OSError):
        pass
    return found


def _skip_set(skip: Iterable[str]) -> frozenset[bytes]:
    return frozenset(os.fsencode(p.strip("/")) for p in skip if p.strip("/"))


def _in_lowers(lowers: tuple[Path, ...], rel: str) -> os.stat_result | None:
    """The entry at ``rel`` in the image (topmost layer that has it), None if absent."""
    for lower in lowers:
        try:
            info = lstat_beneath(lower, rel)
        except OSError:
            info = None
        if info is None:
            continue
        return None if _whiteout(info) else info
    return None


def _lower_children(lowers: tuple[Path, ...], rel: str, limit: int) -> list[bytes]:
    """Names directly under ``rel`` in the image (for an opaque dir), at most ``limit``."""
    names: set[bytes] = set()
    for lower in reversed(lowers):  # bottom first: a higher whiteout removes a name
        try:
            fd = open_beneath(lower, rel, _DIR_FLAGS)
        except OSError:
            continue
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    raw = os.fsencode(entry.name)
                    try:
                        info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if _whiteout(info):
                        names.discard(raw)
                    elif len(names) < limit:
                        names.add(raw)
        except OSError:
            pass
        finally:
            os.close(fd)
    return sorted(names)


def scan(
    upper: Path,
    lowers: tuple[Path, ...],
    *,
    base: dict[bytes, Fingerprint] | None = None,
    skip: Iterable[str] = (),
    limit: int = MAX_ROOT_CHANGES,
) -> RootChanges:
    """The changes an overlay upper dir holds, against its image's layers.

    Args:
        upper: The upper dir (read by dir fd, links never followed).
        lowers: The image's layer dirs, topmost first.
        base: :func:`baseline` of the same upper dir: entries unchanged since are left out.
        skip: Absolute paths in the container left out with what is under them.
        limit: Changes kept at most (the first met by a walk in name order).

    Returns:
        The changes, sorted by path, bounded.
    """
    base = base or {}
    changes: list[tuple[bytes, RootChange]] = []
    total, truncated, visited = 0, False, 0
    cuts = _Cuts()
    try:
        for raw, info, opaque in _walk(upper, _skip_set(skip), cuts):
            visited += 1
            if visited > MAX_VISITED:
                raise _Cut
            if base.get(raw) == fingerprint(info):
                continue
            for change_raw, change in _changes_of(upper, raw, info, opaque, lowers):
                total += 1
                if len(changes) < limit:
                    changes.append((change_raw, change))
                else:
                    truncated = True
    except (_Cut, OSError):
        truncated = True
    truncated = truncated or cuts.any
    changes.sort(key=lambda item: item[0])
    return RootChanges(
        changes=tuple(change for _raw, change in changes), truncated=truncated, total=total
    )


def _changes_of(
    upper: Path, raw: bytes, info: os.stat_result, opaque: bool, lowers: tuple[Path, ...]
) -> list[tuple[bytes, RootChange]]:
    """The changes one entry of the upper dir stands for (none: a dir merely copied up)."""
    rel = os.fsdecode(raw)
    below = _in_lowers(lowers, rel)
    path, b64 = escape_path(b"/" + raw)
    if _whiteout(info):
        if below is None:
            return []  # hides nothing (a file made and removed again by a phase)
        return [(raw, RootChange(path, "removed", _type_of(below.st_mode), 0, 0, b64))]
    copied_up = below is not None and stat.S_ISDIR(below.st_mode) and not opaque
    if copied_up and below is not None and below.st_mode == info.st_mode:
        return []  # a dir copied up to hold a changed child; the child is the change
    kind: ChangeKind = "modified" if below is not None else "added"
    size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    mode = stat.S_IMODE(info.st_mode)
    found = [(raw, RootChange(path, kind, _type_of(info.st_mode), mode, size, b64))]
    if opaque and below is not None and stat.S_ISDIR(below.st_mode):
        # The lower dir's entries the opaque dir hides, but for those it holds itself.
        for name in _lower_children(lowers, rel, MAX_ROOT_CHANGES):
            child = raw + b"/" + name
            if lstat_beneath(upper, os.fsdecode(child)) is not None:
                continue
            inside = _in_lowers(lowers, os.fsdecode(child))
            ctype = _type_of(inside.st_mode) if inside is not None else "other"
            cpath, cb64 = escape_path(b"/" + child)
            found.append((child, RootChange(cpath, "removed", ctype, 0, 0, cb64)))
    return found


__all__ = ["MAX_DEPTH", "MAX_PATH_BYTES", "MAX_VISITED", "baseline", "escape_path", "scan"]

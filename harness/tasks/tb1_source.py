"""A Terminal-Bench 1 task dir read as hostile input, before ``harness tasks migrate`` maps it.

A TB1 task set comes from anyone, and the harness converts it on the host. So the task dir
is never read in place: :func:`snapshot_task` copies it first, by directory fd
(``sandbox/beneath.py``: no symlink is followed at any component), into a private dir the
migration made itself, and the conversion reads only that copy. The copy holds regular
files and directories only:

- a symlink whose target leaves the task dir (resolved as the kernel would, at any depth)
  is refused, naming it and its target: nothing of the task is written;
- a symlink that stays inside the task and names a regular file is copied as that file's
  content (a regular file), read beneath the task dir without following any link; one
  that names a directory, another link, or nothing is refused;
- a FIFO, device or socket is refused;
- at most :data:`MAX_ENTRIES` entries, :data:`MAX_BYTES` bytes in all and
  :data:`MAX_DEPTH` levels are copied; past any of them the task is refused;
- modes are reduced to ``0644``, or ``0755`` for a file any execute bit was set on.

Its YAML files (``task.yaml``, ``docker-compose.yaml``, ``solution.yaml``) are read by
:func:`load_yaml`: at most :data:`MAX_YAML_BYTES`, with PyYAML's safe loader (no Python
objects), and refused when their aliases expand past :data:`MAX_YAML_VALUES` values or
:data:`MAX_YAML_CHARS` characters of text (a "billion laughs" of a few hundred bytes), or
when they nest deeper than Python's recursion allows.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from harness.errors import HarnessError
from sandbox.beneath import lstat_beneath, open_beneath, walk_beneath

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_YAML_BYTES",
    "MAX_YAML_CHARS",
    "MAX_YAML_VALUES",
    "MigrationError",
    "load_yaml",
    "snapshot_task",
    "write_all",
]

MAX_ENTRIES = 100_000
"""The most files and directories one TB1 task may hold."""
MAX_BYTES = 4 << 30
"""The most bytes one TB1 task's files may hold in all: 4 GiB."""
MAX_DEPTH = 64
"""The deepest a TB1 task's entry may be below its task dir."""
MAX_YAML_BYTES = 1 << 20
"""The largest ``task.yaml``, ``docker-compose.yaml`` or ``solution.yaml`` read: 1 MiB."""
MAX_YAML_VALUES = 200_000
"""The most values (mapping keys and values, list items) a YAML file may expand to."""
MAX_YAML_CHARS = 16 << 20
"""The most characters of text a YAML file may expand to (its aliases counted each time)."""

_CHUNK = 1 << 16
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class MigrationError(HarnessError):
    """A TB1 task that cannot be converted (the reason is the message)."""


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip("/") + "/")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


class _Budget:
    """What the snapshot has taken so far, against the caps."""

    def __init__(self, source: Path) -> None:
        self.source = source
        self.entries = 0
        self.bytes = 0

    def entry(self, rel: str) -> None:
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise MigrationError(
                f"{self.source} holds more than {MAX_ENTRIES} files and directories: refused "
                "(a task that large is not converted; remove what it does not need)"
            )
        if rel.count("/") + 1 > MAX_DEPTH:
            raise MigrationError(
                f"{self.source / rel} is more than {MAX_DEPTH} levels deep: refused (flatten "
                "the task's tree)"
            )

    def add(self, size: int) -> None:
        self.bytes += size
        if self.bytes > MAX_BYTES:
            raise MigrationError(
                f"{self.source}'s files hold more than {MAX_BYTES >> 30} GiB: refused (remove "
                "the data it does not need, or fetch it in the Dockerfile)"
            )


def _copy_content(source: Path, rel: str, into_fd: int, name: str, budget: _Budget) -> None:
    """Copy the regular file ``source/rel`` (no link followed) to ``name`` in ``into_fd``."""
    try:
        src = open_beneath(source, rel)
    except OSError as exc:
        raise MigrationError(
            f"{source / rel}: cannot be read without following a link "
            f"({exc.strerror or exc}): make it a regular file of the task"
        ) from None
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode):
            raise MigrationError(f"{source / rel} is {_kind(info.st_mode)}: refused")
        mode = 0o755 if info.st_mode & 0o111 else 0o644
        dst = os.open(name, _NEW_FILE, 0o600, dir_fd=into_fd)
        try:
            while chunk := os.read(src, _CHUNK):
                budget.add(len(chunk))
                write_all(dst, chunk)
            os.fchmod(dst, mode)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link_target(source: Path, rel: str, root: str) -> str:
    """The task-relative path of the regular file the symlink ``source/rel`` names.

    Raises:
        MigrationError: It leaves the task dir, or names no regular file.
    """
    path = source / rel
    try:
        text = os.readlink(path)
    except OSError as exc:
        raise MigrationError(f"{path}: cannot read the symlink: {exc.strerror}") from None
    resolved = os.path.realpath(path)
    if not _inside(resolved, root):
        raise MigrationError(
            f"{path} is a symlink to {text!r}, which leaves the task dir: refused (it would "
            "copy a host file into the converted task); copy the file into the task instead"
        )
    target = os.path.relpath(resolved, root)
    info = lstat_beneath(source, target)
    if info is None or not stat.S_ISREG(info.st_mode):
        what = "nothing" if info is None else _kind(info.st_mode)
        raise MigrationError(
            f"{path} is a symlink to {text!r}, which is {what}: refused (only a symlink to a "
            "regular file of the task is converted, as a copy of that file); make it a "
            "regular file or directory"
        )
    return target


def snapshot_task(source: Path, into: Path) -> None:
    """Copy the TB1 task dir ``source`` into the empty private dir ``into`` (see module doc).

    Args:
        source: The TB1 task dir (opened as given; nothing below it is followed).
        into: An empty dir the caller created itself.

    Raises:
        MigrationError: An entry is refused (named, with why), or a cap is passed.
    """
    root = os.path.realpath(source)
    budget = _Budget(source)
    try:
        entries = walk_beneath(source)
        for entry in entries:
            budget.entry(entry.rel)
            parent_rel, _, name = entry.rel.rpartition("/")
            parent = open_beneath(into, parent_rel or ".", _DIR)
            try:
                mode = entry.info.st_mode
                if stat.S_ISDIR(mode):
                    os.mkdir(name, 0o755, dir_fd=parent)
                elif stat.S_ISREG(mode):
                    _copy_content(source, entry.rel, parent, name, budget)
                elif stat.S_ISLNK(mode):
                    target = _link_target(source, entry.rel, root)
                    _copy_content(source, target, parent, name, budget)
                else:
                    raise MigrationError(
                        f"{source / entry.rel} is {_kind(mode)}: refused (a task holds regular "
                        "files and directories)"
                    )
            finally:
                os.close(parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
            raise MigrationError(
                f"{source}: a symlink replaced a directory while it was read: refused"
            ) from None
        raise MigrationError(f"{source}: cannot be read: {exc.strerror or exc}") from None


def _check_expanded(data: object, name: str) -> None:
    """Refuse YAML whose aliases expand it past the caps (each alias counted each time)."""
    values = 0
    chars = 0
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            values += 2 * len(item)
            children: list[object] = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            values += len(item)
            children = list(item)
        else:
            if isinstance(item, str | bytes):
                chars += len(item)
            children = []
        if values > MAX_YAML_VALUES or chars > MAX_YAML_CHARS:
            raise MigrationError(
                f"{name} expands to more than {MAX_YAML_VALUES} values or "
                f"{MAX_YAML_CHARS >> 20} MiB of text (YAML aliases repeating a value): refused; "
                "write the values out"
            )
        stack.extend(children)


def load_yaml(path: Path, name: str) -> Any:
    """The YAML file ``path`` of a snapshot (see the module doc for what is refused).

    Args:
        path: A file of the private snapshot.
        name: How a message names it (``task.yaml``).

    Raises:
        MigrationError: Too large, not YAML, nested too deep, or expanding past the caps.
    """
    with path.open("rb") as stream:
        raw = stream.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise MigrationError(
            f"{name} is larger than {MAX_YAML_BYTES >> 20} MiB: refused (a TB1 {name} is a few KiB)"
        )
    try:
        data = yaml.load(raw.decode("utf-8", errors="replace"), Loader=yaml.SafeLoader)
    except RecursionError:
        raise MigrationError(f"{name} nests too deep to read: refused") from None
    except (yaml.YAMLError, ValueError, TypeError) as exc:  # ValueError: a 5000-digit int
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MigrationError(f"{name} is not valid YAML: {first}") from None
    _check_expanded(data, name)
    return data

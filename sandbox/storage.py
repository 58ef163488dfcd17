"""Per-trial storage: one size-limited filesystem holding everything a trial can write.

Every path a trial's processes can write — the workspace, its home and session dirs,
``/tmp``, ``/var/tmp``, ``/dev/shm``, the grader's dirs — lives on a fresh ext4 filesystem
in a sparse image file, loop-mounted ``nosuid,nodev`` under the trial's root, sized by the
task's ``storage_mb``. An agent that fills it gets ``ENOSPC`` at its limit; the host disk and
the harness's records are untouched. The image is a little larger than the limit: the
difference is reserved (ext4 reserved blocks) for root and the grader's group, so the tests
can still be copied in and the verifier can still write its reward after the agent filled
its share.

A run-wide :class:`StorageBudget` keeps the storage promised to running trials within the
free space of the disk that holds the images, so concurrent trials cannot together fill it;
a trial waits for room (or fails at once when it could never fit).

Needs root (loop devices, mount). Without root the trial dirs are plain dirs and
``storage_mb`` is not enforced (the local sandbox then says it is not a security boundary).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import EnvironmentStartError, PermanentStartError, SandboxError
from sandbox.host_tools import failure_detail, run_tool

#: ``storage_mb`` of a task that declares none (Harbor's default), where the disk has room.
DEFAULT_STORAGE_MB = 10240
#: The least a task that declares no ``storage_mb`` is given on a disk short of room.
MIN_DEFAULT_STORAGE_MB = 1024
#: Extra space reserved for root and the grader's group beyond a trial's limit.
RESERVE_MB = 256
#: Free space the budget never promises away (the harness's own records live there too).
SAFETY_MARGIN_MB = 2048
IMAGE_NAME = "storage.img"
MOUNT_NAME = "fs"
_TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class StorageError(EnvironmentStartError):
    """The trial's filesystem could not be created; the message says why and what to do."""


class StorageTooLarge(StorageError, PermanentStartError):
    """A trial's storage can never fit on this disk; retrying cannot help."""


def _tool(name: str) -> str:
    found = shutil.which(name, path=_TOOL_PATH)
    if found is None:
        raise StorageError(
            f"{name} is missing: install e2fsprogs and mount (Debian), or run without root"
        )
    return found


def _run(argv: list[str], what: str) -> None:
    done = run_tool(argv)
    if done.returncode != 0:
        raise StorageError(f"{what} failed: {failure_detail(done)}")


def storage_supported() -> bool:
    """Whether this process can create loop-mounted trial filesystems (root, loop devices)."""
    return os.geteuid() == 0 and os.path.exists("/dev/loop-control")


class StorageBudget:
    """Storage promised to running trials, kept within the free space of one disk.

    Args:
        directory: Where the trial images are created.
        margin_mb: Free space never promised away.
    """

    def __init__(self, directory: Path, *, margin_mb: int = SAFETY_MARGIN_MB) -> None:
        self.directory = directory
        self.margin_mb = margin_mb
        self._lock = threading.Condition()
        self._promised = 0

    def _free_mb(self) -> int:
        probe = self.directory
        while not probe.exists():
            probe = probe.parent
        return shutil.disk_usage(probe).free // (1 << 20)

    def acquire(
        self,
        size_mb: int,
        cancel: threading.Event | None = None,
        *,
        at_least_mb: int | None = None,
    ) -> int:
        """Promise up to ``size_mb`` to one trial, waiting while running trials hold the room.

        Args:
            size_mb: What the trial asks for.
            cancel: The run's cancel event (stops the wait).
            at_least_mb: Accept less than ``size_mb``, down to this, rather than wait (for
                a task that declared no limit of its own).

        Returns:
            The size promised.

        Raises:
            StorageTooLarge: the disk could not hold it even with no trial running.
            StorageError: the run was cancelled while waiting.
        """
        with self._lock:
            while True:
                # Images are sparse: what running trials already wrote is counted in "free"
                # and in "promised" alike, so this errs on the safe side.
                room = self._free_mb() - self.margin_mb - self._promised
                if size_mb <= room:
                    self._promised += size_mb
                    return size_mb
                if at_least_mb is not None and at_least_mb <= room:
                    self._promised += room
                    return room
                if self._promised == 0:
                    raise StorageTooLarge(
                        f"the trial's storage ({at_least_mb or size_mb} MB) does not fit in the "
                        "free space of "
                        f"{self.directory} ({self._free_mb()} MB, {self.margin_mb} MB kept "
                        "free); lower the task's storage_mb or free disk space"
                    )
                if cancel is not None and cancel.is_set():
                    raise StorageError("run interrupted while waiting for disk space")
                self._lock.wait(timeout=1.0)

    def has_room(self, size_mb: int, *, at_least_mb: int | None = None) -> bool:
        """Whether :meth:`acquire` would promise ``size_mb`` (or ``at_least_mb``) now."""
        with self._lock:
            room = self._free_mb() - self.margin_mb - self._promised
        return min(size_mb, at_least_mb or size_mb) <= room

    def release(self, size_mb: int) -> None:
        """Give back what :meth:`acquire` promised."""
        with self._lock:
            self._promised = max(0, self._promised - size_mb)
            self._lock.notify_all()


@dataclass
class Usage:
    """How full a trial's filesystem is, as the trial's users see it."""

    used_bytes: int
    limit_bytes: int

    @property
    def full(self) -> bool:
        """Nothing more can be written by the agent (within 1 MiB)."""
        return self.limit_bytes - self.used_bytes < (1 << 20)


class TrialStorage:
    """One trial's filesystem: ``<root>/storage.img`` mounted at ``<root>/fs``.

    Args:
        root: The trial's host root (root-only).
        size_mb: The trial's limit.
        grader_gid: Group allowed into the reserved blocks besides root.
    """

    def __init__(self, root: Path, size_mb: int, *, grader_gid: int | None = None) -> None:
        if size_mb <= 0:
            raise StorageTooLarge(f"storage_mb must be positive, got {size_mb}")
        self.root = root
        self.size_mb = size_mb
        self.grader_gid = grader_gid
        self.image = root / IMAGE_NAME
        self.mount_point = root / MOUNT_NAME
        self.mounted = False

    @property
    def total_mb(self) -> int:
        """Image size: the limit plus the reserve."""
        return self.size_mb + RESERVE_MB

    def create(self) -> Path:
        """Create, format and mount the filesystem; return the mount point."""
        self.mount_point.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, self.total_mb << 20)
        finally:
            os.close(fd)
        reserved = 100.0 * RESERVE_MB / self.total_mb
        _run(
            [
                _tool("mkfs.ext4"),
                "-q",
                "-F",
                "-O",
                "^has_journal",
                "-m",
                f"{reserved:.4f}",
                "-E",
                "lazy_itable_init=1,root_owner=0:0",
                str(self.image),
            ],
            "formatting the trial's filesystem",
        )
        options = "loop,nosuid,nodev,noatime,noinit_itable"
        if self.grader_gid is not None:
            options += f",resgid={self.grader_gid}"
        _run(
            [_tool("mount"), "-t", "ext4", "-o", options, str(self.image), str(self.mount_point)],
            "mounting the trial's filesystem",
        )
        self.mounted = True
        (self.mount_point / "lost+found").rmdir()
        return self.mount_point

    def usage(self) -> Usage:
        """Bytes used and the limit, as an unprivileged writer sees them."""
        info = os.statvfs(self.mount_point)
        limit = (info.f_blocks - (info.f_bfree - info.f_bavail)) * info.f_frsize
        used = (info.f_blocks - info.f_bfree) * info.f_frsize
        return Usage(used_bytes=used, limit_bytes=limit)

    def destroy(self) -> None:
        """Unmount (lazily if busy) and delete the image. Idempotent."""
        if self.mounted or os.path.ismount(self.mount_point):
            unmount(self.mount_point)
            self.mounted = False
        self.image.unlink(missing_ok=True)


def unmount(path: Path) -> None:
    """Unmount ``path``; a busy mount is detached lazily (it goes when its last user does).

    Raises:
        SandboxError: neither worked.
    """
    for flags in ([], ["--lazy"]):
        done = run_tool([_tool("umount"), *flags, str(path)])
        if done.returncode == 0 or not os.path.ismount(path):
            return
        time.sleep(0.05)
    raise SandboxError(f"cannot unmount the trial filesystem {path}: {failure_detail(done)}")


def _mountinfo() -> list[tuple[str, Path]]:
    """(major:minor, mount point) of every mount of this process's namespace."""
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4:
                    found.append((fields[2], Path(fields[4].replace("\\040", " "))))
    except OSError:
        return []
    return found


def mounts_under(top: Path) -> list[Path]:
    """Mount points at or below ``top``, deepest first (from /proc/self/mountinfo)."""
    prefix = str(top.resolve()).rstrip("/") + "/"
    found = {point for _dev, point in _mountinfo() if str(point).startswith(prefix)}
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _backing_file(device: str) -> str | None:
    """The image file of loop device ``major:minor``, None for any other device."""
    try:
        with open(f"/sys/dev/block/{device}/loop/backing_file", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def binds_of(top: Path) -> list[Path]:
    """Mounts outside ``top`` of a trial filesystem whose image is under ``top``.

    A container's root layer is bound from its trial's filesystem over the engine's layer
    dir (:mod:`sandbox.docker.rootlayer`); a harness killed mid-trial leaves that bind.
    """
    prefix = str(top.resolve()).rstrip("/") + "/"
    found = []
    for device, point in _mountinfo():
        if str(point).startswith(prefix) or not device.startswith("7:"):
            continue  # the trial filesystems' own mount points; not a loop device
        image = _backing_file(device)
        if image is not None and image.startswith(prefix):
            found.append(point)
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def release_leftovers(top: Path) -> list[str]:
    """Unmount every trial filesystem a dead run left under ``top``; return what was.

    Binds of those filesystems elsewhere (a container's root layer) go first. The loop
    devices detach themselves when their last mount goes (autoclear); the caller removes
    the files afterwards.
    """
    released = []
    for point in [*binds_of(top), *mounts_under(top)]:
        unmount(point)
        released.append(str(point))
    return released


def reserve(budget: StorageBudget | None, declared_mb: int | None) -> tuple[int, int]:
    """Promise a trial its filesystem: (its size limit, MB promised, to give back later).

    A declared ``storage_mb`` is what the trial gets (waiting for room if need be); with
    none declared, the default, or less on a disk short of room (at least
    :data:`MIN_DEFAULT_STORAGE_MB`).
    """
    size = declared_mb or DEFAULT_STORAGE_MB
    if budget is None:
        return size, 0
    floor = None if declared_mb else MIN_DEFAULT_STORAGE_MB + RESERVE_MB
    promised = budget.acquire(size + RESERVE_MB, at_least_mb=floor)
    return promised - RESERVE_MB, promised

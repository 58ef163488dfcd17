"""A trial container's own dir in the engine's data root, moved onto the trial's filesystem.

The engine keeps a dir per container (``<data root>/containers/<id>``): its config, its
log, and the files it bind-mounts into the container as ``/etc/hosts``, ``/etc/hostname``
and ``/etc/resolv.conf``. Those binds are read-write whenever the container's root is
(``--read-only`` unset: :mod:`sandbox.docker.rootlayer`), so a root agent could write them
past ``storage_mb`` onto the engine's own disk (3 x 200 MB did, with ``storage_mb = 256``).
After ``docker create`` and before ``docker start`` (which writes those files),
:meth:`ContainerFiles.attach` copies the dir (``cp -a``) to :data:`FILES_DIR` on the
trial's filesystem and bind-mounts the copy over it, as the root layer is: what the engine
and the agent write there lands on the trial's capped filesystem and counts against its
``storage_mb`` (the trial then records ``storage_full``); the files keep working for every
task that reads them, and the engine still rewrites them when the trial's network changes.

Removal (:meth:`ContainerFiles.detach`) comes first, before ``docker rm``: a lazy unmount,
after which the engine removes its own original dir. A harness killed mid-trial leaves the
bind: ``docker rm`` of the labelled container unmounts it (the engine unmounts a busy dir
it removes), and :func:`sandbox.storage.release_leftovers` unmounts any bind of a trial
filesystem of the run's temp dir.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from sandbox.errors import EnvironmentStartError
from sandbox.host_tools import failure_detail, run_tool
from sandbox.storage import unmount

#: Where the copy lives on the trial's filesystem (root-only; never mounted in).
FILES_DIR = "engine-files"
_MS_BIND = 4096


def container_dir(attrs: dict[str, Any]) -> Path | None:
    """The engine's dir of a created container, from ``docker inspect`` (overlay2 only).

    The data root is the one holding the overlay2 layers (``<root>/overlay2/<id>/diff``).
    """
    driver = attrs.get("GraphDriver") or {}
    upper = (driver.get("Data") or {}).get("UpperDir")
    ident = attrs.get("Id")
    if driver.get("Name") != "overlay2" or not upper or not ident:
        return None
    return Path(upper).parents[2] / "containers" / str(ident)


class ContainerFiles:
    """One container's engine dir on its trial's filesystem.

    Args:
        path: The engine's dir of the container (:func:`container_dir`).
        fs: The trial filesystem's mount point.
    """

    def __init__(self, path: Path, fs: Path) -> None:
        self.path = path
        self.copy = fs / FILES_DIR
        self.mounted = False

    def attach(self) -> None:
        """Copy the (unstarted) container's dir onto the trial fs and bind it over.

        Raises:
            EnvironmentStartError: the dir is not on this host, or the copy or the bind
                failed (the container must then not start).
        """
        if not (self.path / "config.v2.json").is_file():
            raise EnvironmentStartError(
                f"the engine's dir of the container, {self.path}, is not visible on this "
                "host: run the harness on the engine's host, as root, in its mount namespace"
            )
        done = run_tool(["cp", "-a", "--", str(self.path), str(self.copy)])
        if done.returncode != 0:
            raise EnvironmentStartError(
                f"cannot copy the container's engine dir onto the trial filesystem: "
                f"{failure_detail(done)}"
            )
        os.chmod(self.copy, 0o700)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(str(self.copy).encode(), str(self.path).encode(), None, _MS_BIND, None):
            errno = ctypes.get_errno()
            raise EnvironmentStartError(
                f"cannot bind the trial's copy over {self.path}: {os.strerror(errno)}"
            )
        self.mounted = True

    def detach(self) -> None:
        """Unmount the bind (lazily if busy); idempotent. The copy goes with the trial fs."""
        if self.mounted or os.path.ismount(self.path) and self._ours():
            unmount(self.path)
        self.mounted = False

    def _ours(self) -> bool:
        """The mount at the engine's dir is this copy (same device as the trial fs)."""
        try:
            return os.stat(self.path).st_dev == os.stat(self.copy).st_dev
        except OSError:
            return False


__all__ = ["FILES_DIR", "ContainerFiles", "container_dir"]

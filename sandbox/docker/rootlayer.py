"""A trial container's writable image root, moved onto the trial's own capped filesystem.

The engine gives every container a writable overlay layer in its own data root
(``/var/lib/docker/overlay2/<id>``: ``diff`` is the upper dir, ``work`` overlay's work dir,
``link`` and ``lower`` the driver's bookkeeping). Nothing caps it here: overlay2's
``--storage-opt size=`` needs an XFS data root with project quotas. So, after ``docker
create`` and before ``docker start`` (the overlay is mounted at start), :meth:`RootLayer.attach`
copies that still-empty layer dir (``cp -a``: owners, modes and xattrs) into
:data:`LAYER_DIR` on the trial's filesystem (:class:`sandbox.storage.TrialStorage`, ext4,
``nosuid,nodev``, sized by ``storage_mb``) and bind-mounts the copy over the engine's
layer dir. The engine then assembles the container's root with its upper dir on the
trial's filesystem: every write to ``/`` lands there and ends in ``ENOSPC`` at the cap,
and the engine's own disk is untouched.

Removal (:meth:`RootLayer.detach`) comes first, before ``docker rm``: a lazy unmount of the
bind (a running overlay keeps its own references to the upper dir, so the container is
unaffected), after which the engine removes only its own small original layer dir, never
the agent's tree. A harness killed mid-trial leaves the bind; ``docker rm`` of the
labelled container unmounts it (the engine unmounts a busy dir it removes), and
:func:`sandbox.storage.release_leftovers` unmounts any bind whose loop device's image lies
in the run's temp dir.

The same holds under runc and gVisor (``runsc``): both get the root the engine assembles.
Where it cannot be done (the harness is not root, a remote engine, a storage driver other
than overlay2) :func:`root_layer_problem` says why; the root is then still writable, capped
by the engine or by the run's watcher of layer sizes (:mod:`sandbox.docker.rootcap`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.docker.sdk import call
from sandbox.errors import EnvironmentStartError
from sandbox.host_tools import failure_detail, run_tool
from sandbox.storage import unmount

logger = logging.getLogger(__name__)

#: Where the layer copy lives on the trial's filesystem (root-only; never mounted in).
LAYER_DIR = "root-layer"
_MS_BIND = 4096


@dataclass(frozen=True)
class LayerPaths:
    """Where the engine keeps a container's layers (``GraphDriver.Data`` of overlay2).

    Attributes:
        layer: The container's own layer dir (parent of its upper dir).
        lowers: The image's layers, topmost first (their ``diff`` dirs).
    """

    layer: Path
    lowers: tuple[Path, ...]


def layer_paths(attrs: dict[str, Any]) -> LayerPaths | None:
    """The container's layer dirs from ``docker inspect``, or None for another driver."""
    driver = attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    upper = data.get("UpperDir")
    if driver.get("Name") != "overlay2" or not upper:
        return None
    lowers = tuple(Path(p) for p in str(data.get("LowerDir") or "").split(":") if p)
    return LayerPaths(Path(upper).parent, lowers)


def root_layer_problem(*, host_storage: bool, driver: str | None) -> str | None:
    """Why a trial's root cannot be writable and capped here, or None when it can.

    Args:
        host_storage: Trials get loop-mounted filesystems on this host (root, local engine).
        driver: The engine's storage driver (``docker info``'s ``Driver``).
    """
    if not host_storage:
        return (
            "the trial's storage cannot be capped on this host (the harness is not root, or "
            "the engine is remote)"
        )
    if driver != "overlay2":
        return f"the engine's storage driver is {driver!r}, not overlay2"
    return None


_lock = threading.Lock()
_drivers: dict[str, str] = {}
_warned: set[str] = set()


def storage_driver(client: Any) -> str:
    """The engine's storage driver (``docker info``), asked once per engine.

    Raises:
        EngineError: The engine failed ``docker info`` (mapped at the SDK's seam).
    """
    key = str(getattr(client.api, "base_url", ""))
    with _lock:
        known = _drivers.get(key)
    if known is None:
        known = str(call(client.info).get("Driver") or "")
        with _lock:
            _drivers[key] = known
    return known


def warn_soft_root(run: str, problem: str, refusal: str) -> bool:
    """Say once per run that its trials' image roots are capped softly, and why.

    Args:
        run: The run's label.
        problem: Why the layer cannot be moved onto a trial filesystem here.
        refusal: Why the engine refused to cap a layer itself (``storage_opt size``).

    Returns:
        Whether this call said it (the first for ``run``).
    """
    with _lock:
        if run in _warned:
            return False
        _warned.add(run)
    logger.warning(
        "the image root of this run's docker trials is capped by storage_mb softly (its size "
        "polled, the writer stopped at the cap; no ENOSPC): %s, and the engine refused "
        "--storage-opt size (%s). Run the harness as root on the engine's host with "
        "overlay2, or give the engine an XFS data root mounted with pquota, for a hard cap",
        problem,
        refusal,
    )
    return True


def _bind(source: Path, target: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(str(source).encode(), str(target).encode(), None, _MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise EnvironmentStartError(
            f"cannot bind the trial's root layer over {target}: {os.strerror(errno)}"
        )


class RootLayer:
    """One container's writable layer on its trial's filesystem.

    Args:
        paths: The container's layer dirs (:func:`layer_paths`).
        fs: The trial filesystem's mount point.
    """

    def __init__(self, paths: LayerPaths, fs: Path) -> None:
        self.paths = paths
        self.copy = fs / LAYER_DIR
        self.mounted = False

    @property
    def upper(self) -> Path:
        """The upper dir as the harness reads it (on the trial's filesystem)."""
        return self.copy / "diff"

    def attach(self) -> None:
        """Copy the container's (unstarted) layer dir onto the trial fs and bind it over.

        Raises:
            EnvironmentStartError: the layer dir is not on this host, or the copy or the
                bind failed (the container must then not start).
        """
        layer = self.paths.layer
        if not (layer / "diff").is_dir() or not (layer / "link").is_file():
            raise EnvironmentStartError(
                f"the engine's layer dir {layer} is not visible on this host: run the harness "
                "on the engine's host, as root, in its mount namespace"
            )
        done = run_tool(["cp", "-a", "--", str(layer), str(self.copy)])
        if done.returncode != 0:
            raise EnvironmentStartError(
                f"cannot copy the container's layer onto the trial filesystem: "
                f"{failure_detail(done)}"
            )
        os.chmod(self.copy, 0o700)
        _bind(self.copy, layer)
        self.mounted = True

    def detach(self) -> None:
        """Unmount the bind (lazily if busy); idempotent. The copy goes with the trial fs."""
        if self.mounted or os.path.ismount(self.paths.layer) and self._ours():
            unmount(self.paths.layer)
        self.mounted = False

    def _ours(self) -> bool:
        """The mount at the layer dir is this copy (same device as the trial fs)."""
        try:
            return os.stat(self.paths.layer).st_dev == os.stat(self.copy).st_dev
        except OSError:
            return False


__all__ = [
    "LAYER_DIR",
    "LayerPaths",
    "RootLayer",
    "layer_paths",
    "root_layer_problem",
    "storage_driver",
    "warn_soft_root",
]

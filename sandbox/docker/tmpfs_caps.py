"""Whether the engine takes an inode cap (``nr_inodes``) on a container's tmpfs mounts.

Every tmpfs of a trial is capped in bytes and in inodes (:mod:`sandbox.docker.container`):
an empty file still costs the container's memory. Docker passes the option to the kernel;
Debian's podman 4.3 refuses it (``unknown mount option "nr_inodes=…"``) and would refuse
every trial. Docker's engine is taken at its word; any other engine (podman) is asked once
per process with a probe container, created, started and removed at once. Where the option
is refused, the tmpfs mounts keep their byte caps only, and the record says so.
"""

from __future__ import annotations

import threading
from typing import Any

from sandbox.docker.probe import refusal
from sandbox.docker.sdk import call

PROBE_KIND = "tmpfs-probe"
_lock = threading.Lock()
_docker: dict[str, bool] = {}


def is_docker(version: dict[str, Any]) -> bool:
    """Whether the engine's ``version`` answer is Docker's own (its ``Engine`` component)."""
    components = version.get("Components") or []
    return any(str(c.get("Name")) == "Engine" for c in components if isinstance(c, dict))


def inode_caps(client: Any, image: str) -> bool:
    """Whether tmpfs mounts with ``nr_inodes`` start on this engine (asked once).

    Raises:
        EngineError: the engine failed otherwise (unreachable, image missing).
    """
    key = str(getattr(client.api, "base_url", ""))
    with _lock:
        if key in _docker:
            docker = _docker[key]
        else:
            docker = _docker[key] = is_docker(call(client.version))
    if docker:
        return True
    options = {"tmpfs": {"/probe": "size=1m,nr_inodes=64"}}
    return refusal(client, image, kind=PROBE_KIND, start=True, **options) is None


__all__ = ["PROBE_KIND", "inode_caps", "is_docker"]

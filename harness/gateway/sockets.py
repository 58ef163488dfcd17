"""Where trials' gateway sockets live: a root-only dir per gateway, one dir per trial.

As root the dirs are under ``/run/harness/gateway/run-<pid>-…`` (mode 0700), or under
``$HARNESS_GATEWAY_DIR`` when set (the harness in a container that drives the host's Docker
engine: the socket's path must be the same on both sides, docs/ci.md): the dropped agent
user can never open a socket there, only the supervisor relays to it. A dir whose harness
died (``kill -9``) is removed by the next gateway and by ``harness sandbox cleanup``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SOCKET_ROOT = Path("/run/harness/gateway")
"""Root-owned parent of the per-gateway socket dirs when the harness runs as root."""
SOCKET_ROOT_ENV = "HARNESS_GATEWAY_DIR"
"""Names another parent for them (an absolute path; created root-only)."""


def socket_root() -> Path:
    """Where this process puts its gateway socket dirs when it runs as root."""
    given = os.environ.get(SOCKET_ROOT_ENV, "")
    return Path(given) if given.startswith("/") else SOCKET_ROOT


SOCKET_NAME = "gw.sock"


def remove_stale_socket_dirs(root: Path | None = None) -> list[Path]:
    """Remove socket dirs of gateways whose harness process is gone (killed with -9).

    Each gateway's dir is named ``run-<pid>-…``; a dir whose pid is not alive is stale.
    """
    removed: list[Path] = []
    root = root if root is not None else socket_root()
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        parts = entry.name.split("-")
        if len(parts) < 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def make_socket_root() -> Path:
    """A new private dir for one gateway's trial sockets (stale ones removed first)."""
    if os.geteuid() == 0:
        root = socket_root()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
        remove_stale_socket_dirs(root)
        return Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=root))
    return Path(tempfile.mkdtemp(prefix=f"harness-gw-{os.getpid()}-"))


def make_trial_socket(root: Path) -> Path:
    """The socket path of a new trial: in its own 0700 dir under ``root``."""
    trial_dir = Path(tempfile.mkdtemp(prefix="t-", dir=root))
    os.chmod(trial_dir, 0o700)
    return trial_dir / SOCKET_NAME


__all__ = [
    "SOCKET_NAME",
    "SOCKET_ROOT",
    "SOCKET_ROOT_ENV",
    "make_socket_root",
    "make_trial_socket",
    "remove_stale_socket_dirs",
    "socket_root",
]

"""The suite in parallel workers (pytest-xdist): what each worker must keep to itself.

``scripts/test`` runs the suite in a few worker processes at once. Sandboxes of two workers
never share a uid: the local sandbox already locks each uid host-wide, but a test's own
checks ("no process of my uids is left") look at a whole range, so every worker shifts the
ranges the tests name by :data:`UID_OFFSET`. Tests that need the machine to themselves (a
private engine, a full disk) are marked ``serial`` and run after the parallel part, alone.
"""

from __future__ import annotations

import os

#: ``gw0``, ``gw1``, ... under pytest-xdist; unset in a plain pytest run (worker 0).
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
#: How far each worker's uid ranges are from the next one's (more than any range a test uses).
UID_STRIDE = 10_000
UID_OFFSET = WORKER * UID_STRIDE


def uid_base(base: int) -> int:
    """``base``, a uid range's start as a test names it, moved to this worker's own range."""
    return base + UID_OFFSET


__all__ = ["UID_OFFSET", "UID_STRIDE", "WORKER", "uid_base"]

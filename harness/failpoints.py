"""Fault injection for the fault suite: the harness kills itself at a named point.

``HARNESS_KILL_AT=POINT[,POINT...]`` in the environment makes the harness send itself
SIGKILL the first time it reaches one of those points, exactly as a ``kill -9`` from
outside would land there; without the variable a point costs one set lookup. The points:

- ``phase:<name>``: a trial enters a phase (``prepare``, ``reset``, ``execute``, ``collect``,
  ``grade``, ``cleanup``...);
- ``replace:<file name>``: an atomic write of that file (``trials.jsonl`` when compacting,
  ``summary.json``, ``status.json``, ``config.toml``) is written and synced, not yet renamed;
- ``evidence``: a trial's evidence is partly out (its logs and its workspace's files, not
  the workspace's manifest).

``tests/faults/`` uses them for the moments a signal from outside cannot hit reliably.
"""

from __future__ import annotations

import os
import signal

ENV = "HARNESS_KILL_AT"
"""The environment variable naming the points."""

_POINTS = frozenset(point for point in os.environ.get(ENV, "").split(",") if point)


def kill_point(name: str) -> None:
    """SIGKILL this process if ``name`` is one of the points ``HARNESS_KILL_AT`` names."""
    if name in _POINTS:
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["ENV", "kill_point"]

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

``HARNESS_FAIL_AT=POINT[,POINT...]`` makes the harness raise :class:`InjectedFailure` each
time it reaches one of those points (the process lives on). The point:

- ``record``: writing an attempt's record to ``trials.jsonl`` fails (as a record that cannot
  be serialized would); the trial is recorded by its fallback ``internal_error`` record.
"""

from __future__ import annotations

import os
import signal

from sandbox.errors import HarnessError

ENV = "HARNESS_KILL_AT"
"""The environment variable naming the points."""
FAIL_ENV = "HARNESS_FAIL_AT"
"""The environment variable naming the points that raise :class:`InjectedFailure`."""

_POINTS = frozenset(point for point in os.environ.get(ENV, "").split(",") if point)
_FAIL_POINTS = frozenset(point for point in os.environ.get(FAIL_ENV, "").split(",") if point)


class InjectedFailure(HarnessError):
    """Raised at a point ``HARNESS_FAIL_AT`` names (the fault suite's doing, never real)."""


def kill_point(name: str) -> None:
    """SIGKILL this process if ``name`` is one of the points ``HARNESS_KILL_AT`` names."""
    if name in _POINTS:
        os.kill(os.getpid(), signal.SIGKILL)


def fail_point(name: str) -> None:
    """Raise :class:`InjectedFailure` if ``name`` is one of the points ``HARNESS_FAIL_AT`` names.

    Raises:
        InjectedFailure: It is.
    """
    if name in _FAIL_POINTS:
        raise InjectedFailure(f"{FAIL_ENV}={name}: injected failure at {name!r}")


__all__ = ["ENV", "FAIL_ENV", "InjectedFailure", "fail_point", "kill_point"]

"""A run's live state, and ``status.json``: what another process sees of a running run.

This module moved to :mod:`harness.records.status`; this path re-exports its public names.
"""

from harness.records.status import (
    STATUS_FILENAME,
    RunningTrial,
    RunState,
    RunStateName,
    StatusWriter,
    read_status,
)

__all__ = [
    "STATUS_FILENAME",
    "RunState",
    "RunStateName",
    "RunningTrial",
    "StatusWriter",
    "read_status",
]

"""Export a run's trials to interchange formats (ATIF trajectories; see :mod:`.atif`)."""

from __future__ import annotations

from harness.export.atif import (
    SUPPORTED_FORMATS,
    ExportError,
    UnknownFormatError,
    export_run,
    trajectory_for_trial,
)

__all__ = [
    "SUPPORTED_FORMATS",
    "ExportError",
    "UnknownFormatError",
    "export_run",
    "trajectory_for_trial",
]

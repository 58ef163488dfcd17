"""Moved to :mod:`harness.admin` (``doctor``, ``images``, ``sandbox cleanup``); re-exported here."""

from harness.admin import (
    DEFAULT_IMAGE,
    TEMP_PATTERNS,
    CleanupReport,
    DoctorReport,
    ImageResult,
    ImageRow,
    build_images,
    cleanup,
    doctor,
    engine,
    list_images,
    prune_images,
)

__all__ = [
    "DEFAULT_IMAGE",
    "TEMP_PATTERNS",
    "CleanupReport",
    "DoctorReport",
    "ImageResult",
    "ImageRow",
    "build_images",
    "cleanup",
    "doctor",
    "engine",
    "list_images",
    "prune_images",
]

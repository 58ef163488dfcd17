"""Moved to :mod:`sandbox.inside.evidence` (the in-sandbox folder); re-exported here."""

from sandbox.inside.evidence import (
    BLOCK,
    DEFAULT_LIMITS,
    FD_WINDOW,
    SPECIAL_KINDS,
    EvidenceEvent,
    Limits,
    copy_file,
    copy_path,
    copy_tree,
    read_fd,
    read_file,
    walk_tree,
)

__all__ = [
    "BLOCK",
    "DEFAULT_LIMITS",
    "FD_WINDOW",
    "SPECIAL_KINDS",
    "EvidenceEvent",
    "Limits",
    "copy_file",
    "copy_path",
    "copy_tree",
    "read_fd",
    "read_file",
    "walk_tree",
]

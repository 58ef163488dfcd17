"""Moved to :mod:`sandbox.inside.launch` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/launch.py``; this module only keeps
the old import path.
"""

from sandbox.inside.launch import (
    DRAIN_GRACE_SEC,
    ENTRY_MODULES,
    PROTECTED,
    READ_CHUNK,
    START_TIMEOUT_SEC,
    Capture,
    Launch,
    close_all_but,
    drain,
    join_cgroups,
    load_entry,
    run_until,
)

__all__ = [
    "Capture",
    "DRAIN_GRACE_SEC",
    "ENTRY_MODULES",
    "Launch",
    "PROTECTED",
    "READ_CHUNK",
    "START_TIMEOUT_SEC",
    "close_all_but",
    "drain",
    "join_cgroups",
    "load_entry",
    "run_until",
]

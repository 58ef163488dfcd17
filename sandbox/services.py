"""Moved to :mod:`sandbox.inside.services` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/services.py``; this module only keeps
the old import path.
"""

from sandbox.inside.services import (
    start_service,
)

__all__ = [
    "start_service",
]

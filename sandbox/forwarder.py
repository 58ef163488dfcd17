"""Moved to :mod:`sandbox.inside.forwarder` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/forwarder.py``; this module only keeps
the old import path.
"""

from sandbox.inside.forwarder import (
    Forwarder,
    select_fds,
    start_forwarder,
)

__all__ = [
    "Forwarder",
    "select_fds",
    "start_forwarder",
]

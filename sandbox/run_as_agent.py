"""Moved to :mod:`sandbox.inside.run_as_agent` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/run_as_agent.py``; this module only keeps
the old import path.
"""

from sandbox.inside.run_as_agent import (
    EXIT_CANNOT_RUN,
    EXIT_TIMEOUT,
    SOCKET_ENV,
    call,
    exit_status,
    main,
)

__all__ = [
    "EXIT_CANNOT_RUN",
    "EXIT_TIMEOUT",
    "SOCKET_ENV",
    "call",
    "exit_status",
    "main",
]

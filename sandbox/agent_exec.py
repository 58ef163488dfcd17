"""Moved to :mod:`sandbox.inside.agent_exec` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/agent_exec.py``; this module only keeps
the old import path.
"""

from sandbox.inside.agent_exec import (
    DEFAULT_MAX_OUTPUT,
    MAX_REQUEST_BYTES,
    AgentExecServer,
)

__all__ = [
    "AgentExecServer",
    "DEFAULT_MAX_OUTPUT",
    "MAX_REQUEST_BYTES",
]

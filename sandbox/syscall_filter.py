"""Moved to :mod:`sandbox.inside.syscall_filter` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/syscall_filter.py``; this module only keeps
the old import path.
"""

from sandbox.inside.syscall_filter import (
    CLONE_NEWUSER,
    DENIED,
    PR_SET_SECCOMP,
    PTRACE_ATTACH,
    PTRACE_SEIZE,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    SECCOMP_MODE_FILTER,
    X32_SYSCALL_BIT,
    FilterUnavailable,
    build,
    install,
)

__all__ = [
    "CLONE_NEWUSER",
    "DENIED",
    "FilterUnavailable",
    "PR_SET_SECCOMP",
    "PTRACE_ATTACH",
    "PTRACE_SEIZE",
    "RET_ALLOW",
    "RET_ERRNO",
    "RET_KILL_PROCESS",
    "SECCOMP_MODE_FILTER",
    "X32_SYSCALL_BIT",
    "build",
    "install",
]

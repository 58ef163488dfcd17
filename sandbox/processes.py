"""Moved to :mod:`sandbox.inside.processes` (the in-sandbox folder); re-exported here."""

from sandbox.inside.processes import (
    Reaper,
    cmdline,
    descendants,
    describe,
    kill_all,
    live_entries,
    pid_ns,
    proc_entries,
    stat_entry,
    uid_processes,
)

__all__ = [
    "Reaper",
    "cmdline",
    "describe",
    "descendants",
    "kill_all",
    "live_entries",
    "pid_ns",
    "proc_entries",
    "stat_entry",
    "uid_processes",
]

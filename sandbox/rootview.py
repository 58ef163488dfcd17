"""Moved to :mod:`sandbox.inside.rootview` (the in-sandbox folder); re-exported here.

The file shipped into a sandbox is ``sandbox/inside/rootview.py``; this module only keeps
the old import path.
"""

from sandbox.inside.rootview import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    DEVICES,
    IFF_UP,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    SIOCGIFFLAGS,
    SIOCSIFFLAGS,
    SYSTEM_PATHS,
    bring_up_loopback,
    enter,
    make_mounts_private,
    mount,
    unshare,
)

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUTS",
    "DEVICES",
    "IFF_UP",
    "MNT_DETACH",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "SIOCGIFFLAGS",
    "SIOCSIFFLAGS",
    "SYSTEM_PATHS",
    "bring_up_loopback",
    "enter",
    "make_mounts_private",
    "mount",
    "unshare",
]

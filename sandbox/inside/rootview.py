"""The local sandbox's root view: a fresh root that shows a trial only what it needs.

Stdlib-only (Python >= 3.9). Built by the namespace's pid 1, as root, in a private mount
namespace, the way bubblewrap builds one: an empty tmpfs becomes ``/``; the host's system
dirs (``/usr``, ``/etc``, ``/bin`` ...) are bound read-only and ``nosuid``; ``/proc`` is a new
procfs of the trial's own pid namespace (no host process is visible), ``/sys`` a read-only
sysfs of its network namespace, ``/dev`` a small tmpfs with the harmless devices and a
private devpts; ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are the trial's own dirs; then the
request's binds (the trial's workspace, home, tests ...), and ``pivot_root`` detaches the
host's root. Nothing else on the host — other trials, task sets, the run dir, /root, /home —
exists in the view.

A view spec (``req["view"]``)::

    {"staging": "/host/dir",                    # empty dir the new root is built on
     "binds": [{"src": "/host/path", "dst": "/trial/workspace", "rw": true}, ...],
     "hostname": "sandbox"}
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import socket
import struct
from typing import Any, Dict, List

try:  # in the harness: the sandbox.inside package; inside a sandbox: a sibling on sys.path
    from sandbox.inside.confine import LIBC, check
except ImportError:  # pragma: no cover - inside a sandbox
    from confine import LIBC, check  # type: ignore[no-redef,import-not-found]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

#: Host dirs every view shows read-only (those that exist; symlinks are recreated).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Device nodes bound into the view's /dev.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def unshare(flags: int) -> None:
    """Leave the namespaces named by the CLONE_* ``flags`` for new ones."""
    check(LIBC.unshare(ctypes.c_int(flags)), "unshare(0x%x)" % flags)


def mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    """Mount ``source`` on ``target`` (the syscall); empty strings become NULL."""
    check(
        LIBC.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        "mount %s on %s" % (source or fstype, target),
    )


def make_mounts_private() -> None:
    """Stop mount events propagating between this namespace and the host."""
    mount("", "/", "", MS_REC | MS_PRIVATE)


def bring_up_loopback() -> None:
    """Bring ``lo`` up in a fresh network namespace (it starts down)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
    finally:
        sock.close()


def _bind(src: str, dst: str, *, rw: bool, flags: int = 0) -> None:
    mount(src, dst, "", MS_BIND | MS_REC)
    extra = 0 if rw else MS_RDONLY
    mount("", dst, "", MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | extra | flags)


def _make_target(path: str, like: str) -> None:
    """Create the mount point ``path`` as a dir or an empty file, like ``like``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    elif not os.path.lexists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _system(root: str) -> None:
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            os.makedirs(root + path)
            _bind(path, root + path, rw=False)


def _dev(root: str) -> None:
    dev = root + "/dev"
    os.makedirs(dev)
    mount("harness-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k")
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            _make_target(dev + "/" + name, "/dev/" + name)
            mount("/dev/" + name, dev + "/" + name, "", MS_BIND)
    os.makedirs(dev + "/pts")
    mount(
        "devpts",
        dev + "/pts",
        "devpts",
        MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )
    os.symlink("pts/ptmx", dev + "/ptmx")
    os.symlink("/proc/self/fd", dev + "/fd")
    for num, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink("/proc/self/fd/%d" % num, dev + "/" + name)
    os.makedirs(dev + "/shm")


def _pivot(root: str) -> None:
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError("pivot_root: unknown syscall number on %s" % platform.machine())
    os.chdir(root)
    check(LIBC.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    # The old root is stacked under the new one at "/": detach it.
    check(LIBC.umount2(b".", ctypes.c_int(MNT_DETACH)), "detaching the host root")
    os.chdir("/")


def enter(view: Dict[str, Any]) -> None:
    """Build the view described by ``view`` and make it this process's root.

    Must run as root in a private mount namespace (after :func:`make_mounts_private`) and,
    for ``/proc`` to show only the trial, as pid 1 of a new pid namespace.
    """
    root = str(view["staging"])
    os.umask(0o022)  # mount points must be traversable by the trial's users
    mount("harness-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
    _system(root)
    os.makedirs(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/sys")
    mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _dev(root)
    os.makedirs(root + "/run")
    mount("harness-run", root + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
    binds: List[Dict[str, Any]] = list(view.get("binds") or [])
    for bind in binds:
        src, dst = str(bind["src"]), root + str(bind["dst"])
        _make_target(dst, src)
        _bind(src, dst, rw=bool(bind.get("rw")))
    _pivot(root)
    # The view's top is fixed now: nothing may create entries in it.
    mount("", "/", "", MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)

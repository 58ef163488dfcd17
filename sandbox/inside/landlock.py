"""The Landlock wall around a root agent's processes (stdlib, Python >= 3.9).

A root agent whose listening processes are kept through grading (``agent_services =
keep``) runs, with every process of its phase, inside a Landlock domain its process
enters right before ``execve`` (:func:`wall`, from :func:`confine.confine_root`). Root's
capabilities (``DAC_OVERRIDE``, ``KILL``, ...) do not bypass it:

- **Files**: every filesystem right the kernel's ABI knows is handled; full access is
  granted beneath each entry of ``/`` that exists when the phase starts, except the
  ``deny`` paths the harness names (its grader's and its own dirs), and beneath each
  ``grant`` path (the agent's dirs inside denied ones). A symbolic link is never granted
  (what it leads to is granted or not as itself). An entry of ``/`` that holds a
  denied path below it is split: each of its other entries is granted instead, and
  nothing new can be made directly in it (nor directly in ``/``).
- **Scopes** (ABI >= 6): no signal to a process outside the domain (the supervisor, the
  verifier, the image's services) and no connection to an abstract unix socket made
  outside it. Landlock's ptrace hook already keeps ``/proc/<pid>/{mem,root,environ,fd}``
  of processes outside the domain from it.

Landlock cannot be had (gVisor answers ``ENOSYS``; a kernel before 6.12 has no scopes; a
seccomp profile may deny the calls): :func:`wall` raises :class:`LandlockUnavailable`, and
the phase never runs unwalled.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
from typing import Any, Dict, List, Set

#: Syscall numbers (the same on x86_64 and aarch64, the machines the seccomp filter knows).
_SYSCALLS = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}
_MACHINES = ("x86_64", "amd64", "aarch64", "arm64")

LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
#: The oldest ABI with the scopes the wall needs (signals, abstract unix sockets).
MIN_ABI = 6

# Filesystem rights, by the ABI that introduced them.
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
#: Rights that apply to a file (the rest apply only beneath a dir).
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | _TRUNCATE | _IOCTL_DEV

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


class LandlockUnavailable(OSError):
    """This kernel (or runtime, or seccomp profile) gives no Landlock domain with scopes."""


def _call(name: str, *args: Any) -> int:
    ret = int(_LIBC.syscall(ctypes.c_long(_SYSCALLS[name]), *args))
    if ret < 0:
        code = ctypes.get_errno()
        raise OSError(code, "landlock_%s: %s" % (name, os.strerror(code)))
    return ret


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (or it is disabled)."""
    if platform.machine().lower() not in _MACHINES:
        return 0
    try:
        return _call("create_ruleset", None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    except OSError:
        return 0


def handled_fs(version: int) -> int:
    """Every filesystem right ABI ``version`` knows."""
    rights = _FS_ABI1
    if version >= 2:
        rights |= _REFER
    if version >= 3:
        rights |= _TRUNCATE
    if version >= 5:
        rights |= _IOCTL_DEV
    return rights


def _norm(path: str) -> str:
    return "/" + os.path.normpath(path).strip("/") if path.strip("/") else "/"


def rule_roots(deny: List[str], grant: List[str], root: str = "/") -> List[str]:
    """The paths whose trees are granted: the entries of ``root``, split around ``deny``.

    A denied path is never granted, nor anything beneath it but a ``grant`` path; an entry
    with a denied path below it gives way to its own entries, recursively.
    """
    denied = {_norm(p) for p in deny}
    roots: List[str] = []

    def visit(path: str) -> None:
        if path in denied or os.path.islink(path):
            return  # a link is granted as what it leads to, never through itself
        if not any(d.startswith(path.rstrip("/") + "/") for d in denied):
            roots.append(path)
            return
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            visit(os.path.join(path, name))

    try:
        top = sorted(os.listdir(root))
    except OSError:
        top = []
    for name in top:
        visit(os.path.join(root, name))
    seen: Set[str] = set(roots)
    for path in grant:
        path = _norm(path)
        if path not in seen and os.path.lexists(path) and not os.path.islink(path):
            roots.append(path)
            seen.add(path)
    return roots


def wall(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Enter a Landlock domain as ``spec`` {deny, grant} says; return what was enforced.

    Sets ``no_new_privs`` first (Landlock needs it without ``CAP_SYS_ADMIN``).

    Raises:
        LandlockUnavailable: no Landlock, or an ABI without scopes.
        OSError: a rule could not be added or the domain entered.
    """
    version = abi()
    if version < MIN_ABI:
        raise LandlockUnavailable(
            errno.ENOSYS,
            "Landlock ABI %d here (%s), the wall needs >= %d (signal and abstract-socket "
            "scopes: Linux 6.12)" % (version, platform.release(), MIN_ABI),
        )
    fs = handled_fs(version)
    attr = struct.pack("=QQQ", fs, 0, SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _call("create_ruleset", buf, ctypes.c_size_t(len(attr)), 0)
    granted: List[str] = []
    try:
        for path in rule_roots(list(spec.get("deny") or []), list(spec.get("grant") or [])):
            try:
                fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # gone since the listing: nothing to grant
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    continue  # made a link since the listing: never followed
                rights = fs if stat.S_ISDIR(mode) else fs & _FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
                _call("add_rule", ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0)
            finally:
                os.close(fd)
            granted.append(path)
        args = [ctypes.c_ulong(arg) for arg in (1, 0, 0, 0)]
        if _LIBC.prctl(38, *args) != 0:  # PR_SET_NO_NEW_PRIVS
            code = ctypes.get_errno()
            raise OSError(code, "PR_SET_NO_NEW_PRIVS: %s" % os.strerror(code))
        _call("restrict_self", ruleset, 0)
    finally:
        os.close(ruleset)
    return {"abi": version, "granted": granted, "scoped": ["signal", "abstract_unix_socket"]}

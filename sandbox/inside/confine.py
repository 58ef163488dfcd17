"""Confining one process before it becomes the agent or the verifier (stdlib, Python >= 3.9).

Runs in the supervisor's forked child, as root, in this order: rlimits, capability bounding
set emptied, ``setgroups([])`` → ``setresgid`` → ``setresuid`` (CERT POS36-C), ``no_new_privs``,
the seccomp filter, then a posture check read back from the kernel (CERT POS37-C) and a
check that protected paths are unreadable. Any failure raises :class:`PostureError` and the
phase never runs. A phase without a user (a root verifier in a container) still gets
``no_new_privs`` and the filter.

A root agent (``req["root_agent"]``, ``sandbox.agent_root`` ``isolated`` or ``allow``) stays
uid 0 but keeps only the capabilities it names (:func:`confine_root`): the bounding set is
cut to them, so no later ``execve`` of a root program regains another (with
``no_new_privs`` a root exec gets at most the permitted set it had), the permitted and
effective sets are cut to them too, and the check reads all of it back.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import stat
from typing import Any, Dict, List, Optional, Set

try:  # in the harness: the sandbox.inside package; inside a sandbox: a sibling on sys.path
    from sandbox.inside import landlock, syscall_filter
except ImportError:  # pragma: no cover - inside a sandbox
    import landlock  # type: ignore[no-redef,import-not-found]
    import syscall_filter  # type: ignore[no-redef,import-not-found]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1

_RLIMITS = {
    "core": "RLIMIT_CORE",
    "nofile": "RLIMIT_NOFILE",
    "nproc": "RLIMIT_NPROC",
    "fsize": "RLIMIT_FSIZE",
    "as": "RLIMIT_AS",
    "cpu": "RLIMIT_CPU",
}
_STATUS_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
#: Capability numbers (capability.h) of the names a root agent may keep.
CAP_NUMBERS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "NET_BIND_SERVICE": 10,
}
_CAPABILITY_VERSION_3 = 0x20080522

LIBC = ctypes.CDLL(None, use_errno=True)
#: Built once, before any fork: the child must not need to read a file after the drop.
FILTER_PROGRAM: Optional[bytes]
FILTER_ERROR = ""
try:
    FILTER_PROGRAM = syscall_filter.build()
except syscall_filter.FilterUnavailable as _exc:
    FILTER_PROGRAM, FILTER_ERROR = None, str(_exc)


class PostureError(Exception):
    """A privilege or secrecy check failed; the phase must not run."""


def check(result: int, what: str) -> int:
    """Raise OSError naming ``what`` when a libc call returned non-zero."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s failed: %s" % (what, os.strerror(err)))
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """Call the prctl syscall; raise OSError on failure."""
    res = LIBC.prctl(
        ctypes.c_int(option),
        ctypes.c_ulong(arg2),
        ctypes.c_ulong(arg3),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(%d) failed: %s" % (option, os.strerror(err)))
    return int(res)


def last_cap() -> int:
    """Highest capability number the kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            return int(fh.read().strip())
    except OSError:
        return 40


def drop_bounding_set() -> None:
    """Empty the capability bounding set (needs CAP_SETPCAP; leftovers are caught later)."""
    for cap in range(last_cap() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise


def drop_privileges(uid: int, gid: int) -> None:
    """Drop to uid/gid in the only safe order: groups, then gid, then uid (CERT POS36-C)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def set_rlimits(limits: Dict[str, int]) -> None:
    """Apply rlimits by short name (core, nofile, nproc, fsize, as, cpu)."""
    for name, value in limits.items():
        res = getattr(resource, _RLIMITS[name])
        soft, hard = resource.getrlimit(res)
        new = value if value >= 0 else resource.RLIM_INFINITY
        if hard != resource.RLIM_INFINITY and (new == resource.RLIM_INFINITY or new > hard):
            new = hard
        resource.setrlimit(res, (new, new))


def read_status() -> Dict[str, str]:
    """Parse /proc/self/status into a dict of field → raw value."""
    fields: Dict[str, str] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def _ambient_caps_set() -> bool:
    """Whether any ambient capability is set, asked of prctl (for a status without CapAmb)."""
    try:
        for cap in range(last_cap() + 1):
            if prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap) == 1:
                return True
    except OSError as exc:
        return exc.errno != errno.EINVAL
    return False


def install_filter() -> None:
    """Set ``no_new_privs`` and install the seccomp filter (fails closed)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if FILTER_PROGRAM is None:
        raise PostureError("no seccomp filter for this machine: %s" % FILTER_ERROR)
    try:
        syscall_filter.install(FILTER_PROGRAM)
    except syscall_filter.FilterUnavailable as exc:
        raise PostureError(str(exc)) from None


def observe(status: Dict[str, str]) -> Dict[str, Any]:
    """What the kernel says about this process's privileges, for the trial record."""
    no_new_privs = status.get("NoNewPrivs")
    if no_new_privs is None:  # not reported (old gVisor): ask the kernel directly
        no_new_privs = str(prctl(PR_GET_NO_NEW_PRIVS))
    return {
        "uid": list(os.getresuid()),
        "gid": list(os.getresgid()),
        "groups": os.getgroups(),
        "no_new_privs": no_new_privs,
        "caps": {name: status.get(name) for name in _STATUS_CAP_FIELDS},
        "seccomp": status.get("Seccomp"),
    }


def verify_seccomp(observed: Dict[str, Any]) -> None:
    """Raise PostureError unless the kernel reports filter mode (``Seccomp: 2``)."""
    if observed.get("no_new_privs") != "1":
        raise PostureError("NoNewPrivs is %s, expected 1" % observed.get("no_new_privs"))
    if observed.get("seccomp") != "2":
        raise PostureError("Seccomp is %s, expected 2 (filter)" % observed.get("seccomp"))


def verify_dropped(uid: int, gid: int) -> Dict[str, Any]:
    """Check the dropped posture; raise PostureError naming the first failure.

    Returns:
        What was observed, for the trial record.
    """
    status = read_status()
    observed = observe(status)
    if tuple(os.getresuid()) != (uid, uid, uid):
        raise PostureError("uids are %s, expected all %d" % (observed["uid"], uid))
    if tuple(os.getresgid()) != (gid, gid, gid):
        raise PostureError("gids are %s, expected all %d" % (observed["gid"], gid))
    if os.getgroups():
        raise PostureError("supplementary groups remain: %s" % observed["groups"])
    for name in _STATUS_CAP_FIELDS:
        value = status.get(name)
        if value is None and name == "CapAmb" and not _ambient_caps_set():
            observed["caps"][name] = "0 (by prctl)"
            continue
        if value is None or int(value, 16) != 0:
            raise PostureError("capability set %s is %s, expected 0" % (name, value))
    verify_seccomp(observed)
    for what in ("setuid(0)", "setgid(0)", "setgroups([0])"):
        try:
            if what == "setuid(0)":
                os.setuid(0)
            elif what == "setgid(0)":
                os.setgid(0)
            else:
                os.setgroups([0])
        except PermissionError:
            continue
        raise PostureError("%s succeeded after the drop" % what)
    return observed


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def set_capabilities(mask: int) -> None:
    """Set this thread's permitted and effective sets to ``mask``; inheritable to none."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for index in (0, 1):
        word = (mask >> (32 * index)) & 0xFFFFFFFF
        data[index].effective = word
        data[index].permitted = word
        data[index].inheritable = 0
    check(LIBC.capset(ctypes.byref(header), data), "capset")


def cap_mask(names: List[str]) -> int:
    """The bit mask of capability names (:data:`CAP_NUMBERS`); an unknown name raises."""
    mask = 0
    for name in names:
        if name not in CAP_NUMBERS:
            raise PostureError("a root agent may not keep capability %s" % name)
        mask |= 1 << CAP_NUMBERS[name]
    return mask


def verify_root(mask: int) -> Dict[str, Any]:
    """Check a root agent's posture: uid/gid 0, no groups, no capability beyond ``mask``.

    Returns:
        What was observed, for the trial record.
    """
    status = read_status()
    observed = observe(status)
    if tuple(os.getresuid()) != (0, 0, 0) or tuple(os.getresgid()) != (0, 0, 0):
        raise PostureError("a root agent's ids are %s/%s" % (observed["uid"], observed["gid"]))
    if os.getgroups():
        raise PostureError("supplementary groups remain: %s" % observed["groups"])
    for name in _STATUS_CAP_FIELDS:
        value = status.get(name)
        if value is None and name == "CapAmb" and not _ambient_caps_set():
            observed["caps"][name] = "0 (by prctl)"
            continue
        allowed = 0 if name in ("CapInh", "CapAmb") else mask
        if value is None or int(value, 16) & ~allowed:
            raise PostureError(
                "capability set %s is %s, more than the root agent's %x" % (name, value, allowed)
            )
    verify_seccomp(observed)
    return observed


def confine_root(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Confine a root agent to the capabilities ``spec["caps"]`` names; see module doc."""
    names = [str(name) for name in spec.get("caps") or []]
    mask = cap_mask(names)
    for cap in range(last_cap() + 1):
        if not mask & (1 << cap):
            try:
                prctl(PR_CAPBSET_DROP, cap)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    # What the container gave us, cut to the mask (a cap the container lacks stays absent).
    held = int(read_status().get("CapPrm", "0"), 16)
    set_capabilities(held & mask)
    walled = None
    if spec.get("landlock") is not None:
        # Its kept services outlive the phase beside the verifier (landlock's doc).
        try:
            walled = landlock.wall(spec["landlock"])
        except OSError as exc:
            raise PostureError("no Landlock wall for a root agent: %s" % exc) from None
    install_filter()
    posture = verify_root(mask)
    posture["dropped"] = False
    posture["root_agent"] = True
    if walled is not None:
        posture["landlock"] = {"abi": walled["abi"], "scoped": walled["scoped"]}
    posture["kept_caps"] = sorted(n for n in names if (held & mask) >> CAP_NUMBERS[n] & 1)
    return posture


def check_unreadable(paths: List[str]) -> None:
    """Raise PostureError if the current user can read any of ``paths`` (file or dir)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.ENOENT, errno.EPERM, errno.ENOTDIR):
                continue
            raise PostureError("cannot decide whether %s is readable: %s" % (path, exc)) from exc
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
            continue  # a file masked by /dev/null: readable, but holds nothing
        raise PostureError("The agent user can read protected path: %s" % path)


def erase_environ(names: Optional[Set[str]] = None) -> List[str]:
    """Overwrite entries of this process's original environment block with NULs, in place.

    The block (``/proc/<pid>/environ``) outlives any change to ``os.environ``. ``names``
    selects the variables to erase; None erases every entry. Returns the names erased
    (nothing where ``/proc`` does not say where the block is).
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        # Fields 50 and 51 of stat(5) (counting from 1; the split starts at field 3).
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return []
    if not 0 < start < end:
        return []
    block = bytes((ctypes.c_char * (end - start)).from_address(start))
    wanted = None if names is None else {name.encode() for name in names}
    erased = []
    offset = 0
    for entry in block.split(b"\0"):
        name = entry.split(b"=", 1)[0]
        if entry and (wanted is None or (b"=" in entry and name in wanted)):
            ctypes.memset(start + offset, 0, len(entry))
            erased.append(name.decode("utf-8", "replace"))
        offset += len(entry) + 1
    return erased


def confine(req: Dict[str, Any]) -> Dict[str, Any]:
    """Drop this process to the request's user (if any), filter it, and verify; see module doc.

    Returns:
        The observed posture, with ``dropped`` saying whether a user drop happened.
    """
    user = req.get("user")
    if req.get("root_agent") is not None:
        # Root reads every path it owns: the harness keeps grader files out of the
        # container while a root agent runs, instead of hiding them (docs/security.md).
        return confine_root(req["root_agent"])
    if user is not None:
        uid, gid = int(user["uid"]), int(user["gid"])
        drop_bounding_set()
        drop_privileges(uid, gid)
        install_filter()
        posture = verify_dropped(uid, gid)
        posture["dropped"] = True
        check_unreadable(list(req.get("unreadable") or []))
    else:
        if req.get("drop_caps"):
            # Root without any capability once it execs (a service of the image).
            drop_bounding_set()
        install_filter()
        posture = observe(read_status())
        verify_seccomp(posture)
        posture["dropped"] = False
    return posture

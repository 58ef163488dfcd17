"""Which processes hold a listening socket (stdlib, Python >= 3.9).

Used by the supervisor at the end of an agent phase run with ``agent_services = keep``:
the processes of the phase that hold a listening socket are its services, and survive it.

A socket listens when ``/proc/net`` says so: TCP (v4, v6) in ``LISTEN``, UDP (v4, v6)
bound to a port and connected to nobody, a unix stream or seqpacket socket accepting
connections. Its inode is matched against the ``socket:[inode]`` links of each candidate's
``/proc/<pid>/fd``.

Reading a process's fd links needs ptrace read access to it (Linux; gVisor lets any user
list them), which the supervisor, root without ``CAP_SYS_PTRACE``, has only to processes
whose real, effective and saved uids all equal its fsuid and whose gids all equal its
fsgid, that are dumpable, and whose permitted capabilities its own effective ones include.
So each candidate is read as its own user:

- a non-root agent's phase (a ``user`` given): by one forked child dropped to that user;
  only its processes can be found (one of another user, a setuid program's, is killed);
- a root agent's phase (no user, or uid 0), whose processes may run as any user (nginx's
  workers run as ``www-data``, the listening socket its root master's): the candidates are
  grouped by their user (:func:`owner`); root's are read by the supervisor itself, each
  other user's by a forked child dropped to it. At most :data:`MAX_USERS` users are read
  (root's first, then in the order of their lowest pid); the processes of the others, and
  those whose ids differ among themselves (no user may read them), are no listeners.

A child reading as a user takes only that user's file-system ids and drops every
capability, its other ids staying root's, so that the user's processes cannot reach into
it (where the kernel has no ``setfsuid``, as gVisor: the whole drop, then non-dumpable;
:func:`become_reader`). A process that hides its
fds (non-dumpable, or holding a capability its reader lacks) is no listener: it is killed,
the safe answer. The children have :data:`SCAN_TIMEOUT_SEC` all together. Every read is
bounded.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

try:  # in the harness: the sandbox.inside package; inside a sandbox: a sibling on sys.path
    from sandbox.inside import confine
except ImportError:  # pragma: no cover - inside a sandbox
    import confine  # type: ignore[no-redef,import-not-found]

#: ``st`` of a listening TCP socket and of an unconnected (bound) UDP socket.
_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"
#: ``__SO_ACCEPTCON`` in ``/proc/net/unix``'s flags; its stream and seqpacket types.
_UNIX_ACCEPTCON = 0x10000
_UNIX_TYPES = ("0001", "0005")
#: How much of one ``/proc/net`` file is read (the agent opens sockets: bounded).
MAX_NET_BYTES = 16 << 20
#: How many processes and fds per process are looked at.
MAX_PIDS = 4096
MAX_FDS = 65536
#: How long the children reading fd links may take, all of them.
SCAN_TIMEOUT_SEC = 20.0
#: How many users' processes a root agent's scan reads (one child each).
MAX_USERS = 64
#: How much of a process's ``status`` is read (its ``Uid:`` and ``Gid:`` lines are early).
MAX_STATUS_BYTES = 4096


def _address(hex_addr: str) -> str:
    """``0100007F:14D0`` → ``127.0.0.1:5328`` (v6 in brackets)."""
    host, _, port = hex_addr.partition(":")
    raw = bytes.fromhex(host)
    # The kernel prints each 32-bit word in host order (little-endian here).
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return "%s:%d" % (socket.inet_ntop(socket.AF_INET, words), int(port, 16))
    return "[%s]:%d" % (socket.inet_ntop(socket.AF_INET6, words), int(port, 16))


def _read(path: str) -> List[str]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_NET_BYTES)
    except OSError:
        return []
    return data.decode("ascii", "replace").splitlines()[1:]


def listening_sockets(net: str = "/proc/net") -> Dict[int, str]:
    """Inode → ``proto:address`` of every listening socket of our network namespace."""
    found: Dict[int, str] = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for line in _read("%s/%s" % (net, proto)):
            fields = line.split()
            if len(fields) < 10 or not fields[9].isdigit():
                continue
            local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
            try:
                port = int(local.rpartition(":")[2], 16)
                remote_port = int(remote.rpartition(":")[2], 16)
            except ValueError:
                continue
            if proto.startswith("tcp") and state != _TCP_LISTEN:
                continue
            if proto.startswith("udp") and (state != _UDP_UNCONNECTED or remote_port or not port):
                continue
            if inode:
                try:
                    found[inode] = "%s:%s" % (proto[:3], _address(local))
                except ValueError:
                    continue
    for line in _read("%s/unix" % net):
        fields = line.split(None, 7)
        if len(fields) < 7 or not fields[6].isdigit():
            continue
        try:
            flags = int(fields[3], 16)
        except ValueError:
            continue
        if flags & _UNIX_ACCEPTCON and fields[4] in _UNIX_TYPES and int(fields[6]):
            path = fields[7].strip() if len(fields) > 7 else "(unnamed)"
            found[int(fields[6])] = "unix:%s" % path
    return found


def socket_inodes(pid: int, proc: str = "/proc") -> List[int]:
    """The socket inodes ``pid`` holds open (empty when gone or unreadable)."""
    base = "%s/%d/fd" % (proc, pid)
    try:
        names = os.listdir(base)[:MAX_FDS]
    except OSError:
        return []
    inodes = []
    for name in names:
        try:
            target = os.readlink("%s/%s" % (base, name))
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            digits = target[8:-1]
            if digits.isdigit():
                inodes.append(int(digits))
    return inodes


def _scan(pids: Iterable[int], listening: Dict[int, str]) -> Dict[int, List[str]]:
    """Pid → its sockets in ``listening`` (only pids that hold one), read as we are."""
    found: Dict[int, List[str]] = {}
    for pid in pids:
        labels = sorted({listening[i] for i in socket_inodes(pid) if i in listening})
        if labels:
            found[pid] = labels
    return found


def owner(pid: int, proc: str = "/proc") -> Optional[Tuple[int, int]]:
    """``(uid, gid)`` of the only user who may read ``pid``'s fd links, or None.

    The kernel lets a caller read them when its fsuid and fsgid equal all of the target's
    real, effective and saved uids and gids (``ptrace_may_access``, ``FSCREDS``): that
    user, when all three uids agree and all three gids do. None when they differ (a
    setuid program's), or the process is gone or its ``status`` unreadable.
    """
    try:
        with open("%s/%d/status" % (proc, pid), "rb") as fh:
            raw = fh.read(MAX_STATUS_BYTES)
    except OSError:
        return None
    ids: Dict[bytes, Set[int]] = {}
    for line in raw.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"Uid", b"Gid") and key not in ids:
            fields = rest.split()
            if len(fields) < 3 or not all(f.isdigit() for f in fields[:3]):
                return None
            ids[key] = {int(f) for f in fields[:3]}  # real, effective, saved
    uids, gids = ids.get(b"Uid", set()), ids.get(b"Gid", set())
    if len(uids) != 1 or len(gids) != 1:
        return None
    return uids.pop(), gids.pop()


def _by_owner(
    pids: List[int], unread: Optional[Set[int]] = None
) -> List[Tuple[Tuple[int, int], List[int]]]:
    """``pids`` grouped by :func:`owner`: at most :data:`MAX_USERS` groups.

    Root's (``(0, 0)``) first, then the others in the order of their lowest pid; the
    processes of any further group, and those without an owner, are left out (added to
    ``unread``; one gone meanwhile is not).
    """
    groups: Dict[Tuple[int, int], List[int]] = {}
    for pid in pids:
        ids = owner(pid)
        if ids is not None:
            groups.setdefault(ids, []).append(pid)
        elif unread is not None and os.path.exists("/proc/%d" % pid):
            unread.add(pid)
    ordered = sorted(groups.items(), key=lambda item: (item[0] != (0, 0), min(item[1])))
    if unread is not None:
        for _ids, members in ordered[MAX_USERS:]:
            unread.update(members)
    return ordered[:MAX_USERS]


def _own_ids() -> Optional[Tuple[int, int]]:
    """``(uid, gid)`` when all our own uids agree and all our gids do (else None)."""
    uids, gids = set(os.getresuid()), set(os.getresgid())
    if len(uids) != 1 or len(gids) != 1:
        return None
    return uids.pop(), gids.pop()


def listening_processes(
    pids: Iterable[int],
    user: Optional[Dict[str, Any]],
    reaper: Any,
    unread: Optional[Set[int]] = None,
) -> Dict[int, List[str]]:
    """Pid → listening sockets of those of ``pids`` that hold one.

    ``user`` {uid, gid}: the candidates' user (a non-root agent's); a forked child drops
    to it and reads them all, so only that user's processes can be found. None or uid 0
    (a root agent's phase, whose processes may be of any user): the candidates are
    grouped by :func:`owner`, root's read here and each other user's by a child that
    drops to it (:data:`MAX_USERS` users at most; the others' are no listeners).
    ``reaper`` forks and waits for those children, which have :data:`SCAN_TIMEOUT_SEC`
    for all of them. ``unread``, if given, gets the pids that were never read (past
    :data:`MAX_PIDS`; in a root agent's phase past :data:`MAX_USERS` users, or whose ids
    differ among themselves), so that the record can say so: they are no listeners.

    Raises:
        RuntimeError: the children did not finish in time (nothing is found then).
        OSError: a child could not be forked.
    """
    every = sorted(set(pids))
    wanted = every[:MAX_PIDS]
    if unread is not None:
        unread.update(every[MAX_PIDS:])
    if not wanted:
        return {}
    listening = listening_sockets()
    if not listening:
        return {}
    if user is not None and int(user["uid"]) != 0:
        groups = [((int(user["uid"]), int(user["gid"])), wanted)]
    else:
        groups = _by_owner(wanted, unread)
    own = _own_ids()
    stop_at = time.monotonic() + SCAN_TIMEOUT_SEC
    found: Dict[int, List[str]] = {}
    for ids, members in groups:
        if ids == own:
            found.update(_scan(members, listening))
        else:
            found.update(_scan_as(ids, members, listening, reaper, stop_at))
    return found


def become_reader(uid: int, gid: int) -> str:
    """Make this forked child a reader of ``uid``'s fd links, out of that user's reach.

    Where the kernel has them (Linux), only the file-system ids change (``setfsgid``,
    ``setfsuid``: what the kernel checks a read of ``/proc/<pid>/fd`` against) and every
    capability is dropped: the real, effective and saved ids stay root's, so no process
    of the user may ptrace or signal the reader at any moment, and it is non-dumpable, so
    neither may a root agent's. Elsewhere (gVisor has no
    ``setfsuid``) the whole drop, then non-dumpable: the drop set dumpable to
    ``fs.suid_dumpable``, which may be 1, and until then the user's processes could
    ptrace the reader and forge its answer.

    Returns:
        ``"fs"`` or ``"full"``: which drop was made.
    """
    os.setgroups([])
    libc = confine.LIBC
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    # Each returns the fs id it replaced: asked again, the one just set (-1: no such call).
    if libc.setfsgid(gid) == gid and libc.setfsuid(uid) == uid:
        # The new fs ids set dumpable to fs.suid_dumpable: off again while this child still
        # holds a capability a root agent lacks (SETPCAP), then every capability goes.
        confine.prctl(confine.PR_SET_DUMPABLE, 0)
        confine.set_capabilities(0)
        return "fs"
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    confine.prctl(confine.PR_SET_DUMPABLE, 0)
    return "full"


def _scan_as(
    ids: Tuple[int, int],
    pids: List[int],
    listening: Dict[int, str],
    reaper: Any,
    stop_at: float,
) -> Dict[int, List[str]]:
    """:func:`_scan` in a forked child that dropped to ``ids`` (uid, gid), by ``stop_at``."""
    uid, gid = ids
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    child = reaper.fork()
    if child == 0:  # pragma: no cover - a child process
        code = 1
        try:
            os.close(read_end)
            become_reader(uid, gid)
            data = json.dumps({str(k): v for k, v in _scan(pids, listening).items()}).encode()
            while data:
                data = data[os.write(write_end, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    raw = b""
    try:
        while True:
            left = stop_at - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                raise RuntimeError("the listening-socket scan did not finish")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            raw += chunk
    finally:
        os.close(read_end)
        if reaper.wait(child, 5.0) is None:
            reaper.kill_unreaped(child, 9)
            reaper.wait(child, 5.0)
    answer = json.loads(raw.decode() or "{}")
    asked = set(pids)
    return {int(k): [str(x) for x in v] for k, v in answer.items() if int(k) in asked}


def comm(pid: int, proc: str = "/proc") -> str:
    """The process's ``comm`` (its name, at most 15 bytes), empty when gone."""
    try:
        with open("%s/%d/comm" % (proc, pid), "rb") as fh:
            return fh.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""

"""Which processes hold a listening socket (stdlib, Python >= 3.9).

Used by the supervisor at the end of an agent phase run with ``agent_services = keep``:
the processes of the phase that hold a listening socket are its services, and survive it.

A socket listens when ``/proc/net`` says so: TCP (v4, v6) in ``LISTEN``, UDP (v4, v6)
bound to a port and connected to nobody, a unix stream or seqpacket socket accepting
connections. Its inode is matched against the ``socket:[inode]`` links of each candidate's
``/proc/<pid>/fd``. Reading another user's fd links needs ptrace access to it, which root
without ``CAP_SYS_PTRACE`` lacks (Linux; gVisor lets any user list them): the links are
read by a forked child that dropped to the candidates' own user, made non-dumpable first
so that they cannot reach into it. A process that hides its fds (non-dumpable) is no
listener: it is killed, the safe answer. Every read is bounded.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Any, Dict, Iterable, List, Optional

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
#: How long the child reading fd links may take.
SCAN_TIMEOUT_SEC = 20.0


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


def _scan(pids: Iterable[int]) -> Dict[int, List[str]]:
    """Pid → its listening sockets (only pids that hold one), read as we are."""
    listening = listening_sockets()
    found: Dict[int, List[str]] = {}
    for pid in list(pids)[:MAX_PIDS]:
        labels = sorted({listening[i] for i in socket_inodes(pid) if i in listening})
        if labels:
            found[pid] = labels
    return found


def listening_processes(
    pids: Iterable[int], user: Optional[Dict[str, Any]], reaper: Any
) -> Dict[int, List[str]]:
    """Pid → listening sockets of those of ``pids`` that hold one.

    ``user`` {uid, gid}: the candidates' user, whose fd links only that user (or
    ``CAP_SYS_PTRACE``) may read; a forked child drops to it and reads them. None: read
    here (root's own processes). ``reaper`` forks and waits for that child.
    """
    wanted = sorted(set(pids))
    if not wanted:
        return {}
    if user is None:
        return _scan(wanted)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    child = reaper.fork()
    if child == 0:  # pragma: no cover - a child process
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(int(user["gid"]), int(user["gid"]), int(user["gid"]))
            os.setresuid(int(user["uid"]), int(user["uid"]), int(user["uid"]))
            data = json.dumps({str(k): v for k, v in _scan(wanted).items()}).encode()
            while data:
                data = data[os.write(write_end, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    raw = b""
    stop_at = time.monotonic() + SCAN_TIMEOUT_SEC
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
    return {int(k): [str(x) for x in v] for k, v in answer.items()}


def comm(pid: int, proc: str = "/proc") -> str:
    """The process's ``comm`` (its name, at most 15 bytes), empty when gone."""
    try:
        with open("%s/%d/comm" % (proc, pid), "rb") as fh:
            return fh.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""

"""Finding, reaping and killing the processes of a phase (stdlib, Python >= 3.9).

Used by the supervisor inside a sandbox and by the local backend on the host. A phase's
processes are the descendants of the process that started it (orphans come back to the
supervisor: it is the container's pid 1, or a child subreaper, or the phase has its own pid
namespace) plus, as a second net, every process of the phase's uid.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Set


def stat_entry(name: str, proc: str = "/proc") -> Optional[Dict[str, Any]]:
    """pid, ppid, state and uid of process ``name`` (None when gone), two syscalls mostly.

    ``proc`` is the procfs to read: another pid namespace's own shows that namespace's pids.
    The uid is the owner of ``<proc>/<pid>``, i.e. the effective uid, except that a
    root-owned entry is looked up in ``status``: a process that made itself non-dumpable
    shows as root there, and its real uid (which an unprivileged process cannot change) is
    what the uid sweep needs.
    """
    try:
        fd = os.open("%s/%s/stat" % (proc, name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        uid = os.stat("%s/%s" % (proc, name)).st_uid
        if uid == 0:
            uid = _status_uid(name, proc)
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(b")") + 2 :].split()
    return {"pid": int(name), "ppid": int(rest[1]), "state": rest[0].decode(), "uid": uid}


def proc_entries(proc: str = "/proc") -> List[Dict[str, Any]]:
    """:func:`stat_entry` of every process of the procfs ``proc``."""
    entries = []
    for name in os.listdir(proc):
        if name.isdigit():
            entry = stat_entry(name, proc)
            if entry is not None:
                entries.append(entry)
    return entries


def _status_uid(name: str, proc: str) -> int:
    """The real uid of process ``name`` from its ``status`` (readable by every user)."""
    with open("%s/%s/status" % (proc, name), "rb") as fh:
        for line in fh:
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    raise OSError("no Uid line in %s/%s/status" % (proc, name))


def live_entries(proc: str = "/proc") -> List[Dict[str, Any]]:
    """:func:`proc_entries` without zombies."""
    return [e for e in proc_entries(proc) if e["state"] != "Z"]


def pid_ns(pid: str) -> Optional[str]:
    """The pid namespace of ``pid`` (``self`` for ours), or None when unreadable."""
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def cmdline(pid: int, proc: str = "/proc") -> str:
    """The command line of ``pid`` (empty when gone or unreadable)."""
    try:
        with open("%s/%d/cmdline" % (proc, pid), "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def uid_processes(uid: int, entries: Optional[List[Dict[str, Any]]] = None) -> List[int]:
    """Live processes of ``uid`` in our own pid namespace, except ourselves.

    Only our namespace: a container elsewhere on the host may run the same uid. A
    container's pid 1 (the docker supervisor) needs no check, and could not make one: its
    ``/proc`` holds only its own namespace (and those nested in it), and reading another
    user's ``/proc/<pid>/ns/pid`` needs ``CAP_SYS_PTRACE``, which it does not hold.
    """
    me = os.getpid()
    if entries is None:
        entries = live_entries()
    mine = [e["pid"] for e in entries if e["uid"] == uid and e["pid"] != me]
    if me == 1:
        return mine
    own_ns = pid_ns("self")
    return [pid for pid in mine if pid_ns(str(pid)) == own_ns]


def descendants(
    root: int, entries: List[Dict[str, Any]], *, exclude: Iterable[int] = ()
) -> Set[int]:
    """Every live descendant of ``root`` (not ``root`` itself), minus ``exclude``."""
    children: Dict[int, List[int]] = {}
    for entry in entries:
        children.setdefault(entry["ppid"], []).append(entry["pid"])
    found: Set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found - set(exclude)


def describe(
    pids: Iterable[int], entries: List[Dict[str, Any]], proc: str = "/proc"
) -> List[Dict[str, Any]]:
    """Record-ready facts (pid, ppid, state, uid, cmdline) of ``pids``, read in ``proc``."""
    by_pid = {e["pid"]: e for e in entries}
    return [dict(by_pid[p], cmdline=cmdline(p, proc)) for p in sorted(pids) if p in by_pid]


class Reaper:
    """The one place this process collects exit statuses of its children.

    A supervisor is a reaper of orphans (pid 1 or a subreaper), and several phases may run
    at once (the verifier and an agent command run for it), so ``waitpid(-1)`` in one place
    could steal another's status: the statuses of ``watch``-ed children are kept here and
    looked up by pid; every other child (an orphan) is reaped and forgotten.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: Set[int] = set()
        self._statuses: Dict[int, int] = {}

    def fork(self) -> int:
        """``os.fork()``, the child watched from the start (no reap can miss its status)."""
        with self._lock:
            pid = os.fork()
            if pid:
                self._watched.add(pid)
            return pid

    def reap(self) -> None:
        """Collect every exited child's status without blocking."""
        with self._lock:
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    return
                if pid in self._watched:
                    self._statuses[pid] = status

    def poll(self, pid: int) -> Optional[int]:
        """The wait status of watched child ``pid`` once it has exited, else None."""
        with self._lock:
            status = self._statuses.pop(pid, None)
            if status is None:
                try:
                    done, raw = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done, raw = 0, 0
                if done != pid:
                    return None
                status = raw
            self._watched.discard(pid)
            return status

    def kill_unreaped(self, pid: int, sig: int) -> bool:
        """Signal watched child ``pid`` unless it was reaped already; whether it was sent.

        Holding the reaper's lock, so no other thread can reap it (and free its pid for
        reuse) between the check and the signal.
        """
        with self._lock:
            if pid in self._statuses or pid not in self._watched:
                return False
            os.kill(pid, sig)
            return True

    def wait(self, pid: int, timeout: float) -> Optional[int]:
        """Wait up to ``timeout`` seconds for watched child ``pid``; its status, or None."""
        stop_at = time.monotonic() + timeout
        pidfd = _pidfd(pid)
        try:
            while True:
                status = self.poll(pid)
                left = stop_at - time.monotonic()
                if status is not None or left <= 0:
                    return status
                # A pidfd turns readable once the child has exited: block on it rather
                # than sleep and poll. Readable with no status yet: poll on a timer.
                if pidfd >= 0 and select.select([pidfd], [], [], left)[0]:
                    os.close(pidfd)
                    pidfd = -1
                    continue
                time.sleep(0.005)
        finally:
            if pidfd >= 0:
                os.close(pidfd)


def _pidfd(pid: int) -> int:
    """A pidfd of ``pid``, or -1 (no pidfd_open here, or the pid is gone)."""
    if not hasattr(os, "pidfd_open"):
        return -1
    try:
        return os.pidfd_open(pid)
    except OSError:
        return -1


def stop_all(find: Any, first: Iterable[int] = (), *, rounds: int = 50) -> int:
    """SIGSTOP ``first``, then whatever ``find()`` returns, until a scan finds no new one.

    A stopped process forks no more and takes no CPU: a fork bomb stops growing, and the
    scans and the kill that follow no longer share the phase's CPU quota (the supervisor's
    too) with hundreds of spinning processes, which made them take half a minute. ``first``
    (pids already known, e.g. from the scan just taken) are stopped before any new scan.
    Stopped processes that the caller does not kill stay stopped: pass only what is to be
    killed. Returns how many were stopped.
    """
    stopped: Set[int] = set()
    fresh = set(first)
    for _ in range(rounds):
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        stopped |= fresh
        fresh = set(find()) - stopped
        if not fresh:
            break
    return len(stopped)


def kill_all(find: Any, reaper: Optional[Reaper], *, deadline_sec: float = 10.0) -> int:
    """SIGKILL whatever ``find()`` returns until it returns nothing; return how many.

    ``reaper`` collects the exit statuses of killed children (None when they are not ours,
    e.g. the harness sweeping a trial's uid: reaping there would steal other statuses).

    Raises:
        RuntimeError: processes still there after ``deadline_sec``.
    """
    killed = 0
    stop_at = time.monotonic() + deadline_sec
    while time.monotonic() < stop_at:
        pids = find()
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.002)
        if reaper is not None:
            reaper.reap()
    if find():
        raise RuntimeError("processes of the phase survived SIGKILL for %.0fs" % deadline_sec)
    return killed

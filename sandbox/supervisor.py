"""The in-sandbox supervisor: one phase of a trial (the agent, or the verifier).

Runs as root inside the sandbox (a container, or the host for the local backend) and is the
only code that holds the trial's secrets. Stdlib-only and Python >= 3.9, because it is
mounted read-only into arbitrary task images and run as ``python3 -I -S supervisor.py``.

Protocol:
    stdin   one JSON request (see ``Request``), then EOF. Secrets arrive only here: never in
            argv, never in this process's environment, never in a file the agent can read.
    stdout  one JSON result line, written after every process of the phase is dead. The
            agent never holds this fd, so it cannot forge the result.

Order inside one phase: read request → non-dumpable, child subreaper → delete hidden files →
chown the trial dirs → fork the agent child; in the child: new session, rlimits, optional
mount masks, bounding set dropped, ``setgroups([])`` → ``setresgid`` → ``setresuid``,
``no_new_privs``, posture verified, protected paths verified unreadable, then ``execve``.
Any failed check aborts the phase before the agent runs. At the end (exit or deadline) every
process of the phase is killed, survivors recorded, and the result written.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import selectors
import signal
import stat
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

PROTOCOL_VERSION = 1

# prctl(2) and mount(2) constants (linux/prctl.h, linux/mount.h, linux/sched.h).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_RLIMITS = {
    "core": "RLIMIT_CORE",
    "nofile": "RLIMIT_NOFILE",
    "nproc": "RLIMIT_NPROC",
    "fsize": "RLIMIT_FSIZE",
    "as": "RLIMIT_AS",
    "cpu": "RLIMIT_CPU",
}
_STATUS_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
_READ_CHUNK = 65536


#: In-sandbox entry points a phase may run in-process instead of exec (stdlib siblings).
_ENTRY_MODULES = ("agent_loop",)


class PostureError(Exception):
    """A privilege or secrecy check failed after the drop; the agent must not run."""


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


_LIBC = _libc()


def _check(result: int, what: str) -> int:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s failed: %s" % (what, os.strerror(err)))
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """Call the prctl syscall; raise OSError on failure."""
    res = _LIBC.prctl(
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
    """Empty the capability bounding set (needs CAP_SETPCAP; skipped caps are verified later)."""
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


def read_status() -> Dict[str, str]:
    """Parse /proc/self/status into a dict of field → raw value."""
    fields: Dict[str, str] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def _ambient_caps_set() -> bool:
    """Whether any ambient capability is set, asked of prctl.

    For kernels (such as an old gVisor) whose /proc/self/status has no CapAmb line;
    no ambient support at all means none can be set.
    """
    try:
        for cap in range(last_cap() + 1):
            if prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap) == 1:
                return True
    except OSError as exc:
        return exc.errno != errno.EINVAL
    return False


def verify_posture(uid: int, gid: int) -> Dict[str, Any]:
    """Check the dropped posture (CERT POS37-C); raise PostureError naming the first failure.

    Returns:
        What was observed, for the trial record.
    """
    status = read_status()
    observed: Dict[str, Any] = {
        "uid": list(os.getresuid()),
        "gid": list(os.getresgid()),
        "groups": os.getgroups(),
        "no_new_privs": status.get("NoNewPrivs"),
        "caps": {name: status.get(name) for name in _STATUS_CAP_FIELDS},
        "seccomp": status.get("Seccomp"),
    }
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
    no_new_privs = status.get("NoNewPrivs")
    if no_new_privs is None:  # not reported (old gVisor): ask the kernel directly
        no_new_privs = str(prctl(PR_GET_NO_NEW_PRIVS))
        observed["no_new_privs"] = no_new_privs
    if no_new_privs != "1":
        raise PostureError("NoNewPrivs is %s, expected 1" % no_new_privs)
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


def mask_paths(paths: List[str]) -> None:
    """In a private mount namespace, cover each path with an empty read-only mount."""
    _check(_LIBC.unshare(ctypes.c_int(CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
    _check(
        _LIBC.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None),
        "making / private",
    )
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    for path in paths:
        if not os.path.lexists(path):
            continue
        target = path.encode()
        if os.path.isdir(path) and not os.path.islink(path):
            _check(
                _LIBC.mount(
                    b"harness-mask", target, b"tmpfs", ctypes.c_ulong(flags), b"size=4k,mode=000"
                ),
                "masking %s" % path,
            )
        else:
            _check(
                _LIBC.mount(b"/dev/null", target, None, ctypes.c_ulong(MS_BIND), None),
                "masking %s" % path,
            )


def isolate_network() -> None:
    """Move into a fresh network namespace with only loopback, brought up."""
    import fcntl
    import socket
    import struct

    _check(_LIBC.unshare(ctypes.c_int(CLONE_NEWNET)), "unshare(CLONE_NEWNET)")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
    finally:
        sock.close()


def set_rlimits(limits: Dict[str, int]) -> None:
    """Apply rlimits by short name (core, nofile, nproc, fsize, as, cpu)."""
    for name, value in limits.items():
        res = getattr(resource, _RLIMITS[name])
        soft, hard = resource.getrlimit(res)
        new = value if value >= 0 else resource.RLIM_INFINITY
        if hard != resource.RLIM_INFINITY and (new == resource.RLIM_INFINITY or new > hard):
            new = hard
        resource.setrlimit(res, (new, new))


# --- process bookkeeping -----------------------------------------------------------------


def _proc_entries() -> List[Dict[str, Any]]:
    """pid, ppid, state and uid of every process, with two syscalls per process.

    The uid is the owner of ``/proc/<pid>``, i.e. the effective uid (root for a
    non-dumpable process): an agent process that makes itself non-dumpable hides from the
    uid sweep, but never from the descendant walk, since we are its child subreaper.
    """
    entries = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open("/proc/%s/stat" % name, os.O_RDONLY | os.O_CLOEXEC)
            try:
                stat = os.read(fd, 4096)
            finally:
                os.close(fd)
            uid = os.stat("/proc/%s" % name).st_uid
        except OSError:
            continue
        # comm may contain spaces and parentheses: split after the last ')'.
        rest = stat[stat.rfind(b")") + 2 :].split()
        entries.append(
            {"pid": int(name), "ppid": int(rest[1]), "state": rest[0].decode(), "uid": uid}
        )
    return entries


def _pid_ns(pid: str) -> Optional[str]:
    try:
        return os.readlink("/proc/%s/ns/pid" % pid)
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def uid_processes(uid: int, entries: Optional[List[Dict[str, Any]]] = None) -> List[int]:
    """Live processes of ``uid`` in our own pid namespace, except ourselves.

    Only our namespace: a container elsewhere on the host may run the same uid.
    """
    me = os.getpid()
    own_ns = _pid_ns("self")
    if entries is None:
        entries = [e for e in _proc_entries() if e["state"] != "Z"]
    return [
        e["pid"]
        for e in entries
        if e["uid"] == uid and e["pid"] != me and _pid_ns(str(e["pid"])) == own_ns
    ]


def phase_processes(kill_uid: Optional[int]) -> List[Dict[str, Any]]:
    """Every live process of this phase: our descendants, plus all of ``kill_uid``'s."""
    me = os.getpid()
    entries = [e for e in _proc_entries() if e["state"] != "Z"]
    children: Dict[int, List[int]] = {}
    for e in entries:
        children.setdefault(e["ppid"], []).append(e["pid"])
    found = set()
    stack = [me]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    if kill_uid is not None:
        found.update(uid_processes(kill_uid, entries))
    by_pid = {e["pid"]: e for e in entries}
    return [dict(by_pid[p], cmdline=_cmdline(p)) for p in sorted(found) if p in by_pid]


def _reap(statuses: Optional[Dict[int, int]] = None) -> None:
    """Reap every exited child, noting each one's wait status in ``statuses``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if statuses is not None:
            statuses[pid] = status


def kill_phase(
    kill_uid: Optional[int],
    deadline_sec: float = 10.0,
    statuses: Optional[Dict[int, int]] = None,
) -> int:
    """SIGKILL every process of the phase until none is left; return how many were killed.

    Children reaped on the way (the phase's main process among them) have their wait status
    stored in ``statuses``: a later ``waitpid`` on them would fail with ECHILD.
    """
    killed = 0
    stop_at = time.monotonic() + deadline_sec
    while time.monotonic() < stop_at:
        procs = phase_processes(kill_uid)
        if not procs:
            return killed
        for proc in procs:
            try:
                os.kill(proc["pid"], signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.002)
        _reap(statuses)
    if phase_processes(kill_uid):
        raise RuntimeError("processes of the phase survived SIGKILL for %.0fs" % deadline_sec)
    return killed


# --- the model gateway forwarder ------------------------------------------------------------


class _Forwarder:
    """Relays loopback TCP connections in the agent's netns to the trial's gateway socket.

    The agent reaches the model only through this: the gateway (host side) holds the real
    key; the agent holds a per-trial token. Runs in the supervisor parent (root, not
    dumpable), which can open the gateway socket; the agent user cannot.
    """

    def __init__(self, listener: Any, socket_path: str) -> None:
        import threading

        self.listener = listener
        self.port = int(listener.getsockname()[1])
        self.socket_path = socket_path
        self.connections = 0
        self._stop_r, self._stop_w = os.pipe()
        self._threads: List[Any] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        import threading

        while True:
            ready = select_fds([self.listener.fileno(), self._stop_r])
            if self._stop_r in ready:
                return
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            with self._lock:
                self.connections += 1
                thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
                self._threads.append(thread)
            thread.start()

    def _relay(self, conn: Any) -> None:
        import socket

        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.socket_path)
        except OSError:
            conn.close()
            upstream.close()
            return
        peers = {conn.fileno(): upstream, upstream.fileno(): conn}
        open_fds = set(peers)
        try:
            while open_fds:
                ready = select_fds(sorted(open_fds) + [self._stop_r])
                if self._stop_r in ready:
                    return
                for fd in ready:
                    src = conn if fd == conn.fileno() else upstream
                    try:
                        data = src.recv(_READ_CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        open_fds.discard(fd)
                        try:
                            peers[fd].shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    try:
                        peers[fd].sendall(data)
                    except OSError:
                        return
        finally:
            conn.close()
            upstream.close()

    def stop(self) -> int:
        """Stop accepting and cut every relay; return how many connections were made."""
        os.write(self._stop_w, b"x")
        self._thread.join(5)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)
        self.listener.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
        return self.connections


def select_fds(fds: List[int]) -> List[int]:
    """Block until one of ``fds`` is readable; return the readable ones."""
    import select

    while True:
        try:
            ready, _, _ = select.select(fds, [], [])
            return list(ready)
        except InterruptedError:
            continue


def _start_forwarder(channel: Any, socket_path: str) -> Optional[_Forwarder]:
    """Receive the child's loopback listener and start relaying; None if it sent none."""
    import socket

    try:
        channel.setblocking(False)
        _, fds, _, _ = socket.recv_fds(channel, 16, 1)
    except (BlockingIOError, OSError):
        fds = []
    finally:
        channel.close()
    if not fds:
        return None
    listener = socket.socket(fileno=fds[0])
    return _Forwarder(listener, socket_path)


# --- the phase ---------------------------------------------------------------------------


class _Capture:
    """Drains one pipe into a file, keeping at most ``limit`` bytes and counting the rest."""

    def __init__(self, fd: int, path: Optional[str], limit: int) -> None:
        self.fd = fd
        self.limit = limit
        self.total = 0
        self.out = None
        if path:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            self.out = os.open(path, flags, 0o600)

    def feed(self) -> bool:
        try:
            data = os.read(self.fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        room = self.limit - self.total
        if self.out is not None and room > 0:
            os.write(self.out, data[:room])
        self.total += len(data)
        return True

    def close(self) -> None:
        if self.out is not None:
            os.close(self.out)
            self.out = None


def _close_all_but(keep: List[int]) -> None:
    """Close every fd from 3 up except those in ``keep``."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def _open_gateway_listener(gw_fd: int) -> int:
    """Listen on loopback in the agent's network namespace; hand the socket to the parent.

    Runs in the child after the network namespace is final and before the drop. The
    listener goes to the supervisor parent (which forwards to the gateway socket) and is
    closed here, so the agent never holds it. Returns the port.
    """
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = int(listener.getsockname()[1])
        channel = socket.socket(fileno=gw_fd)
        try:
            socket.send_fds(channel, [str(port).encode()], [listener.fileno()])
        finally:
            channel.close()
    finally:
        listener.close()
    return port


def _child(req: Dict[str, Any], fds: Dict[str, int], status_w: int) -> None:
    """In the forked child: set up, drop, verify, exec. Never returns."""
    try:
        os.setsid()
        os.dup2(fds["stdin"], 0)
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        gw_fd = fds.get("gateway", -1)
        # Everything but stdio, the CLOEXEC status pipe and the gateway channel closes here
        # (CVE-2024-21626 lesson).
        _close_all_but([status_w, gw_fd])
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.umask(int(req.get("umask", 0o022)))
        set_rlimits(req.get("rlimits") or {"core": 0})
        user = req.get("user")
        posture: Dict[str, Any] = {"dropped": False}
        if user is not None:
            uid, gid = int(user["uid"]), int(user["gid"])
            if req.get("mask_paths"):
                mask_paths(req["mask_paths"])
            if req.get("isolate_network"):
                isolate_network()
        env = dict(req.get("env") or {})
        env.update(req.get("secret_env") or {})
        if gw_fd >= 0:
            port = _open_gateway_listener(gw_fd)
            for name, template in (req["gateway"].get("env") or {}).items():
                env[name] = template.replace("{port}", str(port))
        if user is not None:
            drop_bounding_set()
            drop_privileges(uid, gid)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            posture = verify_posture(uid, gid)
            posture["dropped"] = True
            check_unreadable(list(req.get("unreadable") or []))
        os.chdir(req["cwd"])
        os.write(status_w, (json.dumps({"posture": posture}) + "\n").encode())
        entry = req.get("entry")
        if entry:
            _run_entry(entry, env, status_w)
        os.execvpe(req["argv"][0], req["argv"], env)
    except PostureError as exc:
        msg = {"error": {"type": "PostureError", "message": str(exc)}}
    except FileNotFoundError as exc:
        msg = {"error": {"type": "ExecError", "message": "command not found: %s" % exc.filename}}
    except BaseException as exc:  # noqa: B036 - report anything, then die without cleanup
        msg = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    try:
        os.write(status_w, (json.dumps(msg) + "\n").encode())
    finally:
        os._exit(127)


def _load_entry(entry: Dict[str, Any]) -> Any:
    """Import an in-sandbox entry module (a sibling of this file) before the fork.

    After the drop the agent user cannot read our files, so the code must already be
    in memory when the child starts.
    """
    name = str(entry.get("module", ""))
    if name not in _ENTRY_MODULES:
        raise ValueError("unknown entry module %r" % name)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return __import__(name)


def _run_entry(entry: Dict[str, Any], env: Dict[str, str], status_w: int) -> None:
    """Run an in-sandbox entry point in this (dropped) child instead of exec. Never returns."""
    module = sys.modules[str(entry["module"])]
    os.environ.clear()
    os.environ.update(env)
    os.close(status_w)  # what exec would have done: the parent starts the clock now
    code = 4
    try:
        code = int(module.main(dict(entry.get("config") or {})))
    except BaseException as exc:  # noqa: B036 - report anything, then die without cleanup
        try:
            sys.stderr.write("entry %s failed: %r\n" % (entry["module"], exc))
        except Exception:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _prepare(req: Dict[str, Any]) -> None:
    """Hide secret files and hand the trial dirs to their owners, never following symlinks."""
    for path in req.get("delete_files") or []:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    user = req.get("user")
    for entry in req.get("prepare_dirs") or []:
        path = entry["path"]
        os.makedirs(path, exist_ok=True)
        if os.path.islink(path):
            raise PostureError("trial dir is a symlink: %s" % path)
        if entry.get("owner") == "agent" and user is not None:
            os.lchown(path, int(user["uid"]), int(user["gid"]))
        elif entry.get("owner") == "root":
            os.lchown(path, 0, 0)
        if "mode" in entry:
            os.chmod(path, int(entry["mode"]))


def run_phase(req: Dict[str, Any], control_fd: int = -1) -> Dict[str, Any]:
    """Run one phase as described by ``req`` and return the result dict.

    ``control_fd`` is the harness's request channel: EOF on it mid-phase means the harness
    died, and the phase is killed at once rather than left running unsupervised.
    """
    started = time.monotonic()
    result: Dict[str, Any] = {
        "version": PROTOCOL_VERSION,
        "exit_code": None,
        "signal": None,
        "timed_out": False,
        "posture": None,
        "error": None,
        "survivors": [],
        "killed": 0,
        "stdout_bytes": 0,
        "stderr_bytes": 0,
    }
    user = req.get("user")
    kill_uid = int(user["uid"]) if user is not None and req.get("kill_uid", True) else None
    _prepare(req)
    if req.get("isolate_network"):
        import fcntl  # noqa: F401 - imported before fork: the child must not pay for it
        import socket  # noqa: F401
        import struct  # noqa: F401

    if req.get("entry"):
        _load_entry(req["entry"])
    gateway = req.get("gateway")
    gw_parent = gw_child = None
    if gateway:
        import socket

        gw_parent, gw_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe2(os.O_CLOEXEC) if hasattr(os, "pipe2") else os.pipe()
    child_fds = {"stdin": stdin_r, "stdout": out_w, "stderr": err_w}
    if gw_child is not None:
        child_fds["gateway"] = gw_child.fileno()
    pid = os.fork()
    if pid == 0:
        _child(req, child_fds, status_w)
    for fd in (stdin_r, out_w, err_w, status_w):
        os.close(fd)
    if gw_child is not None:
        gw_child.close()

    status_raw = b""
    while True:
        chunk = os.read(status_r, _READ_CHUNK)
        if not chunk:
            break
        status_raw += chunk
    os.close(status_r)
    exec_at = time.monotonic()  # the status pipe closes at execve: the agent runs from here
    for line in status_raw.decode("utf-8", "replace").splitlines():
        msg = json.loads(line)
        result["posture"] = msg.get("posture", result["posture"])
        if msg.get("error"):
            result["error"] = msg["error"]

    forwarder = None
    if gw_parent is not None:
        forwarder = _start_forwarder(gw_parent, str(gateway["socket"]))  # type: ignore[index]
        if forwarder is not None:
            result["gateway_port"] = forwarder.port

    limit = int(req.get("max_output_bytes", 1 << 20))
    logs = req.get("logs") or {}
    captures = [
        _Capture(out_r, logs.get("stdout"), limit),
        _Capture(err_r, logs.get("stderr"), limit),
    ]
    sel = selectors.DefaultSelector()
    for cap in captures:
        os.set_blocking(cap.fd, False)
        sel.register(cap.fd, selectors.EVENT_READ, cap)
    stdin_data = (req.get("stdin") or "").encode()
    if stdin_data and result["error"] is None:
        os.set_blocking(stdin_w, False)
        sel.register(stdin_w, selectors.EVENT_WRITE, None)
    else:
        os.close(stdin_w)
        stdin_w = -1

    # A pidfd wakes the loop the moment the agent exits; without one (old kernels) we poll.
    pidfd = -1
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        except OSError:
            pidfd = -1
    if control_fd >= 0:
        sel.register(control_fd, selectors.EVENT_READ, "control")
    timeout = req.get("timeout_sec")
    deadline = started + float(timeout) if timeout else None
    wait_status: Optional[int] = None
    while wait_status is None:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            result["timed_out"] = not result.get("harness_gone", False)
            break
        tick = 0.05 if pidfd < 0 else 1.0
        wait = tick if deadline is None else max(0.0, min(tick, deadline - now))
        for key, _ in sel.select(wait):
            if key.data == "exit":
                continue
            if key.data == "control":
                result["harness_gone"] = True
                deadline = now
                continue
            if key.data is None:
                try:
                    sent = os.write(stdin_w, stdin_data)
                except (BrokenPipeError, BlockingIOError) as exc:
                    sent = len(stdin_data) if isinstance(exc, BrokenPipeError) else 0
                stdin_data = stdin_data[sent:]
                if not stdin_data:
                    sel.unregister(stdin_w)
                    os.close(stdin_w)
                    stdin_w = -1
            elif not key.data.feed():
                sel.unregister(key.fd)
        done_pid, st = os.waitpid(pid, os.WNOHANG)
        if done_pid == pid:
            wait_status = st
    result["process_sec"] = time.monotonic() - exec_at

    # The phase is over: no more model calls, then record what outlived the main process
    # and kill everything.
    if forwarder is not None:
        result["gateway_connections"] = forwarder.stop()
    alive = phase_processes(kill_uid)
    result["survivors"] = [p for p in alive if p["pid"] != pid]
    # Nothing alive means nothing can fork any more: skip the kill loop's rescans.
    reaped: Dict[int, int] = {}
    result["killed"] = kill_phase(kill_uid, statuses=reaped) if alive else 0
    if wait_status is None:
        wait_status = reaped.get(pid)
    if wait_status is None:
        _, wait_status = os.waitpid(pid, 0)
    if os.WIFEXITED(wait_status):
        result["exit_code"] = os.WEXITSTATUS(wait_status)
    elif os.WIFSIGNALED(wait_status):
        result["signal"] = os.WTERMSIG(wait_status)
    if stdin_w >= 0:
        os.close(stdin_w)
    if pidfd >= 0:
        os.close(pidfd)
    sel.close()
    for cap in captures:
        os.set_blocking(cap.fd, True)
        while cap.feed():
            pass
        os.close(cap.fd)
        cap.close()
    result["stdout_bytes"] = captures[0].total
    result["stderr_bytes"] = captures[1].total
    result["output_truncated"] = any(c.total > limit for c in captures)
    result["duration_sec"] = time.monotonic() - started
    return result


# --- file operations (the docker backend has no other safe way in or out) -----------------


def _evidence() -> Any:
    """The sibling ``evidence`` module (mounted next to this file in a container)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import importlib

    return importlib.import_module("evidence")


def _owner(spec: Optional[Dict[str, Any]]) -> Optional[Tuple[int, int]]:
    if not spec:
        return None
    return int(spec["uid"]), int(spec["gid"])


def op_whois(req: Dict[str, Any]) -> Dict[str, Any]:
    """Resolve a user name (or numeric id) against the sandbox's own /etc/passwd."""
    import pwd

    name = req["name"]
    try:
        entry = pwd.getpwuid(int(name)) if str(name).isdigit() else pwd.getpwnam(str(name))
    except (KeyError, ValueError):
        if str(name).isdigit():
            return {"uid": int(name), "gid": int(name), "home": None}
        raise ValueError("user %r does not exist in the sandbox image" % name) from None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir}


def op_reset_dir(req: Dict[str, Any]) -> Dict[str, Any]:
    """Recreate ``path`` empty (symlink-safe removal), with owner and mode."""
    import shutil

    path = req["path"]
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.isdir(path):
        if req.get("keep_dir"):
            for entry in os.listdir(path):
                full = os.path.join(path, entry)
                if os.path.isdir(full) and not os.path.islink(full):
                    shutil.rmtree(full)
                else:
                    os.unlink(full)
        else:
            shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.makedirs(path, exist_ok=True)
    owner = _owner(req.get("owner")) or (0, 0)
    os.lchown(path, owner[0], owner[1])
    os.chmod(path, int(req.get("mode", 0o755)))
    return {}


def op_chown_tree(req: Dict[str, Any]) -> Dict[str, Any]:
    """Hand a tree to an owner without following symlinks."""
    owner = _owner(req["owner"])
    assert owner is not None
    top = req["path"]
    os.lchown(top, owner[0], owner[1])
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), owner[0], owner[1])
    if "mode" in req:
        os.chmod(top, int(req["mode"]))
    return {}


def op_put(req: Dict[str, Any]) -> Dict[str, Any]:
    """Write files under ``dest`` (root-controlled), never following a symlink."""
    import base64

    dest = req["dest"]
    owner = _owner(req.get("owner"))
    dir_mode = int(req.get("dir_mode", 0o755))
    os.makedirs(dest, exist_ok=True)
    for item in req.get("files") or []:
        rel = item["path"]
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts or rel.startswith("/"):
            raise ValueError("bad file path %r" % rel)
        parent = dest
        for part in parts[:-1]:
            parent = os.path.join(parent, part)
            if os.path.islink(parent):
                raise ValueError("refusing to write through a symlink: %s" % parent)
            if not os.path.isdir(parent):
                os.mkdir(parent, dir_mode)
                if owner:
                    os.lchown(parent, owner[0], owner[1])
        target = os.path.join(parent, parts[-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(target, flags, 0o600)
        try:
            data = base64.b64decode(item["data"])
            while data:
                data = data[os.write(fd, data) :]
            os.fchmod(fd, int(item.get("mode", 0o644)))
            if owner:
                os.fchown(fd, owner[0], owner[1])
        finally:
            os.close(fd)
    if req.get("top_mode") is not None:
        os.chmod(dest, int(req["top_mode"]))
    if owner and req.get("own_top"):
        os.lchown(dest, owner[0], owner[1])
    return {}


def op_read(req: Dict[str, Any]) -> Dict[str, Any]:
    """Read one small regular file without following symlinks."""
    import base64

    ev = _evidence()
    data, event = ev.read_file("/", req["path"].lstrip("/"), max_bytes=int(req["max_bytes"]))
    if event is not None:
        return {"event": event.as_dict()}
    return {"data": base64.b64encode(data).decode()}


def op_archive(req: Dict[str, Any]) -> Dict[str, Any]:
    """Read a file or tree as evidence: regular files only, capped, never following links."""
    import base64

    ev = _evidence()
    files: List[Dict[str, Any]] = []

    def sink(sub: str, fd: int, limit: int) -> Tuple[int, bool]:
        data, truncated = ev.read_fd(fd, limit)
        files.append({"path": sub, "data": base64.b64encode(data).decode()})
        return len(data), truncated

    path = req["path"]
    if os.path.isdir(path) and not os.path.islink(path):
        events = ev.walk_tree(
            "/",
            path.lstrip("/"),
            sink,
            max_file_bytes=int(req["max_file_bytes"]),
            max_total_bytes=int(req["max_total_bytes"]),
        )
        return {"files": files, "events": [e.as_dict() for e in events]}
    limit = min(int(req["max_file_bytes"]), int(req["max_total_bytes"]))
    data, event = ev.read_file("/", path.lstrip("/"), max_bytes=limit, truncate=True)
    events = [] if event is None or event.kind == "missing" else [event.as_dict()]
    if data is None:
        return {"files": [], "events": events}
    return {"files": [{"path": "", "data": base64.b64encode(data).decode()}], "events": events}


_OPS = {
    "whois": op_whois,
    "reset_dir": op_reset_dir,
    "chown_tree": op_chown_tree,
    "put": op_put,
    "read": op_read,
    "archive": op_archive,
}


class _Channel:
    """Newline-delimited JSON requests from the harness on a private fd."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def read_request(self) -> Optional[Dict[str, Any]]:
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, _READ_CHUNK)
            if not chunk:
                if self.buf.strip():
                    raise ValueError("truncated request on stdin")
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        req = json.loads(line.decode("utf-8"))
        if not isinstance(req, dict):
            raise ValueError("request must be a JSON object")
        return req


def main() -> int:
    """Entry point: requests on stdin, one result line each on stdout, until EOF."""
    # Nothing below may be ptraced or dumped by the agent; orphans of a phase reparent to us.
    prctl(PR_SET_DUMPABLE, 0)
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        # Old gVisor lacks it. Orphans then escape our tree, but not the uid sweep, and
        # a container's pid namespace holds nothing but the trial.
        pass
    os.umask(0o077)
    channel = _Channel(os.dup(0))
    out = os.fdopen(os.dup(1), "w")
    # Our own stdio must never be shared with the agent: point it at /dev/null.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    while True:
        try:
            req = channel.read_request()
            if req is None:
                return 0
            if req.get("version") != PROTOCOL_VERSION:
                raise ValueError(
                    "supervisor protocol %r, expected %d" % (req.get("version"), PROTOCOL_VERSION)
                )
            op = req.get("op", "run")
            if op == "run":
                result = run_phase(req, channel.fd)
            elif op in _OPS:
                result = {"version": PROTOCOL_VERSION, "error": None, **_OPS[op](req)}
            else:
                raise ValueError("unknown supervisor op %r" % op)
            req.clear()  # drop our references to the secrets as soon as the phase is over
        except Exception as exc:
            result = {
                "version": PROTOCOL_VERSION,
                "error": {"type": type(exc).__name__, "message": str(exc)},
            }
        out.write(json.dumps(result) + "\n")
        out.flush()
        if result.get("harness_gone"):
            return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Nothing is left to clean up: skip the interpreter's teardown (several ms per trial).
    os._exit(code)

"""Starting one confined process tree, waiting for it, and killing all of it (stdlib, 3.9).

A launch is what the supervisor does for a phase (the agent, the verifier) and for each
command the verifier runs as the agent (:mod:`agent_exec`). Two shapes:

- **With namespaces** (the local sandbox, ``req["namespaces"]``): the forked child C
  unshares mount, pid, ipc, uts (and network) namespaces and forks G, pid 1 of the new pid
  namespace. G builds the root view (:mod:`rootview`), forks the phase's process A and reaps
  everything in the namespace; it reports A's exit status on a pipe and keeps running until
  the supervisor kills it — then the kernel kills every process of the namespace, whatever
  it did (``setsid``, double forks, ``PR_SET_CHILD_SUBREAPER`` missing on gVisor ...).
- **Without** (a container, whose pid 1 is the supervisor itself): the child is A. Orphans
  come back to the supervisor, so the phase's processes are the supervisor's descendants,
  plus every process of the phase's uid.

In the local sandbox C first joins the trial's cgroup (``req["cgroup"]``,
:func:`join_cgroups`), so everything the launch starts is counted against the trial's
limits. Either way A confines itself (:func:`confine.confine`) before ``execve``, and reports its
posture on a close-on-exec status pipe: EOF on that pipe means the phase's program runs.
Every wait has a deadline, including draining the output pipes, whatever holds them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
from typing import Any, Callable, Dict, List, NoReturn, Optional, Set

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import confine, processes, rootview
except ImportError:  # pragma: no cover - inside a sandbox
    import confine  # type: ignore[no-redef,import-not-found]
    import processes  # type: ignore[no-redef,import-not-found]
    import rootview  # type: ignore[no-redef,import-not-found]

READ_CHUNK = 65536
#: How long output is still drained after the phase's processes are dead.
DRAIN_GRACE_SEC = 5.0
#: How long a phase may take to start (confine itself, build its view) before it is killed.
START_TIMEOUT_SEC = 60
#: In-sandbox entry points a phase may run in-process instead of exec (stdlib siblings).
ENTRY_MODULES = ("agent_loop",)
#: Roots of the image's workload trees (:mod:`services`): no phase's kill touches them.
PROTECTED: Set[int] = set()
#: Those of them an agent phase left listening (``agent_services = keep``).
KEPT: Set[int] = set()
#: Signals the supervisor keeps at their defaults: stop/kill cannot be changed, SIGCHLD's
#: default lets it wait for its children, the rest do nothing by default (or Python set them).
_KEPT_SIGNALS = (
    "SIGKILL",
    "SIGSTOP",
    "SIGCHLD",
    "SIGCONT",
    "SIGWINCH",
    "SIGURG",
    "SIGPIPE",
    "SIGXFSZ",
)


def ignore_signals() -> List[int]:
    """Ignore every signal that would end or stop this process; return them.

    A root agent may signal the supervisor. Linux delivers a container's pid 1 only the
    signals it handles; gVisor delivers them all (a ``kill -TERM 1`` ended the trial), so
    the supervisor ignores them itself. Each phase gets them back (:func:`restore_signals`).
    """
    kept = {getattr(signal, name) for name in _KEPT_SIGNALS if hasattr(signal, name)}
    ignored = []
    for number in range(1, signal.NSIG):
        if number in kept:
            continue
        try:
            signal.signal(number, signal.SIG_IGN)
        except (OSError, ValueError):
            continue  # reserved (glibc's 32, 33) or unknown here
        ignored.append(number)
    IGNORED[:] = ignored
    return ignored


#: What :func:`ignore_signals` ignored (restored to the default in every phase).
IGNORED: List[int] = []


def restore_signals() -> None:
    """In a phase's process: the defaults the supervisor set aside, and SIGPIPE's."""
    for number in [signal.SIGPIPE, *IGNORED]:
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


class Capture:
    """Drains one pipe into a file (or memory), keeping at most ``limit`` bytes.

    A write to the file that fails (a root agent filled the space it lives on: ``ENOSPC``)
    ends the file's share, never the draining: the phase is still waited for, killed and
    reported, and ``write_error`` says what was not kept.
    """

    def __init__(self, fd: int, path: Optional[str], limit: int) -> None:
        self.fd = fd
        self.limit = limit
        self.total = 0
        self.out = -1
        self.memory = bytearray()
        self.path = path
        #: Why the file stopped taking what the pipe gave (None: it took all it could).
        self.write_error: Optional[str] = None
        if path:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            self.out = os.open(path, flags, 0o600)
        os.set_blocking(fd, False)

    def feed(self) -> bool:
        """Read what is there; False at EOF."""
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return True
        if not data:
            return False
        room = self.limit - self.total
        if room > 0:
            if self.out >= 0 and self.write_error is None:
                try:
                    os.write(self.out, data[:room])
                except OSError as exc:
                    self.write_error = "%s: %s" % (self.path, exc.strerror or exc)
            elif self.out < 0:
                self.memory.extend(data[:room])
        self.total += len(data)
        return True

    @property
    def truncated(self) -> bool:
        """Whether more was written than kept."""
        return self.total > self.limit

    def close(self) -> None:
        """Close the pipe and the file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.out >= 0:
            os.close(self.out)
            self.out = -1


def drain(captures: List[Capture], deadline: float) -> None:
    """Read every capture to EOF, but never past ``deadline`` (monotonic); then close them."""
    open_caps = [c for c in captures if c.fd >= 0]
    while open_caps:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([c.fd for c in open_caps], [], [], min(left, 0.5))
        for cap in [c for c in open_caps if c.fd in ready]:
            if not cap.feed():
                open_caps.remove(cap)
    for cap in captures:
        cap.close()


def close_all_but(keep: List[int]) -> None:
    """Close every fd from 3 up except those in ``keep``."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def load_entry(entry: Dict[str, Any]) -> Any:
    """Import an in-sandbox entry module (a sibling of this file) before any fork.

    After the drop the phase's user cannot read our files, so the code must already be in
    memory when the child starts.
    """
    name = str(entry.get("module", ""))
    if name not in ENTRY_MODULES:
        raise ValueError("unknown entry module %r" % name)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return __import__(name)


def _report(status_w: int, message: Dict[str, Any]) -> None:
    os.write(status_w, (json.dumps(message) + "\n").encode())


def _error_message(exc: BaseException) -> Dict[str, Any]:
    if isinstance(exc, confine.PostureError):
        return {"error": {"type": "PostureError", "message": str(exc)}}
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return {"error": {"type": "ExecError", "message": "command not found: %s" % exc.filename}}
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def _open_gateway_listener(gw_fd: int) -> int:
    """Listen on loopback in the phase's network namespace; hand the socket to the parent.

    Runs in A before the drop. The listener goes to the supervisor (which relays to the
    gateway socket) and is closed here, so the phase never holds it. Returns the port.
    """
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


def _run_entry(entry: Dict[str, Any], env: Dict[str, str], status_w: int) -> NoReturn:
    """Run an in-sandbox entry point in this (confined) process instead of exec."""
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


def _become(req: Dict[str, Any], status_w: int, gw_fd: int) -> NoReturn:
    """A: confine this process and exec the phase's program. Never returns."""
    os.umask(int(req.get("umask", 0o022)))
    confine.set_rlimits(req.get("rlimits") or {"core": 0})
    env = dict(req.get("env") or {})
    env.update(req.get("secret_env") or {})
    if gw_fd >= 0:
        port = _open_gateway_listener(gw_fd)
        for name, template in (req["gateway"].get("env") or {}).items():
            env[name] = template.replace("{port}", str(port))
    posture = confine.confine(req)
    os.chdir(req["cwd"])
    _report(status_w, {"posture": posture})
    entry = req.get("entry")
    if entry:
        _run_entry(entry, env, status_w)
    os.execvpe(req["argv"][0], req["argv"], env)


def _namespace_init(req: Dict[str, Any], status_w: int, exit_w: int, gw_fd: int) -> NoReturn:
    """G: pid 1 of the trial's pid namespace. Builds the view, forks A, reaps. Never returns."""
    confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
    ns = req["namespaces"]
    hostname = str((ns.get("view") or {}).get("hostname") or "sandbox").encode()
    confine.check(confine.LIBC.sethostname(hostname, len(hostname)), "sethostname")
    if ns.get("net"):
        rootview.bring_up_loopback()
    rootview.enter(ns["view"])
    agent = os.fork()
    if agent == 0:
        try:
            os.close(exit_w)
            _become(req, status_w, gw_fd)
        except BaseException as exc:  # noqa: B036 - report anything, then die
            _report(status_w, _error_message(exc))
        os._exit(127)
    os.close(status_w)
    if gw_fd >= 0:
        os.close(gw_fd)
    reported = False
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == agent and not reported:
            os.write(exit_w, b"%d\n" % status)
            reported = True


def join_cgroups(procs_files: List[str]) -> None:
    """Move this process into the trial's cgroup (a ``cgroup.procs`` per hierarchy).

    Runs in C before anything of the phase does: every process the phase starts is forked
    from here on, so all of them are counted against the trial's limits and die with its
    cgroup (:mod:`cgroups`). ``0`` means the writing process itself.
    """
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        except OSError as exc:
            raise OSError(
                exc.errno, "cannot join the trial's cgroup (%s): %s" % (path, exc)
            ) from None
        finally:
            os.close(fd)


def _child(req: Dict[str, Any], fds: Dict[str, int]) -> NoReturn:
    """C: the supervisor's forked child. Never returns."""
    status_w = fds["status_w"]
    try:
        join_cgroups([str(p) for p in req.get("cgroup") or []])
        os.setsid()
        confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.dup2(fds["stdin"], 0)
        os.dup2(fds["stdout"], 1)
        os.dup2(fds["stderr"], 2)
        gw_fd, exit_w = fds.get("gateway", -1), fds.get("exit_w", -1)
        # Only stdio, the close-on-exec status pipe, the exit pipe and the gateway channel
        # survive (CVE-2024-21626 lesson).
        close_all_but([status_w, gw_fd, exit_w])
        restore_signals()  # the supervisor ignores most signals (pid 1, gVisor)
        ns = req.get("namespaces")
        if not ns:
            _become(req, status_w, gw_fd)
        flags = rootview.CLONE_NEWNS | rootview.CLONE_NEWPID | rootview.CLONE_NEWIPC
        flags |= rootview.CLONE_NEWUTS | (rootview.CLONE_NEWNET if ns.get("net") else 0)
        rootview.unshare(flags)
        rootview.make_mounts_private()
        init = os.fork()
        if init == 0:
            try:
                _namespace_init(req, status_w, exit_w, gw_fd)
            except BaseException as exc:  # noqa: B036 - report anything, then die
                _report(status_w, _error_message(exc))
            os._exit(127)
        # The supervisor kills the namespace through this pid (a pidfd it checks is ours).
        _report(status_w, {"init": init})
        for fd in (status_w, exit_w, gw_fd):
            if fd >= 0:
                os.close(fd)
        _, status = os.waitpid(init, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 1)
    except BaseException as exc:  # noqa: B036 - report anything, then die without cleanup
        try:
            _report(status_w, _error_message(exc))
        finally:
            os._exit(127)


def _is_readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _namespace_survivors(init_pid: int) -> List[Dict[str, Any]]:
    """The live processes of ``init_pid``'s pid namespace but its init (1) and program (2).

    Read from the namespace's own ``/proc`` (the view mounts it), reached through the init's
    root: a handful of entries instead of a scan of every process on the host. Pids are the
    namespace's own, as the phase itself saw them.
    """
    proc = "/proc/%d/root/proc" % init_pid
    entries = processes.live_entries(proc)
    return processes.describe([e["pid"] for e in entries if e["pid"] > 2], entries, proc)


def _ns_pid(pid: int) -> Optional[int]:
    """The innermost pid of ``pid`` (its pid in its own pid namespace)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


class Launch:
    """One confined process tree: start it, wait for it, find and kill all of it.

    Args:
        req: The phase request (see the supervisor's protocol).
        reaper: The supervisor's single reaper.
        scope_root: For launches without namespaces, whose descendants belong to the
            launch: the supervisor itself (a phase: orphans come back to it) or None for
            only the launch's own tree (an agent command run for the verifier).
        spare: A process whose tree is never the launch's, even where its uid is the
            launch's (the verifier an agent command runs for may be the agent's user).
    """

    def __init__(
        self,
        req: Dict[str, Any],
        reaper: processes.Reaper,
        *,
        scope_root: Optional[int],
        spare: Optional[int] = None,
    ) -> None:
        self.req = req
        self.reaper = reaper
        self.scope_root = scope_root
        self.spare = spare
        self.namespaced = bool(req.get("namespaces"))
        user = req.get("user")
        self.kill_uid: Optional[int] = (
            int(user["uid"]) if user is not None and req.get("kill_uid", True) else None
        )
        self.pid = -1
        self.posture: Optional[Dict[str, Any]] = None
        self.error: Optional[Dict[str, str]] = None
        self.exec_at = 0.0
        self.wait_status: Optional[int] = None
        self.stdin_w = -1
        self.out_r = -1
        self.err_r = -1
        self.exit_r = -1
        self.pidfd = -1
        self.init_pid = -1
        self.init_pidfd = -1
        self.gateway: Any = None
        self._child_reaped = False
        #: Processes of the launch its end leaves alive (listeners an agent left: KEPT),
        #: with what they fork from then on; ``doomed``: the rest when they were chosen,
        #: killed even inside their trees.
        self.keep: Set[int] = set()
        self.doomed: Set[int] = set()

    def start(self) -> None:  # noqa: C901
        """Fork the tree and wait until its program runs (or failed to start)."""
        stdin_r, self.stdin_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        fds = {"stdin": stdin_r, "stdout": out_w, "stderr": err_w, "status_w": status_w}
        child_ends = [stdin_r, out_w, err_w, status_w]
        if self.namespaced:
            self.exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
            fds["exit_w"] = exit_w
            child_ends.append(exit_w)
        gw_child = None
        if self.req.get("gateway"):
            self.gateway, gw_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            fds["gateway"] = gw_child.fileno()
        for fd in (self.stdin_w, self.out_r, self.err_r, status_r):
            os.set_inheritable(fd, False)
        self.pid = self.reaper.fork()
        if self.pid == 0:
            _child(self.req, fds)
        for fd in child_ends:
            os.close(fd)
        if gw_child is not None:
            gw_child.close()
        raw = b""
        give_up = time.monotonic() + START_TIMEOUT_SEC
        while True:
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([status_r], [], [], left)[0]:
                # Setting up never finished (a hung mount, say): stop the whole tree.
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                late = "the phase did not start within %d s" % START_TIMEOUT_SEC
                error = {"error": {"type": "StartTimeout", "message": late}}
                raw += b"\n" + json.dumps(error).encode()
                break
            chunk = os.read(status_r, READ_CHUNK)
            if not chunk:
                break
            raw += chunk
        os.close(status_r)
        self.exec_at = time.monotonic()
        for line in raw.decode("utf-8", "replace").splitlines():
            msg = json.loads(line)
            self.posture = msg.get("posture", self.posture)
            self.init_pid = int(msg.get("init", self.init_pid))
            if msg.get("error"):
                self.error = msg["error"]
        if self.namespaced:
            self._open_init()
        elif hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(self.pid)
            except OSError:
                self.pidfd = -1

    def _open_init(self) -> None:
        """Hold a pidfd of the namespace's init, once sure it is the init (else: scans)."""
        if self.init_pid <= 0 or not hasattr(signal, "pidfd_send_signal"):
            return
        try:
            fd = os.pidfd_open(self.init_pid)
        except OSError:
            return  # already gone: the scans handle the rest
        # The pid was C's child when the fd was opened if it still is now: C forks once,
        # and its child's pid cannot be reused before C has reaped it, after which C exits.
        entry = processes.stat_entry(str(self.init_pid))
        if entry is not None and entry["ppid"] == self.pid:
            self.init_pidfd = fd
        else:
            os.close(fd)

    def _init_alive(self) -> bool:
        return self.init_pidfd >= 0 and not _is_readable(self.init_pidfd)

    @property
    def exit_fd(self) -> int:
        """An fd that turns readable when the phase's program exits (-1: poll instead)."""
        return self.exit_r if self.namespaced else self.pidfd

    def check_exit(self) -> bool:
        """Collect the program's wait status if it has exited; whether it has."""
        if self.wait_status is not None:
            return True
        if self.namespaced:
            ready, _, _ = select.select([self.exit_r], [], [], 0)
            if not ready:
                if self._child_reaped or self.reaper.poll(self.pid) is None:
                    return False
                self._child_reaped = True
                return self._init_gone()
            line = os.read(self.exit_r, 64)
            if not line:
                return self._init_gone()
            self.wait_status = int(line.decode().strip() or "0")
            return True
        status = self.reaper.poll(self.pid)
        if status is not None:
            self.wait_status = status
            return True
        return False

    def _init_gone(self) -> bool:
        """The namespace's init died before reporting (it failed to start the program)."""
        if self.wait_status is None:
            self.wait_status = 127 << 8
        return True

    def processes(self, entries: List[Dict[str, Any]]) -> Set[int]:
        """Every live process of this launch (the program included, while alive)."""
        if self.namespaced:
            return processes.descendants(self.pid, entries) | (
                {self.pid} if any(e["pid"] == self.pid for e in entries) else set()
            )
        root = self.scope_root if self.scope_root is not None else self.pid
        found = processes.descendants(root, entries)
        if self.scope_root is None and any(e["pid"] == self.pid for e in entries):
            found.add(self.pid)
        if self.kill_uid is not None:
            # Orphans of an agent command come back to the container's pid 1, out of the
            # launch's tree: its uid (real uid, even when non-dumpable) finds them.
            by_uid = set(processes.uid_processes(self.kill_uid, entries))
            if self.spare is not None:
                by_uid -= processes.descendants(self.spare, entries) | {self.spare}
            found.update(by_uid)
        if PROTECTED and self.pid not in PROTECTED:
            for service in PROTECTED:
                found -= processes.descendants(service, entries) | {service}
        if self.keep:
            spared = set(self.keep)
            for root in self.keep:
                spared |= processes.descendants(root, entries)
            found -= spared - self.doomed
        return found

    def survivors(self, entries: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
        """The launch's processes other than its program and the harness's own helpers.

        ``entries`` is a fresh :func:`processes.live_entries` scan (taken here if None).
        """
        if entries is None and self._init_alive():
            try:
                inside: Optional[List[Dict[str, Any]]] = _namespace_survivors(self.init_pid)
            except OSError:
                inside = None
            # Only if the init outlived the listing was the pid (and its /proc) still ours.
            if inside is not None and self._init_alive():
                return inside
        if entries is None:
            entries = processes.live_entries()
        found = self.processes(entries)
        if self.namespaced:
            init = [e["pid"] for e in entries if e["ppid"] == self.pid]
            found -= {self.pid, *init}
            found = {p for p in found if _ns_pid(p) != 2}  # the program is pid 2 in there
        else:
            found.discard(self.pid)
        return processes.describe(found, entries)

    def kill(self, entries: Optional[List[Dict[str, Any]]] = None) -> int:
        """SIGKILL every process of the launch; return how many signals were sent.

        ``entries`` is a scan taken after the program ended (e.g. for :meth:`survivors`);
        the kill loop rescans until nothing of the launch is left anyway.
        """
        killed = 0
        if self.namespaced and self._init_alive() and self._kill_namespace():
            return 1
        if self.namespaced:
            # Killing the namespace's init makes the kernel kill everything inside it.
            if entries is None:
                entries = processes.live_entries()
            for entry in entries:
                if entry["ppid"] == self.pid:
                    try:
                        os.kill(entry["pid"], signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
            if not self._child_reaped:
                # The init's exit waits until the namespace is empty, and C exits right
                # after its init: once C is reaped, one scan confirms nothing is left.
                self.reaper.wait(self.pid, 5.0)
                self._child_reaped = True

        if not self.namespaced and self.wait_status is None:
            # The program first: killed after its children, it could see them die and
            # exit by itself (bash's 137) before its own SIGKILL, and the phase would
            # look like it ended on its own rather than being killed at its deadline.
            killed += self._kill_program()

        def find() -> Set[int]:
            return self.processes(processes.live_entries())

        killed += processes.kill_all(find, self.reaper)
        if self.namespaced:
            if not self._child_reaped:
                self.reaper.wait(self.pid, 5.0)
                self._child_reaped = True
            if self.wait_status is None:
                # Killed with its namespace before it exited: the kernel sent SIGKILL.
                self.wait_status = signal.SIGKILL
        elif self.wait_status is None:
            self.wait_status = self.reaper.wait(self.pid, 5.0)
        return killed

    def _kill_program(self) -> int:
        """SIGKILL the program itself (no namespace); 1 if a signal was sent.

        Through its pidfd when there is one, else only while the reaper holds its pid
        unreaped: another thread's reap could free the pid for reuse.
        """
        try:
            if self.pidfd >= 0:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                return 1
            return 1 if self.reaper.kill_unreaped(self.pid, signal.SIGKILL) else 0
        except ProcessLookupError:
            return 0

    def _kill_namespace(self, timeout: float = 5.0) -> bool:
        """SIGKILL the namespace's init through its pidfd; whether everything in it is dead.

        The init's exit completes only once the kernel has killed and reaped every other
        process of its pid namespace, so its pidfd turning readable proves the namespace
        empty: no scan of the host's processes is needed.
        """
        try:
            signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not select.select([self.init_pidfd], [], [], timeout)[0]:
            return False
        if not self._child_reaped:
            self.reaper.wait(self.pid, timeout)  # C exits as soon as it reaped the init
            self._child_reaped = True
        if self.wait_status is None:
            # Killed with its namespace before it exited: the kernel sent SIGKILL.
            self.wait_status = signal.SIGKILL
        return True

    def close(self) -> None:
        """Close the launch's remaining fds (not the output pipes: see :func:`drain`)."""
        for name in ("stdin_w", "exit_r", "pidfd", "init_pidfd"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)

    def outcome(self) -> Dict[str, Any]:
        """exit_code / signal of the program, from its wait status."""
        status = self.wait_status
        if status is None:
            return {"exit_code": None, "signal": None}
        if os.WIFEXITED(status):
            return {"exit_code": os.WEXITSTATUS(status), "signal": None}
        if os.WIFSIGNALED(status):
            return {"exit_code": None, "signal": os.WTERMSIG(status)}
        return {"exit_code": None, "signal": None}


def run_until(
    launch: Launch,
    captures: List[Capture],
    *,
    stdin_data: bytes,
    deadline: Optional[float],
    extra: Optional[Dict[int, Callable[[], bool]]] = None,
) -> str:
    """Feed stdin and drain output until the program exits, the deadline, or a stop.

    ``extra`` maps more fds to callbacks run when they are readable; a callback returning
    False stops the wait. Returns ``exited``, ``deadline`` or ``stopped``.
    """
    watched: Dict[int, Any] = {cap.fd: cap for cap in captures}
    pending = stdin_data
    if not pending or launch.error is not None:
        os.close(launch.stdin_w)
        launch.stdin_w = -1
    else:
        os.set_blocking(launch.stdin_w, False)
    exit_fd = launch.exit_fd
    while True:
        # Orphans come back to us (pid 1 / subreaper): reap them before they pile up as
        # zombies against the pids limit.
        launch.reaper.reap()
        if launch.check_exit():
            return "exited"
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return "deadline"
        tick = 0.05 if exit_fd < 0 else 0.2
        wait = tick if deadline is None else max(0.0, min(tick, deadline - now))
        readers = list(watched) + ([exit_fd] if exit_fd >= 0 else []) + list(extra or {})
        writers = [launch.stdin_w] if launch.stdin_w >= 0 else []
        try:
            ready_r, ready_w, _ = select.select(readers, writers, [], wait)
        except InterruptedError:
            continue
        if ready_w:
            try:
                sent = os.write(launch.stdin_w, pending)
            except BrokenPipeError:
                sent = len(pending)
            except BlockingIOError:
                sent = 0
            pending = pending[sent:]
            if not pending:
                os.close(launch.stdin_w)
                launch.stdin_w = -1
        for fd in ready_r:
            if fd in watched and not watched[fd].feed():
                del watched[fd]
            elif extra and fd in extra and not extra[fd]():
                return "exited" if launch.check_exit() else "stopped"

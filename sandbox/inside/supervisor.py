"""The in-sandbox supervisor: serves one trial's phases and file operations.

Runs as root inside the sandbox (a container's pid 1, or a host process for the local
backend) and is the only code that holds the trial's secrets. Stdlib-only and Python >= 3.9,
because it is mounted read-only into arbitrary task images and run as
``python3 -I -S supervisor.py``; its siblings (``launch``, ``confine``, ``rootview``,
``syscall_filter``, ``processes``, ``forwarder``, ``agent_exec``, ``evidence``,
``agent_loop``) are imported before any phase runs, because after the drop the phase's user
cannot read them.

Protocol:
    stdin   newline-delimited JSON requests. Secrets arrive only here: never in argv, never
            in this process's environment, never in a file the agent can read.
    stdout  one JSON result line per request; for a phase, written after every process of
            the phase is dead. No phase ever holds this fd, so none can forge a result.

A phase request (``op = "run"``): ``role``, ``argv``, ``env``, ``secret_env``, ``cwd``,
``stdin``, ``timeout_sec``, ``max_output_bytes``, ``logs`` {stdout, stderr}, ``rlimits``,
``user`` {uid, gid} or null, ``unreadable`` (paths the user must not read),
``namespaces`` {net, view} (local backend), ``gateway`` {socket, env}, ``entry``
{module, config}, ``agent_exec`` (verifier: see :mod:`agent_exec`), ``prepare_dirs``,
``delete_files``. See :mod:`launch` for how a phase starts, runs and ends.

A service request (``op = "service"``) starts the image's own workload, which phases never
kill (see :mod:`services`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import confine, kept_services, launch, passwd, processes, services
    from sandbox.inside.agent_exec import AgentExecServer
    from sandbox.inside.forwarder import start_forwarder
    from sandbox.inside.home_seed import op_seed_home
    from sandbox.inside.spaces import op_clear_dir, remove_entry
except ImportError:  # pragma: no cover - inside a sandbox
    # -I leaves our own dir off sys.path: the siblings live there (root-only).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confine  # type: ignore[no-redef,import-not-found]
    import kept_services  # type: ignore[no-redef,import-not-found]
    import launch  # type: ignore[no-redef,import-not-found]
    import passwd  # type: ignore[no-redef,import-not-found]
    import processes  # type: ignore[no-redef,import-not-found]
    import services  # type: ignore[no-redef,import-not-found]
    from agent_exec import AgentExecServer  # type: ignore[no-redef,import-not-found]
    from forwarder import start_forwarder  # type: ignore[no-redef,import-not-found]
    from home_seed import op_seed_home  # type: ignore[no-redef,import-not-found]
    from spaces import op_clear_dir, remove_entry  # type: ignore[no-redef,import-not-found]

PROTOCOL_VERSION = 1
_READ_CHUNK = 65536
#: Survivors listed in a result (the rest are counted, not described).
MAX_SURVIVORS_LISTED = 50


# --- the phase ---------------------------------------------------------------------------


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
            raise confine.PostureError("trial dir is a symlink: %s" % path)
        if entry.get("owner") == "agent" and user is not None:
            os.lchown(path, int(user["uid"]), int(user["gid"]))
        elif entry.get("owner") == "root":
            os.lchown(path, 0, 0)
        if "mode" in entry:
            os.chmod(path, int(entry["mode"]))


def run_phase(  # noqa: C901
    req: Dict[str, Any], reaper: processes.Reaper, control_fd: int = -1
) -> Dict[str, Any]:
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
    _prepare(req)
    if req.get("entry"):
        launch.load_entry(req["entry"])
    if req.get("agent_services") is not None:
        # A verifier beside the services an agent left running: which (or none, killed).
        result.update(kept_services.before_verifier(req, reaper))
    if req.get("keep_listeners"):
        # A new agent phase starts without the services an earlier one left.
        kept_services.end(reaper)
    phase = launch.Launch(req, reaper, scope_root=os.getpid())
    try:
        phase.start()
    except OSError as exc:
        if req.get("agent_services") is None or not launch.KEPT:
            raise
        # The kept services hold what the verifier needs to start (pids): the agent's
        # doing, so they go and the verifier runs without them (never an error to retry).
        result["agent_processes_alive"] = []
        result["agent_services_dropped"] = {
            "reason": "the verifier could not start beside them: %s" % exc,
            "killed": kept_services.end(reaper),
        }
        phase = launch.Launch(req, reaper, scope_root=os.getpid())
        phase.start()
    result["posture"], result["error"] = phase.posture, phase.error
    if req.get("agent_services") is not None:
        kept_services.resume()  # they run only beside the verifier, once it exists
    timeout = req.get("timeout_sec")
    deadline = started + float(timeout) if timeout else None
    forwarder = None
    if phase.gateway is not None:
        forwarder = start_forwarder(phase.gateway, str(req["gateway"]["socket"]))
        if forwarder is not None:
            result["gateway_port"] = forwarder.port
    exec_server = None
    if req.get("agent_exec") and phase.error is None:
        exec_server = AgentExecServer(req["agent_exec"], reaper, deadline, phase.pid).start()
    limit = int(req.get("max_output_bytes", 1 << 20))
    logs = req.get("logs") or {}
    captures = [
        launch.Capture(phase.out_r, logs.get("stdout"), limit),
        launch.Capture(phase.err_r, logs.get("stderr"), limit),
    ]
    extra = {control_fd: lambda: False} if control_fd >= 0 else None
    how = launch.run_until(
        phase,
        captures,
        stdin_data=(req.get("stdin") or "").encode(),
        deadline=deadline,
        extra=extra,
    )
    result["timed_out"] = how == "deadline"
    if how == "stopped":
        result["harness_gone"] = True
    result["process_sec"] = time.monotonic() - phase.exec_at
    # The phase is over: no more model calls or agent commands, then record what outlived
    # the main process and kill everything.
    if exec_server is not None:
        result["agent_exec_calls"] = exec_server.stop()
    if forwarder is not None:
        result["gateway_connections"] = forwarder.stop()
    # One scan of the host's processes for the record and the kill's first pass; none for
    # a phase in its own pid namespace (its own /proc and its init's pidfd say it all).
    entries = None if phase.namespaced else processes.live_entries()
    if req.get("keep_listeners") and entries is not None:
        # agent_services = keep: its listening processes outlive it (kept_services).
        unread: Dict[str, Any] = {}
        try:
            kept = kept_services.keep_listeners(phase, entries, req.get("user"), reaper, unread)
        except (OSError, RuntimeError, ValueError) as exc:
            kept = []
            result["agent_services_error"] = "%s: %s" % (type(exc).__name__, exc)
        result["agent_services_kept"] = kept
        if unread:
            result["agent_services_unread"] = unread
    if entries is not None:
        # What is left of the phase is stopped before it is described and killed: a fork
        # bomb would otherwise keep the CPU (its cgroup is the supervisor's) for all that.
        processes.stop_all(
            lambda: phase.processes(processes.live_entries()), phase.processes(entries)
        )
    survivors = phase.survivors(entries)
    result["survivors"] = survivors[:MAX_SURVIVORS_LISTED]
    result["survivor_count"] = len(survivors)
    try:
        result["killed"] = phase.kill(entries)
    except RuntimeError as exc:
        result["error"] = result["error"] or {"type": "KillError", "message": str(exc)}
    kept_services.adopt(phase)
    if req.get("agent_services") is not None:
        # Stopped until the next grading phase; after the verifier, nothing of the agent's
        # runs: they are killed before its reward is read.
        try:
            if req["agent_services"].get("last"):
                result["agent_services_ended"] = kept_services.end(reaper)
            else:
                kept_services.pause()
        except RuntimeError as exc:
            result["error"] = result["error"] or {"type": "KillError", "message": str(exc)}
    result.update(phase.outcome())
    if phase.keep:
        kept_services.drain_beside(captures)  # the kept processes still hold the pipes
    else:
        launch.drain(captures, time.monotonic() + launch.DRAIN_GRACE_SEC)
    phase.close()
    result["stdout_bytes"] = captures[0].total
    result["stderr_bytes"] = captures[1].total
    # A capture whose file's space was full (a root agent filled it) kept less too.
    result["output_truncated"] = any(c.truncated or c.write_error for c in captures)
    result["duration_sec"] = time.monotonic() - started
    return result


# --- file operations (the docker backend has no other safe way in or out) -----------------


def _evidence() -> Any:
    """The sibling ``evidence`` module (mounted next to this file in a container)."""
    try:
        from sandbox.inside import evidence
    except ImportError:  # pragma: no cover - inside a sandbox
        import evidence  # type: ignore[no-redef,import-not-found]
    return evidence


def _owner(spec: Optional[Dict[str, Any]]) -> Optional[Tuple[int, int]]:
    if not spec:
        return None
    return int(spec["uid"]), int(spec["gid"])


def op_whois(req: Dict[str, Any]) -> Dict[str, Any]:
    """Resolve a user name (or numeric id) against the sandbox's own /etc/passwd.

    Parsed by :mod:`passwd`, never through NSS (whose modules the container's root names).
    """
    name = str(req["name"])
    key: Any = int(name) if name.isdigit() and name.isascii() else name
    entry = passwd.lookup(key)
    if entry is None:
        if isinstance(key, int):
            return {"uid": key, "gid": key, "home": None}
        raise ValueError("user %r does not exist in the sandbox image" % name)
    return {"uid": entry.uid, "gid": entry.gid, "home": entry.home}


def op_reset_dir(req: Dict[str, Any]) -> Dict[str, Any]:
    """Recreate ``path`` empty (symlink-safe removal, any depth), with owner and mode.

    ``keep_dir``: a dir there (a mount point, say) stays and only its entries go. It gets
    its owner and mode before they go: a process still running (a service the agent left,
    ``agent_services = keep``) can add nothing the new owner would then find there.
    """
    path = req["path"]
    parent, name = os.path.split(os.path.normpath(path))
    owner = _owner(req.get("owner")) or (0, 0)
    fd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if req.get("keep_dir") and os.path.isdir(path) and not os.path.islink(path):
            top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchown(top, owner[0], owner[1])
                os.fchmod(top, int(req.get("mode", 0o755)))
                for entry in os.listdir(top):
                    remove_entry(top, entry)
            finally:
                os.close(top)
        else:
            remove_entry(fd, name)
    finally:
        os.close(fd)
    os.makedirs(path, exist_ok=True)
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
            limits=ev.Limits.from_dict(req.get("limits")),
        )
        return {"files": files, "events": [e.as_dict() for e in events]}
    limit = min(int(req["max_file_bytes"]), int(req["max_total_bytes"]))
    data, event = ev.read_file("/", path.lstrip("/"), max_bytes=limit, truncate=True)
    events = [] if event is None or event.kind == "missing" else [event.as_dict()]
    if data is None:
        return {"files": [], "events": events}
    return {"files": [{"path": "", "data": base64.b64encode(data).decode()}], "events": events}


def op_scan_special(req: Dict[str, Any]) -> Dict[str, Any]:
    """List the FIFOs, sockets and devices under ``path`` (never opened, nothing read).

    Under gVisor such files exist only inside the sandbox: the host, which copies the
    evidence, cannot see them, so their tampering events come from here.
    """
    ev = _evidence()
    events = ev.walk_tree(
        "/",
        req["path"].lstrip("/"),
        lambda sub, fd, limit: (0, False),
        max_file_bytes=1,
        max_total_bytes=1 << 62,
    )
    special = ("fifo", "socket", "device")
    return {"events": [e.as_dict() for e in events if e.kind in special]}


def op_space(req: Dict[str, Any]) -> Dict[str, Any]:
    """The size and free bytes of the filesystem holding ``path`` (``statvfs``)."""
    st = os.statvfs(req["path"])
    return {"total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def op_batch(req: Dict[str, Any]) -> Dict[str, Any]:
    """Several file ops in one round trip, in order; the first failure ends the batch."""
    results = []
    for item in req.get("ops") or []:
        name = item.get("op")
        if name not in _OPS or name == "batch":
            raise ValueError("unknown supervisor op in a batch: %r" % (name,))
        results.append(_OPS[name](item))
    return {"results": results}


_OPS = {
    "batch": op_batch,
    "whois": op_whois,
    "reset_dir": op_reset_dir,
    "chown_tree": op_chown_tree,
    "put": op_put,
    "read": op_read,
    "archive": op_archive,
    "scan_special": op_scan_special,
    "space": op_space,
    "clear_dir": op_clear_dir,
    "seed_home": op_seed_home,
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
    # Nothing below may be ptraced or dumped by the agent; orphans of a phase come back to
    # us (a container's pid 1 is their reaper anyway; on the host we ask to be a subreaper).
    confine.prctl(confine.PR_SET_DUMPABLE, 0)
    if os.getpid() != 1:
        try:
            confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
        except OSError:
            pass  # the phase's own pid namespace (local) or pid 1 (docker) covers it
    os.umask(0o077)
    # Our working dir is our own (read-only, root-only) dir, never the agent's workspace:
    # nothing the agent writes can be reached by a relative path of ours or of libc's.
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    # A root agent may signal us (launch.ignore_signals); phases get the defaults back.
    launch.ignore_signals()
    reaper = processes.Reaper()
    channel = _Channel(os.dup(0))
    out = os.fdopen(os.dup(1), "w")
    # Our own stdio must never be shared with a phase: point it at /dev/null.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    while True:
        nonce = None
        try:
            req = channel.read_request()
            if req is None:
                return 0
            nonce = req.get("nonce")
            if req.get("version") != PROTOCOL_VERSION:
                raise ValueError(
                    "supervisor protocol %r, expected %d" % (req.get("version"), PROTOCOL_VERSION)
                )
            op = req.get("op", "run")
            if op == "run":
                result = run_phase(req, reaper, channel.fd)
            elif op == "service":
                result = {"version": PROTOCOL_VERSION, "error": None}
                result.update(services.start_service(req, reaper))
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
            if isinstance(exc, OSError) and exc.errno:
                result["error"]["errno"] = exc.errno  # ENOSPC: whose space was full
        reaper.reap()
        if nonce is not None:
            result["nonce"] = nonce  # the harness's proof that this answer is ours
        out.write(json.dumps(result) + "\n")
        out.flush()
        if result.get("harness_gone"):
            return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Nothing is left to clean up: skip the interpreter's teardown (several ms per trial).
    os._exit(code)

"""Running the agent's code for the verifier, as the agent (stdlib, Python >= 3.9).

A verifier that must run what the agent wrote (import its module, run its program) should
not do it in its own process: code that shares the grader's process can write the verdict
(``os._exit(0)`` after a "passed" line, a ``reward.txt`` of its own, a patched ``__eq__``).
During the verifier phase the supervisor listens on a unix socket that only the verifier's
user can open (``HARNESS_AGENT_EXEC_SOCKET``); the ``HARNESS_AGENT_EXEC`` command
(:mod:`run_as_agent`) sends one request per command, and the supervisor runs it exactly like
an agent phase — the agent's uid, no capabilities, ``no_new_privs``, the seccomp filter,
the agent's root view in the local sandbox — under a deadline, kills everything it left,
and answers with its exit status and (capped) output. The grader then judges that output
as data.

Requests are served one at a time: every process of the agent's uid is killed after each.
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import threading
import time
from typing import Any, Dict, Optional

try:  # in the harness: the sandbox.inside package; inside a sandbox: siblings on sys.path
    from sandbox.inside import launch as launching
    from sandbox.inside import processes
except ImportError:  # pragma: no cover - inside a sandbox
    import launch as launching  # type: ignore[no-redef,import-not-found]
    import processes  # type: ignore[no-redef,import-not-found]

DEFAULT_MAX_OUTPUT = 16 << 20
MAX_REQUEST_BYTES = 64 << 20


def _bind_unix(sock: socket.socket, path: str) -> None:
    """Bind to ``path``, even one longer than a unix socket address allows (108 bytes).

    A long path is reached through ``/proc/self/fd/<dir fd>/<name>``: the host path of a
    local trial's dir can be long, that alias never is.
    """
    if len(path.encode()) < 100:
        sock.bind(path)
        return
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind("/proc/self/fd/%d/%s" % (fd, os.path.basename(path)))
    finally:
        os.close(fd)


class AgentExecServer:
    """Serves agent commands for the verifier while its phase runs.

    Args:
        spec: ``{"listen": path, "owner": {"uid", "gid"} | None, "template": agent request,
            "max_output_bytes": int, "refused": reason}``; the template is a phase request
            without argv; with ``refused``, every command is answered with that error.
        reaper: The supervisor's reaper.
        deadline: The verifier phase's deadline (monotonic); no command outlives it.
        verifier: The verifier's own process, whose tree no command's sweep may touch.
    """

    def __init__(
        self,
        spec: Dict[str, Any],
        reaper: processes.Reaper,
        deadline: Optional[float],
        verifier: Optional[int] = None,
    ) -> None:
        self.spec = spec
        self.reaper = reaper
        self.deadline = deadline
        self.verifier = verifier
        self.path = str(spec["listen"])
        self.served = 0
        self._stop_r, self._stop_w = os.pipe()
        self._sock: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "AgentExecServer":
        """Listen on the socket (owned by the verifier's user, mode 0600) and serve."""
        parent = os.path.dirname(self.path)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        if os.path.lexists(self.path):
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _bind_unix(sock, self.path)
        os.chmod(self.path, 0o600)
        owner = self.spec.get("owner")
        if owner:
            os.lchown(parent, int(owner["uid"]), int(owner["gid"]))
            os.lchown(self.path, int(owner["uid"]), int(owner["gid"]))
        sock.listen(8)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._sock is not None
        while True:
            ready = select.select([self._sock.fileno(), self._stop_r], [], [])[0]
            if self._stop_r in ready:
                return
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            try:
                self._answer(conn)
            except Exception as exc:  # one bad request never stops the server
                self._reply(conn, {"error": {"type": type(exc).__name__, "message": str(exc)}})
            finally:
                conn.close()

    @staticmethod
    def _reply(conn: socket.socket, answer: Dict[str, Any]) -> None:
        try:
            conn.sendall((json.dumps(answer) + "\n").encode())
        except OSError:
            pass

    def _read_request(self, conn: socket.socket) -> Dict[str, Any]:
        conn.settimeout(30)
        buf = b""
        while b"\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_REQUEST_BYTES:
                raise ValueError("request larger than %d bytes" % MAX_REQUEST_BYTES)
        req = json.loads(buf.partition(b"\n")[0].decode("utf-8"))
        if not isinstance(req, dict):
            raise ValueError("request must be a JSON object")
        argv = req.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        return req

    def _answer(self, conn: socket.socket) -> None:
        req = self._read_request(conn)
        if self.spec.get("refused"):
            # The backend cannot keep the verifier's confidential env from the command.
            self._reply(conn, {"error": {"type": "Refused", "message": self.spec["refused"]}})
            return
        template = dict(self.spec["template"])
        phase = dict(template)
        phase["argv"] = list(req["argv"])
        if req.get("cwd"):
            phase["cwd"] = str(req["cwd"])
        env = dict(template.get("env") or {})
        env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
        phase["env"] = env
        stdin = base64.b64decode(req.get("stdin") or "")
        limit = int(req.get("max_output_bytes") or self.spec.get("max_output_bytes") or 0)
        limit = limit or DEFAULT_MAX_OUTPUT
        started = time.monotonic()
        deadline = self.deadline
        if req.get("timeout_sec"):
            mine = started + float(req["timeout_sec"])
            deadline = mine if deadline is None else min(deadline, mine)
        launch = launching.Launch(phase, self.reaper, scope_root=None, spare=self.verifier)
        launch.start()
        captures = [
            launching.Capture(launch.out_r, None, limit),
            launching.Capture(launch.err_r, None, limit),
        ]
        how = launching.run_until(
            launch,
            captures,
            stdin_data=stdin,
            deadline=deadline,
            extra={self._stop_r: lambda: False},
        )
        survivors = launch.survivors()
        launch.kill()
        launching.drain(captures, time.monotonic() + launching.DRAIN_GRACE_SEC)
        launch.close()
        self.served += 1
        answer: Dict[str, Any] = {
            **launch.outcome(),
            "timed_out": how == "deadline",
            "stopped": how == "stopped",
            "error": launch.error,
            "survivors": len(survivors),
            "duration_sec": time.monotonic() - started,
            "stdout": base64.b64encode(bytes(captures[0].memory)).decode(),
            "stderr": base64.b64encode(bytes(captures[1].memory)).decode(),
            "stdout_bytes": captures[0].total,
            "stderr_bytes": captures[1].total,
            "truncated": any(c.truncated for c in captures),
        }
        self._reply(conn, answer)

    def stop(self) -> int:
        """Stop serving (a command still running is killed); return how many were served."""
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(30)
        if self._sock is not None:
            self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._stop_r)
        os.close(self._stop_w)
        return self.served

"""The local backend: trial processes on the host, under the supervisor.

Started as root, it gives every concurrent trial its own uid/gid (``base + slot``), so a
uid sweep kills exactly one trial's processes and trials cannot read each other's roots;
the agent runs in a private mount namespace where the task sources and the run dir are
covered. Started as another user it cannot drop privileges and says plainly that it is not
a security boundary.
"""

from __future__ import annotations

import fcntl
import os
import py_compile
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sandbox.backend import (
    SUPERVISOR_PATH,
    SUPERVISOR_SIBLINGS,
    PhaseRequest,
    PhaseResult,
    Sandbox,
    SandboxPaths,
    SandboxSpec,
    SupervisorSession,
    phase_extras,
)
from sandbox.environment import FIXED_PATH
from sandbox.errors import EnvironmentStartError, SandboxError
from sandbox.evidence import EvidenceEvent, copy_file, copy_tree, read_file
from sandbox.seeding import seed_workspace
from sandbox.supervisor import uid_processes

DEFAULT_SANDBOX_UID = 65532
DEFAULT_SANDBOX_GID = 65532
IDENTITY_LOCK_DIR = Path("/run/harness/identities")
NOT_A_BOUNDARY = (
    "the local sandbox is not running as root, so it cannot drop privileges: it is NOT a "
    "security boundary (run as root, or use --sandbox docker, for untrusted agents)"
)


def is_root() -> bool:
    """Whether this process can drop privileges (effective uid 0)."""
    return os.geteuid() == 0


class IdentityPool:
    """Hands out one uid/gid pair per running trial: ``base + slot``.

    A slot is also locked host-wide (``flock`` on a file under ``lock_dir``), so two harness
    processes on one host never give the same uid to concurrent trials: the uid sweep that
    ends a trial must only ever hit that trial's processes.
    """

    def __init__(
        self,
        base_uid: int = DEFAULT_SANDBOX_UID,
        base_gid: int = DEFAULT_SANDBOX_GID,
        *,
        lock_dir: Path | None = None,
        max_slots: int = 1024,
    ):
        if base_uid <= 0 or base_gid <= 0:
            raise ValueError("sandbox uid and gid must be positive integers")
        self.base_uid = base_uid
        self.base_gid = base_gid
        self.max_slots = max_slots
        # A fixed path, not under TMPDIR: every harness process on the host must see it.
        self.lock_dir = lock_dir or IDENTITY_LOCK_DIR
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()

    def _try_lock(self, uid: int) -> int | None:
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.lock_dir / f"uid-{uid}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def acquire(self) -> tuple[int, int]:
        """Reserve the lowest free slot (here and host-wide) and return its (uid, gid)."""
        with self._lock:
            for slot in range(self.max_slots):
                uid = self.base_uid + slot
                if uid in self._held:
                    continue
                fd = self._try_lock(uid)
                if fd is not None:
                    self._held[uid] = fd
                    return uid, self.base_gid + slot
        raise SandboxError(f"no free sandbox uid in {self.base_uid}..+{self.max_slots}")

    def release(self, uid: int) -> None:
        """Free the slot of ``uid``."""
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # closing the fd drops the flock


_DEFAULT_POOL = IdentityPool()


def spawn_supervisor(python: str, script: str) -> subprocess.Popen[bytes]:
    """Start a supervisor: isolated interpreter, empty env, own session, pipes for stdio."""
    return subprocess.Popen(
        [python, "-I", "-S", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": FIXED_PATH},
        cwd="/",
        close_fds=True,
        start_new_session=True,
    )


class SupervisorPool:
    """Keeps a started supervisor ready, so no trial waits for an interpreter to boot.

    Each supervisor serves exactly one trial (then exits); taking one starts its
    replacement in the background. The supervisor runs from bytecode compiled once into a
    private dir, which saves compiling it at every start.
    """

    def __init__(self, python: str = sys.executable, spares: int = 1) -> None:
        self.python = python
        self.spares = spares
        self._ready: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="harness-supervisor-")
        self._script = os.path.join(self._dir, "supervisor.pyc")
        py_compile.compile(str(SUPERVISOR_PATH), cfile=self._script, doraise=True)
        for sibling in SUPERVISOR_SIBLINGS:
            source = SUPERVISOR_PATH.with_name(f"{sibling}.py")
            target = os.path.join(self._dir, f"{sibling}.pyc")
            py_compile.compile(str(source), cfile=target, doraise=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return spawn_supervisor(self.python, self._script)

    def take(self) -> subprocess.Popen[bytes]:
        """A started supervisor for one trial; a replacement starts right away."""
        with self._lock:
            proc = None
            while self._ready and proc is None:
                candidate = self._ready.pop(0)
                if candidate.poll() is None:
                    proc = candidate
            if proc is None:
                proc = self._spawn()
            while len(self._ready) < self.spares:
                self._ready.append(self._spawn())
        return proc

    def close(self) -> list[str]:
        """Stop the spare supervisors and remove the compiled copy; nothing can leak here."""
        with self._lock:
            for proc in self._ready:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait()
                if proc.stdout:
                    proc.stdout.close()
            self._ready.clear()
        shutil.rmtree(self._dir, ignore_errors=True)
        return []


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _remove_tree(path: Path) -> None:
    """Remove a tree without following symlinks, even if the agent chmod'ed parts 000."""

    def fix_and_retry(func: Any, failed: str, _exc: Any) -> None:
        parent = os.path.dirname(failed)
        for target in (parent, failed):
            try:
                if not os.path.islink(target):
                    os.chmod(target, stat.S_IRWXU)
            except OSError:
                pass
        func(failed)

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=fix_and_retry)


class LocalSandbox(Sandbox):
    """A trial root on the host, processes run by the supervisor."""

    backend = "local"

    def __init__(
        self,
        spec: SandboxSpec,
        *,
        identities: IdentityPool | None = None,
        supervisors: SupervisorPool | None = None,
        python: str = sys.executable,
        tmp_dir: Path | None = None,
    ) -> None:
        super().__init__(spec)
        self._identities = identities or _DEFAULT_POOL
        self._supervisors = supervisors
        self._python = python
        self._tmp_dir = tmp_dir
        self._root: Path | None = None
        self._identity: tuple[int, int] | None = None
        self._session: SupervisorSession | None = None
        self._stopped = False

    # -- layout ---------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """The trial root on the host."""
        if self._root is None:
            raise SandboxError("the sandbox has not been started")
        return self._root

    @property
    def identity(self) -> tuple[int, int] | None:
        """The (uid, gid) the agent runs as, or None when not root."""
        return self._identity

    @property
    def paths(self) -> SandboxPaths:  # noqa: D102 - documented on the base class
        root = self.root
        return SandboxPaths(
            root=str(root),
            workspace=str(root / "workspace"),
            home=str(root / "home"),
            session=str(root / "session"),
            verifier=str(root / "verifier"),
            tests=str(root / "tests"),
            solution=str(root / "solution"),
            instruction=str(root / "instruction.md"),
            logs=str(root / "logs"),
        )

    def _host_path(self, path: str) -> Path:
        resolved = Path(os.path.normpath(path))
        if resolved != self.root and self.root not in resolved.parents:
            raise SandboxError(f"path {path} is outside the trial root")
        return resolved

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:  # noqa: D102
        if self._root is not None:
            raise SandboxError("the sandbox was already started")
        try:
            self._root = Path(
                tempfile.mkdtemp(prefix="harness-trial-", dir=self._tmp_dir)
            ).resolve()
            for name in ("workspace", "home", "session", "artifacts", "logs"):
                (self._root / name).mkdir(mode=0o700)
            (self._root / "home" / "tmp").mkdir(mode=0o700)
            seed_workspace(self._root / "workspace", self.spec.fixtures)
            if is_root():
                uid, gid = self._identity = self._identities.acquire()
                # Only this trial's group may traverse the root; nobody else may list it.
                os.chown(self._root, 0, gid)
                os.chmod(self._root, 0o710)
                for name in ("workspace", "home", "session"):
                    _chown_tree(self._root / name, uid, gid)
        except SandboxError:
            raise
        except Exception as exc:
            raise EnvironmentStartError(f"cannot create the local trial root: {exc}") from exc

    def _safe_parent(self, target: Path, *, agent_readable: bool) -> None:
        """Make every dir from the root to ``target``'s parent a real, root-owned dir.

        Agents are dead between phases, but what they planted is still there: a symlink
        anywhere on the way is refused instead of written through (as root).
        """
        current = self.root
        for part in target.relative_to(self.root).parts[:-1]:
            current = current / part
            try:
                st = current.lstat()
            except FileNotFoundError:
                current.mkdir(mode=0o755 if agent_readable else 0o700)
                if is_root():
                    os.lchown(current, 0, 0)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise SandboxError(f"refusing to write through {current}: not a plain directory")

    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:  # noqa: D102
        target = self._host_path(dest)
        self._safe_parent(target, agent_readable=agent_readable)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(target, mode if agent_readable else mode & 0o700)

    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:  # noqa: D102
        target = self._host_path(dest)
        self._safe_parent(target, agent_readable=agent_readable)
        _remove_tree(target)
        shutil.copytree(src, target, symlinks=True)
        for dirpath, dirnames, filenames in os.walk(target):
            os.chmod(dirpath, 0o755 if agent_readable else 0o700)
            for name in filenames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                executable = os.stat(full).st_mode & 0o100
                mode = 0o755 if executable else 0o644
                os.chmod(full, mode if agent_readable else mode & 0o700)
            if is_root():
                for name in [*dirnames, *filenames]:
                    os.lchown(os.path.join(dirpath, name), 0, 0)
        if is_root():
            os.lchown(target, 0, 0)

    def _supervisor(self) -> SupervisorSession:
        if self._session is None:
            if self._supervisors is not None:
                proc = self._supervisors.take()
            else:
                proc = spawn_supervisor(self._python, str(SUPERVISOR_PATH))
            self._session = SupervisorSession(proc)
        return self._session

    def run_phase(self, request: PhaseRequest) -> PhaseResult:  # noqa: D102
        root = self.root
        logs = root / "logs"
        payload: dict[str, Any] = {
            "argv": list(request.argv),
            "env": dict(request.env),
            "secret_env": dict(request.secret_env),
            "cwd": request.cwd or self.paths.workspace,
            "stdin": request.stdin,
            "timeout_sec": request.timeout_sec,
            "max_output_bytes": request.max_output_bytes,
            "logs": {
                "stdout": str(logs / f"{request.role}.stdout"),
                "stderr": str(logs / f"{request.role}.stderr"),
            },
            "rlimits": {"core": 0, "nofile": self.spec.resources.nofile},
            "user": None,
            **phase_extras(
                request,
                str(self.spec.gateway_socket) if self.spec.gateway_socket is not None else None,
            ),
        }
        if request.role == "agent" and self._identity is not None:
            uid, gid = self._identity
            payload["user"] = {"uid": uid, "gid": gid}
            payload["rlimits"]["nproc"] = self.spec.resources.pids
            protected = [str(p) for p in self.spec.protected_paths if p.exists()]
            payload["mask_paths"] = protected
            payload["isolate_network"] = not self.spec.allow_internet
            payload["unreadable"] = [
                *protected,
                str(logs),
                str(root / "artifacts"),
                str(root / "tests"),
                str(root / "verifier"),
                *([str(self.spec.gateway_socket.parent)] if self.spec.gateway_socket else []),
            ]
        return PhaseResult.from_json(self._supervisor().request(payload))

    def reset_verifier_dir(self) -> None:  # noqa: D102
        target = self.root / "verifier"
        _remove_tree(target)
        target.mkdir(mode=0o755)
        if is_root():
            os.chown(target, 0, 0)

    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:  # noqa: D102
        rel = os.path.relpath(self._host_path(path), self.root)
        return read_file(self.root, rel, max_bytes=max_bytes)

    def copy_out(  # noqa: D102
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        host = self._host_path(path)
        rel = os.path.relpath(host, self.root)
        if host.is_dir() and not host.is_symlink():
            return copy_tree(
                self.root, rel, dest, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
            )
        return copy_file(self.root, rel, dest, max_bytes=min(max_file_bytes, max_total_bytes))

    def abort(self) -> None:  # noqa: D102
        if self._session is not None:
            self._session.kill()
        self._sweep()

    def _sweep(self) -> None:
        """Belt and braces after the supervisor: kill anything left with the trial's uid."""
        if self._identity is None:
            return
        uid = self._identity[0]
        for _ in range(50):
            pids = uid_processes(uid)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        raise SandboxError(f"processes of uid {uid} survived the final sweep")

    def stop(self) -> None:  # noqa: D102
        if self._stopped:
            return
        self._stopped = True
        errors: list[Exception] = []
        for action in (self._close_supervisor, self._sweep, self._remove_root):
            try:
                action()
            except Exception as exc:
                errors.append(exc)
        if self._identity is not None:
            self._identities.release(self._identity[0])
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("local sandbox stop failed", errors)

    def _close_supervisor(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _remove_root(self) -> None:
        if self._root is not None:
            _remove_tree(self._root)

    def describe(self) -> dict[str, Any]:  # noqa: D102
        info: dict[str, Any] = {"backend": self.backend, "image": None, "root": is_root()}
        if self._identity is not None:
            info["uid"], info["gid"] = self._identity
        else:
            info["warning"] = NOT_A_BOUNDARY
        return info

"""The local backend: trial processes on the host, each phase in its own root view.

Started as root, every concurrent trial gets two identities of its own, locked host-wide:
the agent's (``base + slot``) and the grader's (``base + max_slots + slot``). Each phase — the
agent, the verifier, and every command the verifier runs as the agent — runs under the
supervisor in fresh mount, pid, ipc and uts namespaces (and a network namespace with only
loopback and the model gateway's forwarder, whatever the task asks: ``NETWORK_MODES``), in a
root view that shows the host's system dirs
read-only and the trial's own dirs at ``/trial/...``, and nothing else: no other trial, no
task set, no run dir, no ``/root`` or ``/home``, no host process. Everything the trial can
write lives on its own size-limited filesystem (:mod:`sandbox.storage`), including its
private ``/tmp``, ``/var/tmp`` and ``/dev/shm``.
Its ``memory_mb`` (no swap), ``cpus`` and ``pids`` are enforced in a cgroup of its own
(:mod:`sandbox.local.cgroups`), which every launch of every phase joins before it runs, and
which is killed and removed when the sandbox stops.

Started as another user it cannot drop privileges or build views and says plainly that it
is not a security boundary.
"""

from __future__ import annotations

import fcntl
import os
import py_compile
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from sandbox.backend import (
    SUPERVISOR_PATH,
    Capacity,
    CloseReport,
    PhaseRequest,
    PhaseResult,
    PhaseWire,
    Role,
    Sandbox,
    SandboxPaths,
    SandboxSpec,
    SupervisorSession,
    dir_files,
    inside_modules,
    phase_payload,
)
from sandbox.environment import FIXED_PATH
from sandbox.errors import EnvironmentStartError, PermanentStartError, SandboxDied, SandboxError
from sandbox.evidence_diff import ObjectStore, snapshot_tree
from sandbox.inside import git_repos, home_seed
from sandbox.inside.evidence import EvidenceEvent, copy_path, read_file
from sandbox.inside.processes import kill_all, live_entries, uid_processes
from sandbox.local.cgroups import Limits, Support, TrialCgroup, probe
from sandbox.network_policy import NetworkPolicy
from sandbox.options import DEFAULT_SANDBOX_GID, DEFAULT_SANDBOX_UID
from sandbox.removal import remove_tree
from sandbox.scratch import PARKED, park, unpark
from sandbox.seeding import chown_tree, copy_tree_nofollow, seed_workspace
from sandbox.storage import StorageBudget, TrialStorage, reserve, storage_supported
from sandbox.storage_pool import PreparedStorage, StoragePool
from sandbox.users import is_root, is_root_user
from sandbox.verifier_tools import EXEC_DIR, EXEC_SOCKET, TOOLS_MOUNT, stage_tools

#: Ids no sandbox identity may take.
_RESERVED_IDS = frozenset({0, 65534, 65535, 2**32 - 1})
IDENTITY_LOCK_DIR = Path("/run/harness/identities")
#: Where a trial's own dirs appear inside its views.
VIEW_ROOT = "/trial"
NOT_A_BOUNDARY = (
    "the local sandbox is not running as root, so it cannot drop privileges: it is NOT a "
    "security boundary (run as root, or use --sandbox docker, for untrusted agents)"
)
#: What to do when an agent's CLI must be shown from the host (an installed agent) and
#: the harness is not root: the local sandbox shows host dirs only in its root view.
AGENT_MOUNTS_NEED_ROOT = (
    "Run the harness as root (sudo -E .venv/bin/harness run ...), or use --sandbox docker"
)
#: The network modes a local phase can get: its own network namespace, with loopback and
#: the model gateway's forwarder. The host's network namespace is never shared with a phase
#: (its listeners on 127.0.0.1 would be the agent's), and no egress filter runs here.
NETWORK_MODES = frozenset({"no-network"})
#: Why ``public`` and ``allowlist`` are refused here, and the way on (``Capacity``).
NETWORK_PROBLEM = (
    "the local sandbox gives a phase loopback and the model gateway only (its own network "
    "namespace; no egress filter runs here); run the task with --sandbox docker"
)
INTERNET_REFUSED = (
    "the {role} phase's network_mode = {mode!r}: "
    + NETWORK_PROBLEM
    + ", or with --network none for the agent phase"
)


def _steps(
    tables: tuple[Mapping[str, NetworkPolicy], ...],
) -> list[tuple[str, Mapping[str, NetworkPolicy]]]:
    """Each step's policies, with the prefix a refusal of one takes."""
    return [(f"step {index}: ", table) for index, table in enumerate(tables)]


ROOT_VERIFIER_REFUSED = (
    "the local sandbox never runs task code as host root, and this task's [verifier].user "
    "is root: run it with --sandbox docker (the verifier is then root in its container only)"
)
#: Dirs on the trial's filesystem, with their owner and mode.
_AGENT_DIRS = (
    ("workspace", 0o755),
    ("home", 0o700),
    ("home/tmp", 0o700),
    ("session", 0o700),
    ("artifacts", 0o755),
)
_SHARED_TMP = (("tmp", "/tmp"), ("var-tmp", "/var/tmp"), ("shm", "/dev/shm"))
#: What the cgroup support of a sandbox made without one is (probed once, on first use).
_AUTO_SUPPORT: list[Support] = []
_AUTO_LOCK = threading.Lock()


def default_cgroup_support() -> Support:
    """This host's cgroup support, probed once per process (for sandboxes made directly)."""
    with _AUTO_LOCK:
        if not _AUTO_SUPPORT:
            _AUTO_SUPPORT.append(probe())
        return _AUTO_SUPPORT[0]


class Identity:
    """The uids/gids of one trial: the agent's and the grader's."""

    def __init__(self, uid: int, gid: int, grader_uid: int, grader_gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.grader_uid, self.grader_gid = grader_uid, grader_gid

    def __iter__(self) -> Iterator[int]:  # (uid, gid), as the agent's identity unpacks
        return iter((self.uid, self.gid))


def check_identity_range(base_uid: int, base_gid: int, count: int) -> None:
    """Refuse a uid/gid range that holds a reserved id or an existing account.

    The end of every trial kills every process of its uids: a range that covers ``nobody``
    or a real user would kill their processes.

    Raises:
        ValueError: naming the id in the way and how to move the range.
    """
    import grp
    import pwd

    uids, gids = range(base_uid, base_uid + count), range(base_gid, base_gid + count)
    if uids.stop > 2**32 - 1 or gids.stop > 2**32 - 1:
        raise ValueError(f"sandbox uid/gid range {base_uid}+{count} runs past 2**32 - 2")
    taken = [f"uid {i}" for i in _RESERVED_IDS if i in uids]
    taken += [f"gid {i}" for i in _RESERVED_IDS if i in gids]
    taken += [f"user {e.pw_name} (uid {e.pw_uid})" for e in pwd.getpwall() if e.pw_uid in uids]
    taken += [f"group {e.gr_name} (gid {e.gr_gid})" for e in grp.getgrall() if e.gr_gid in gids]
    if taken:
        raise ValueError(
            f"the local sandbox's ids {base_uid}..{base_uid + count - 1} (uid) / "
            f"{base_gid}..{base_gid + count - 1} (gid) include {', '.join(sorted(taken))}: "
            "set sandbox_uid/sandbox_gid to a range no account or service uses"
        )


class IdentityPool:
    """Hands out one agent and one grader identity per running trial.

    Slot ``n`` is the agent ``(base_uid + n, base_gid + n)`` and the grader
    ``(base_uid + max_slots + n, base_gid + max_slots + n)``. A slot is also locked host-wide
    (``flock`` on a file under ``lock_dir``), so two harness processes on one host never
    give the same uids to concurrent trials: the sweep that ends a trial must only ever hit
    that trial's processes.
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
        check_identity_range(base_uid, base_gid, 2 * max_slots)
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

    def acquire(self) -> Identity:
        """Reserve the lowest free slot (here and host-wide) and return its identities."""
        with self._lock:
            for slot in range(self.max_slots):
                uid = self.base_uid + slot
                if uid in self._held:
                    continue
                fd = self._try_lock(uid)
                if fd is not None:
                    self._held[uid] = fd
                    return Identity(
                        uid,
                        self.base_gid + slot,
                        self.base_uid + self.max_slots + slot,
                        self.base_gid + self.max_slots + slot,
                    )
        raise SandboxError(f"no free sandbox uid in {self.base_uid}..+{self.max_slots}")

    def release(self, uid: int) -> None:
        """Free the slot of agent uid ``uid``."""
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


def python_prefix(python: str) -> str:
    """The installation dir of ``python`` (bound read-only into the views)."""
    real = os.path.realpath(python)
    return os.path.dirname(os.path.dirname(real))


class SupervisorPool:
    """Keeps a started supervisor ready, so no trial waits for an interpreter to boot.

    Each supervisor serves exactly one trial (then exits); taking one starts its
    replacement in the background. The supervisor runs from bytecode compiled once into a
    private dir, which saves compiling it at every start. The pool also stages the
    verifier's tools once per run.
    """

    def __init__(self, python: str = sys.executable, spares: int = 1) -> None:
        self.python = python
        self.spares = spares
        self._ready: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="harness-supervisor-")
        self._script = os.path.join(self._dir, "supervisor.pyc")
        # The whole in-sandbox folder, the supervisor among it.
        for source in inside_modules():
            target = os.path.join(self._dir, f"{source.stem}.pyc")
            py_compile.compile(str(source), cfile=target, doraise=True)
        os.chmod(self._dir, 0o711)  # only the tools dir inside is readable by others
        self.tools = stage_tools(Path(self._dir) / "tools", [os.path.realpath(python)])

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

    def capacity(self) -> Capacity | None:
        """None: the local backend reports the host's CPUs and memory itself."""
        return None

    def close(self) -> CloseReport:
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
        return CloseReport()


def layout_trial_fs(fs: Path) -> None:
    """Make a trial's dirs on its filesystem: the agent's, the shared tmp dirs, the grader's.

    All are root's until the trial hands the agent's to its user.
    """
    os.chmod(fs, 0o755)
    for name, mode in _AGENT_DIRS:
        (fs / name).mkdir(mode=mode)
        os.chmod(fs / name, mode)
    for name, _target in _SHARED_TMP:
        (fs / name).mkdir()
        os.chmod(fs / name, 0o1777)
    for name in ("verifier", "grader", "exec"):
        (fs / name).mkdir(mode=0o700)


class LocalSandbox(Sandbox):
    """A trial root on the host, processes run by the supervisor in root views.

    Args:
        spec: The trial.
        identities: Where the trial's uids come from.
        supervisors: A pool of started supervisors (and the staged verifier tools).
        python: The Python that runs the supervisor when there is no pool.
        tmp_dir: Where trial roots are created (default: the temp dir).
        storage_budget: The run's disk budget for trial filesystems.
        storage_pool: Trial filesystems made ahead and removed in the background (as root);
            without it each trial makes and removes its own.
        cgroups: How the trial's ``memory_mb``/``cpus``/``pids`` are enforced: a probed
            :class:`~sandbox.local.cgroups.Support`, ``"auto"`` (probe this host once), or None
            (not enforced: the backend warned, ``local_limits = "warn"``).
        run_label: The run's name, in the trial cgroup's name (the sweep finds it by it).
    """

    backend = "local"

    def __init__(
        self,
        spec: SandboxSpec,
        *,
        identities: IdentityPool | None = None,
        supervisors: SupervisorPool | None = None,
        python: str = sys.executable,
        tmp_dir: Path | None = None,
        storage_budget: StorageBudget | None = None,
        storage_pool: StoragePool | None = None,
        cgroups: Support | Literal["auto"] | None = "auto",
        run_label: str = "direct",
    ) -> None:
        super().__init__(spec)
        self._cgroup_support = cgroups
        self._run_label = run_label
        self._cgroup: TrialCgroup | None = None
        self._limits_problem: str | None = None
        self._pool = storage_pool
        self._prepared: PreparedStorage | None = None
        self._identities = identities or _DEFAULT_POOL
        self._supervisors = supervisors
        self._python = python
        self._tmp_dir = tmp_dir
        self._budget = storage_budget
        self._root: Path | None = None
        self._identity: Identity | None = None
        #: Agent uids of earlier agents in this sandbox (their slots held until stop).
        self._former_uids: list[int] = []
        self._storage: TrialStorage | None = None
        self._promised_mb = 0
        self._session: SupervisorSession | None = None
        self._own_tools: Path | None = None
        self._solution_readable = False
        self._stopped = False

    # -- layout ---------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """The trial root on the host (root-only; the trial's filesystem is ``fs/``)."""
        if self._root is None:
            raise SandboxError("the sandbox has not been started")
        return self._root

    @property
    def fs(self) -> Path:
        """Host dir of everything the trial can see at ``/trial`` (its own filesystem)."""
        return self.root / "fs"

    @property
    def identity(self) -> tuple[int, int] | None:
        """The (uid, gid) the agent runs as, or None when not root."""
        if self._identity is None:
            return None
        return self._identity.uid, self._identity.gid

    @property
    def grader_identity(self) -> tuple[int, int] | None:
        """The (uid, gid) the verifier runs as, or None when not root."""
        if self._identity is None:
            return None
        return self._identity.grader_uid, self._identity.grader_gid

    @property
    def confined(self) -> bool:
        """Whether phases run dropped, in root views (the harness runs as root)."""
        return self._identity is not None

    @property
    @override
    def paths(self) -> SandboxPaths:
        top = VIEW_ROOT if self.confined else str(self.fs)
        return SandboxPaths.under(top, logs=str(self.root / "logs"))

    def host_path(self, path: str) -> Path:
        """The host path of an in-sandbox path (``/trial/...``, or the host logs dir).

        Raises:
            SandboxError: the path is outside the trial.
        """
        normal = os.path.normpath(path)
        if self.confined and (normal == VIEW_ROOT or normal.startswith(VIEW_ROOT + "/")):
            resolved = self.fs / os.path.relpath(normal, VIEW_ROOT)
        else:
            resolved = Path(normal)
        if resolved != self.root and self.root not in resolved.parents:
            raise SandboxError(f"path {path} is outside the trial root")
        return resolved

    def _scratch_view(self, path: str) -> str:
        """Where a phase's ``/tmp/...`` (or ``/var/tmp``, ``/dev/shm``) is in the trial view.

        Only for a path known to be the phase's: a host path may be under ``/tmp`` too.
        """
        normal = os.path.normpath(path)
        for name, target in _SHARED_TMP:
            if self.confined and (normal == target or normal.startswith(target + "/")):
                return f"{VIEW_ROOT}/{name}{normal[len(target) :]}"
        return normal

    # -- lifecycle ------------------------------------------------------------------------

    @override
    def start(self) -> None:  # noqa: C901
        if self._root is not None:
            raise SandboxError("the sandbox was already started")
        if is_root() and is_root_user(self.spec.verifier_user):
            raise PermanentStartError(ROOT_VERIFIER_REFUSED)
        if self.spec.agent_mounts and not is_root():
            # The run refuses this before any trial (LocalBackend.mount_problem); here for
            # a sandbox made another way (a Ray worker that is not root, a library caller).
            raise PermanentStartError(
                "an installed agent CLI needs the local sandbox to run as root (its root "
                f"view shows the CLI read-only). {AGENT_MOUNTS_NEED_ROOT}"
            )
        if self.spec.os != "linux":
            raise PermanentStartError(
                f'[environment].os = "{self.spec.os}" is not supported: the harness runs '
                "Linux sandboxes only"
            )
        if self.spec.gpus:
            raise PermanentStartError(
                f"the task needs {self.spec.gpus} GPU(s) and the local sandbox gives none; "
                "run it with --sandbox docker on an engine with GPUs"
            )
        # Every step's phases (a multi-step task's steps may differ), before anything runs.
        for where, table in (("", self.spec.networks), *_steps(self.spec.step_networks)):
            for role, policy in table.items():
                if policy.mode not in NETWORK_MODES:
                    raise PermanentStartError(
                        where + INTERNET_REFUSED.format(role=role, mode=policy.mode)
                    )
        if self.spec.allow_internet:
            raise PermanentStartError(INTERNET_REFUSED.format(role="agent", mode="public"))
        try:
            if is_root():
                self._identity = self._identities.acquire()
            if self._pool is not None and self._identity is not None and storage_supported():
                self._prepared = self._pool.take(
                    self.spec.resources.storage_mb, self._identity.grader_gid
                )
                self._root, self._storage = self._prepared.root.resolve(), self._prepared.storage
            else:
                self._root = Path(
                    tempfile.mkdtemp(prefix="harness-trial-", dir=self._tmp_dir)
                ).resolve()
            (self._root / "logs").mkdir(mode=0o700)
            if self._identity is not None:
                (self._root / "view").mkdir(mode=0o700)
                if self._prepared is None:
                    self._make_storage()
            else:
                self.fs.mkdir(mode=0o700)
            if self._prepared is None or not self._prepared.laid_out:
                layout_trial_fs(self.fs)
            seed_workspace(self.fs / "workspace", self.spec.fixtures)
            if self._identity is not None:
                self._make_cgroup()
                for name, _mode in _AGENT_DIRS:
                    if "/" not in name:
                        chown_tree(self.fs / name, self._identity.uid, self._identity.gid)
        except SandboxError:
            raise
        except Exception as exc:
            raise EnvironmentStartError(f"cannot create the local trial root: {exc}") from exc

    def _make_cgroup(self) -> None:
        """The trial's cgroup with its limits, which every phase joins before it runs."""
        support = self._cgroup_support
        if support == "auto":
            support = default_cgroup_support()
        if support is None:
            self._limits_problem = "not enforced (local_limits = warn)"
            return
        if support.version is None:
            self._limits_problem = f"not enforced: {support.problem}"
            return
        res = self.spec.resources
        limits = Limits(
            memory_mb=res.memory_mb,
            cpus=res.cpus,
            pids=res.pids,
            cpu_policy=self.spec.cpu_policy,
            memory_policy=self.spec.memory_policy,
        )
        self._cgroup = TrialCgroup.create(support, self._run_label, limits)

    @property
    def cgroup(self) -> TrialCgroup | None:
        """The trial's cgroup (None where its limits are not enforced)."""
        return self._cgroup

    @override
    def new_agent_user(self) -> tuple[int, int] | None:
        identity = self._identity
        if identity is None:
            return None
        # The phase's end killed the earlier agent's processes; this makes sure of it.
        self._sweep_uids((identity.uid,))
        slot = self._identities.acquire()  # a slot of its own: host-wide unique uids
        self._former_uids.append(identity.uid)
        self._identity = Identity(slot.uid, slot.gid, identity.grader_uid, identity.grader_gid)
        for name, _mode in _AGENT_DIRS:
            if "/" not in name:
                chown_tree(self.fs / name, slot.uid, slot.gid)
        # Whatever mode the earlier agent gave its home, no other uid may enter it now:
        # the new user's private dirs (a judge's verdict) live there.
        os.chmod(self.fs / "home", 0o700)
        return slot.uid, slot.gid

    def _make_storage(self) -> None:
        assert self._identity is not None
        if not storage_supported():
            self.fs.mkdir(mode=0o700)
            return
        size, self._promised_mb = reserve(self._budget, self.spec.resources.storage_mb)
        self._storage = TrialStorage(self.root, size, grader_gid=self._identity.grader_gid)
        self._storage.create()

    def _safe_parent(self, target: Path, *, agent_readable: bool) -> None:
        """Make every dir from the trial fs to ``target``'s parent a real, root-owned dir.

        Agents are dead between phases, but what they planted is still there: a symlink
        anywhere on the way is refused instead of written through (as root).
        """
        current = self.fs
        for part in target.relative_to(self.fs).parts[:-1]:
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

    def _reader(self, agent_readable: bool) -> tuple[int, int]:
        """Owner of files the harness puts in: root when the agent reads them, else the grader."""
        if agent_readable or self._identity is None:
            return 0, 0
        return self._identity.grader_uid, self._identity.grader_gid

    @override
    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:
        target = self.host_path(dest)
        self._safe_parent(target, agent_readable=agent_readable)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(target, mode if agent_readable else mode & 0o700)
        if is_root():
            os.lchown(target, *self._reader(agent_readable))

    @override
    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:
        target = self.host_path(dest)
        self._safe_parent(target, agent_readable=agent_readable)
        remove_tree(target)
        copy_tree_nofollow(src, target)  # a task's tests/, solution/: no link followed
        owner = self._reader(agent_readable)
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
                    os.lchown(os.path.join(dirpath, name), *owner)
        if is_root():
            os.lchown(target, *owner)
        if dest == self.paths.solution:
            self._solution_readable = agent_readable

    @override
    def upload(self, src: Path, dest: str, *, owner: Role) -> None:
        target = self.host_path(dest)
        who = None
        if self._identity is not None:
            who = self.identity if owner == "agent" else self.grader_identity
        # The root supervisor writes with O_NOFOLLOW and refuses a planted symlink on the
        # way: the agent has had the dir to itself.
        request: dict[str, Any] = {
            "op": "put",
            "dest": str(target),
            "files": dir_files(src),
            "top_mode": 0o755,
        }
        if who is not None:
            request.update(owner={"uid": who[0], "gid": who[1]}, own_top=True)
        found = self._supervisor().request(request)
        if found.get("error"):
            error = found["error"]
            raise SandboxError(f"cannot upload into {dest}: {error.get('message')}")

    @override
    def reset_dir(self, path: str) -> None:
        target = self.host_path(path)
        self._safe_parent(target, agent_readable=False)
        remove_tree(target)
        target.mkdir(mode=0o700)
        if path == self.paths.solution:
            self._solution_readable = False

    def _supervisor(self) -> SupervisorSession:
        if self._session is None:
            if self._supervisors is not None:
                proc = self._supervisors.take()
            else:
                proc = spawn_supervisor(self._python, str(SUPERVISOR_PATH))
            self._session = SupervisorSession(proc)
        return self._session

    def _tools_dir(self) -> Path:
        if self._supervisors is not None:
            return self._supervisors.tools
        if self._own_tools is None:
            self._own_tools = stage_tools(self.root / "tools", [os.path.realpath(self._python)])
        return self._own_tools

    # -- views ------------------------------------------------------------------------------

    def _bind(self, name: str, *, rw: bool, dst: str | None = None) -> dict[str, Any]:
        return {"src": str(self.fs / name), "dst": dst or f"{VIEW_ROOT}/{name}", "rw": rw}

    def _common_binds(self) -> list[dict[str, Any]]:
        binds = [self._bind(name, rw=True, dst=target) for name, target in _SHARED_TMP]
        binds += [
            {"src": str(path), "dst": str(path), "rw": False}
            for path in self.spec.expose
            if path.exists()
        ]
        prefix = python_prefix(self._python)
        if not prefix.startswith(("/usr/", "/bin/", "/lib")) and prefix != "/usr":
            binds.append({"src": prefix, "dst": prefix, "rw": False})
        return binds

    def _agent_view(self) -> dict[str, Any]:
        """Everything of the trial's but the grader's dirs (and the solution, unless given)."""
        hidden = {
            "tests",
            "verifier",
            "grader",
            "exec",
            PARKED,
            *(name for name, _t in _SHARED_TMP),
        }
        if not self._solution_readable:
            hidden.add("solution")
        writable = {name for name, _mode in _AGENT_DIRS if "/" not in name}
        binds = [
            self._bind(entry.name, rw=entry.name in writable)
            for entry in sorted(os.scandir(self.fs), key=lambda e: e.name)
            if entry.name not in hidden and not entry.is_symlink()
        ]
        binds += [
            {"src": str(src), "dst": dst, "rw": False}
            for dst, src in sorted(self.spec.agent_mounts.items())
        ]
        return {"staging": str(self.root / "view"), "binds": binds + self._common_binds()}

    def _verifier_view(self) -> dict[str, Any]:
        binds = [
            self._bind("workspace", rw=True),
            self._bind("artifacts", rw=False),
            self._bind("verifier", rw=True),
            self._bind("grader", rw=True),
            self._bind("exec", rw=True, dst=EXEC_DIR),
            {"src": str(self._tools_dir()), "dst": TOOLS_MOUNT, "rw": False},
            *self._common_binds(),
        ]
        if (self.fs / "tests").is_dir():
            binds.append(self._bind("tests", rw=False))
        return {"staging": str(self.root / "view"), "binds": binds}

    def _confine_agent(self, payload: PhaseWire) -> PhaseWire:
        """Give a request the agent's user, namespaces and protected paths."""
        assert self._identity is not None
        payload["user"] = {"uid": self._identity.uid, "gid": self._identity.gid}
        payload["namespaces"] = {"net": True, "view": self._agent_view()}
        payload["unreadable"] = [
            f"{VIEW_ROOT}/tests",
            f"{VIEW_ROOT}/verifier",
            f"{VIEW_ROOT}/grader",
        ]
        payload["rlimits"]["nproc"] = self.spec.resources.pids
        if self._cgroup is not None:
            payload["cgroup"] = self._cgroup.procs_files
        return payload

    @override
    def run_phase(self, request: PhaseRequest) -> PhaseResult:
        # Every phase's own namespace is no-network (start refused anything else); a step
        # the spec does not know is a caller's mistake, refused before anything runs.
        self.spec.network_for(request.role, request.step)
        payload = phase_payload(
            request,
            cwd=request.cwd or self.paths.workspace,
            logs=str(self.root / "logs"),
            nofile=self.spec.resources.nofile,
            gateway_socket=(
                str(self.spec.gateway_socket) if self.spec.gateway_socket is not None else None
            ),
        )
        identity = self._identity
        private_tmp = identity is not None and request.role == "verifier" and not request.shared_tmp
        if identity is not None and request.role == "agent":
            self._confine_agent(payload)
        elif identity is not None:
            self._prepare_grader()
            grader = {"uid": identity.grader_uid, "gid": identity.grader_gid}
            payload["user"] = {"uid": identity.grader_uid, "gid": identity.grader_gid}
            payload["namespaces"] = {
                "net": True,
                "view": self._verifier_view(),
            }
            payload["rlimits"]["nproc"] = self.spec.resources.pids
            if self._cgroup is not None:
                payload["cgroup"] = self._cgroup.procs_files
            template: PhaseWire = {
                "env": dict(request.agent_env),
                "cwd": self.paths.workspace,
                "rlimits": {"core": 0, "nofile": self.spec.resources.nofile},
            }
            payload["agent_exec"] = {
                "listen": str(self.fs / "exec" / os.path.basename(EXEC_SOCKET)),
                "owner": grader,
                "template": self._confine_agent(template),
                "max_output_bytes": request.max_output_bytes,
            }
        ooms = self._cgroup.oom_kills() if self._cgroup is not None else 0
        try:
            if private_tmp:
                assert identity is not None
                # The views bind fs/tmp (and the others) by path: the verifier and the
                # commands it runs as the agent see the same fresh dirs.
                park(self.fs, (identity.grader_uid, identity.grader_gid))
            for src, dest in request.scratch_uploads:
                self.upload(src, self._scratch_view(dest), owner="verifier")
            result = PhaseResult.from_json(self._supervisor().request(dict(payload)))
        finally:
            if private_tmp:
                unpark(self.fs)  # also after a park that failed half-way
        self._check_memory(request.role, ooms)
        return result

    def _check_memory(self, role: str, before: int) -> None:
        """A phase during which the kernel OOM-killed a trial process: SandboxDied.

        As on docker, where the container stops when it runs out of memory: the trial's
        own processes went past ``memory_mb``, an agent (or verifier) error that is never
        retried, whatever the phase's program did after the kill (a script may carry on
        and exit 0). The cgroup's ``oom_kill`` count is the evidence.
        """
        if self._cgroup is None:
            return
        after = self._cgroup.oom_kills()
        if after <= before:
            return
        raise SandboxDied(
            f"the trial ran out of memory (memory_mb = {self.spec.resources.memory_mb}) "
            f"during the {role} phase: the kernel OOM-killed {after - before} of its "
            f"process(es) (cgroup {self._cgroup.name}, {self._cgroup.version} oom_kill = "
            f"{after})",
            role,
        )

    def _prepare_grader(self) -> None:
        """Fresh, grader-owned home and tmp dirs for a verifier phase (none of the agent's)."""
        assert self._identity is not None
        owner = (self._identity.grader_uid, self._identity.grader_gid)
        grader = self.fs / "grader"
        remove_tree(grader)
        for path in (grader, grader / "home", grader / "home" / "tmp"):
            path.mkdir(mode=0o700)
            os.lchown(path, *owner)
        os.lchown(self.fs / "exec", *owner)
        # git accepts the agent's repositories whose config can run nothing, each by name
        # (docs/grading.md); never ``<dir>/*``, which would trust every repository below.
        workspace, view = os.path.realpath(self.fs / "workspace"), self.paths.workspace
        repos, _refused, _cut = git_repos.trusted(workspace)
        safe = [view + repo[len(workspace) :] for repo in repos]
        home_seed.seed(str(grader / "home"), None, *owner, safe)

    @override
    def reset_verifier_dir(self) -> None:
        target = self.fs / "verifier"
        remove_tree(target)
        target.mkdir(mode=0o755)
        if is_root():
            os.chown(target, *self._reader(False))

    @override
    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:
        rel = os.path.relpath(self.host_path(path), self.root)
        return read_file(self.root, rel, max_bytes=max_bytes)

    @override
    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        rel = os.path.relpath(self.host_path(path), self.root)
        return copy_path(
            self.root,
            rel,
            dest,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
            limits=self.evidence_limits,
        )

    @override
    def snapshot_out(
        self,
        path: str,
        *,
        store: ObjectStore,
        seed: Mapping[str, str],
        links: Path | None,
        max_file_bytes: int,
        max_total_bytes: int,
    ) -> tuple[dict[str, Any], list[EvidenceEvent]]:
        rel = os.path.relpath(self.host_path(path), self.root)
        return snapshot_tree(
            self.root,
            rel,
            store=store,
            seed=seed,
            links=links,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
            limits=self.evidence_limits,
        )

    @override
    def storage_usage(self) -> tuple[int, int] | None:
        if self._storage is None:
            return None
        usage = self._storage.usage()
        return usage.used_bytes, usage.limit_bytes

    @override
    def abort(self) -> None:
        if self._session is not None:
            self._session.kill()
        try:
            if self._cgroup is not None:
                self._cgroup.kill()
        finally:
            self._sweep()

    def _sweep(self) -> None:
        """Belt and braces after the supervisor: kill anything left with the trial's uids.

        Only in the host's own pid namespace: containers on this host may run the same
        numeric uids and must never be hit. The trial's phases run
        in pid namespaces of their own, which die with their init (killed with the
        supervisor: PR_SET_PDEATHSIG), whatever their processes did.
        """
        if self._identity is None:
            return
        self._sweep_uids((*self._former_uids, self._identity.uid, self._identity.grader_uid))

    def _sweep_uids(self, uids: tuple[int, ...]) -> None:
        def find() -> list[int]:
            entries = live_entries()  # one /proc scan for every uid
            return [p for uid in uids for p in uid_processes(uid, entries)]

        try:
            kill_all(find, None, deadline_sec=0.5)
        except RuntimeError:
            raise SandboxError(f"processes of uids {uids} survived the final sweep") from None

    @override
    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        errors: list[Exception] = []
        steps = (
            self._close_supervisor,
            self._remove_cgroup,
            self._sweep,
            self._remove_storage,
            self._remove_root,
        )
        for action in steps:
            try:
                action()
            except Exception as exc:
                errors.append(exc)
        if self._identity is not None:
            for uid in (*self._former_uids, self._identity.uid):
                self._identities.release(uid)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("local sandbox stop failed", errors)

    def _close_supervisor(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _remove_cgroup(self) -> None:
        """Kill every process left in the trial's cgroup (detached ones too) and remove it."""
        if self._cgroup is not None:
            self._cgroup.remove()

    def _remove_storage(self) -> None:
        if self._prepared is not None and self._pool is not None:
            # Every process of the trial is dead (swept): the filesystem and the root go in
            # the background, checked when the pool closes at the end of the run.
            prepared, self._prepared, self._root = self._prepared, None, None
            self._pool.give_back(prepared)
            return
        try:
            if self._storage is not None:
                self._storage.destroy()
        finally:
            if self._budget is not None and self._promised_mb:
                self._budget.release(self._promised_mb)
                self._promised_mb = 0

    def _remove_root(self) -> None:
        if self._root is not None:
            remove_tree(self._root)

    @override
    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.backend, "image": None, "root": is_root()}
        if self._identity is not None:
            info["uid"], info["gid"] = self._identity.uid, self._identity.gid
            info["grader_uid"] = self._identity.grader_uid
            info["limits"] = {
                "storage_mb": self._storage.size_mb if self._storage is not None else None,
                "cpus": None,
                "memory_mb": None,
                "pids": self.spec.resources.pids,
                "mechanism": None,
            }
            if self._cgroup is not None:
                info["limits"].update(self._cgroup.describe())
            else:
                info["limits"]["problem"] = self._limits_problem
        else:
            info["warning"] = NOT_A_BOUNDARY
        return info

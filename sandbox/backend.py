"""The one seam every sandbox backend implements, and the supervisor channel they share."""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypedDict

from sandbox.errors import ChannelForged, HostToolInterrupted, SandboxError, SupervisorError
from sandbox.host_tools import interrupted
from sandbox.image_config import ImageConfig
from sandbox.inside.evidence import DEFAULT_LIMITS, SPECIAL_KINDS, EvidenceEvent, Limits
from sandbox.network_policy import NO_NETWORK, NetworkPolicy
from sandbox.resource_policy import ResourcePolicy
from sandbox.root_changes import RootChanges
from sandbox.seeding import Fixture

if TYPE_CHECKING:
    from sandbox.evidence_diff import ObjectStore
    from sandbox.sidecars import SidecarAccess

#: The in-sandbox folder: every module in it is shipped flat into every sandbox.
INSIDE_DIR = Path(__file__).with_name("inside")
SUPERVISOR_PATH = INSIDE_DIR / "supervisor.py"


def inside_modules() -> tuple[Path, ...]:
    """The in-sandbox folder's modules, the supervisor's siblings in every sandbox."""
    return tuple(sorted(p for p in INSIDE_DIR.glob("*.py") if p.name != "__init__.py"))


#: Stdlib modules shipped next to the supervisor into every sandbox (the folder's, by name).
SUPERVISOR_SIBLINGS = tuple(p.stem for p in inside_modules() if p != SUPERVISOR_PATH)
PROTOCOL_VERSION = 1
#: How long past a phase's own timeout the harness waits for the supervisor's answer.
ANSWER_GRACE_SEC = 120.0

Role = Literal["agent", "verifier"]


@dataclass(frozen=True)
class Resources:
    """Limits for one trial (from ``[environment]`` of task.toml)."""

    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    pids: int = 512
    nofile: int = 4096


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to create one trial's sandbox."""

    trial_id: str
    fixtures: Mapping[str, Fixture] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    allow_internet: bool = False
    image: str | None = None
    #: ``environment/Dockerfile`` of the task, built into an image by container backends.
    dockerfile: Path | None = None
    task_name: str = "task"
    workdir: str | None = None
    agent_user: str | int | None = None
    verifier_user: str | int | None = None
    #: Host paths the agent must never read (task sources, the run dir). Local backend only.
    protected_paths: tuple[Path, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Host path of the trial's model-gateway socket (a root-only dir), if it has a model.
    gateway_socket: Path | None = None
    #: Host paths shown read-only at the same path in the local sandbox's views.
    expose: tuple[Path, ...] = ()
    #: Host dirs every backend shows the agent read-only: in-sandbox path -> host dir (an
    #: installed agent CLI's cache entry, docs/agents.md).
    agent_mounts: Mapping[str, Path] = field(default_factory=dict)
    #: ``[environment].os``: only ``linux`` runs; anything else fails the trial for good.
    os: str = "linux"
    #: GPUs the task needs (container backends turn them into device requests).
    gpus: int = 0
    #: Acceptable GPU types, or None for any.
    gpu_types: tuple[str, ...] | None = None
    #: Limit for building the task image, in seconds.
    build_timeout_sec: float | None = None
    #: The task's ``environment/docker-compose.yaml`` (sidecars; container backends only).
    compose_file: Path | None = None
    #: Environment of the image's own workload (its ENTRYPOINT), besides the image's.
    workload_env: Mapping[str, str] = field(default_factory=dict)
    #: Names of the task's MCP servers the agent must reach (compose services).
    mcp_servers: tuple[str, ...] = ()
    #: The image holds its own tests dir (a separate verifier's): nothing is mounted over it.
    image_tests: bool = False
    #: Trials still to start in this run after this one, of any task (a backend may make
    #: sandboxes ahead for those that need one like this trial's).
    upcoming: int = 0
    #: Each phase's network (issue 24): ``agent`` (the oracle's too) and ``verifier``, for
    #: a phase that names no step (a single-step task's; the task's healthcheck).
    #: A role missing here gets ``no-network``. ``allow_internet`` stays the union of every
    #: policy here and in ``step_networks``.
    networks: Mapping[str, NetworkPolicy] = field(default_factory=dict)
    #: A multi-step task's policies, one mapping like ``networks`` per step, by index: a
    #: phase whose request names a step (``PhaseRequest.step``) gets exactly its step's.
    #: A backend prepares up front for all of them (:meth:`all_networks`); empty: every
    #: phase gets ``networks``.
    step_networks: tuple[Mapping[str, NetworkPolicy], ...] = ()
    #: Who the agent may be (``sandbox.agent_root``): ``never`` (an unprivileged uid),
    #: ``isolated`` (the task's or image's user, root included, behind gVisor or a
    #: remapped user namespace) or ``allow`` (the task's or image's user anywhere).
    agent_root: Literal["never", "isolated", "allow"] = "never"
    #: What of the agent's processes outlives its phase (``sandbox.agent_services``):
    #: ``kill`` (all of them) or ``keep`` (those holding a listening socket, which then
    #: answer the verifier; docs/security.md, "Services the agent leaves running").
    agent_services: Literal["kill", "keep"] = "kill"
    #: How ``resources.cpus`` and ``resources.memory_mb`` are applied
    #: (:mod:`sandbox.resource_policy`): ``limit``, ``request``, ``guarantee``, ``ignore``.
    cpu_policy: ResourcePolicy = "limit"
    memory_policy: ResourcePolicy = "limit"

    def network_for(self, role: str, step: int | None = None) -> NetworkPolicy:
        """The network policy of a phase of ``role`` (in step ``step``, by index).

        Raises:
            SandboxError: ``step`` names no step of the spec's ``step_networks``.
        """
        if step is None or not self.step_networks:
            return self.networks.get(role, NO_NETWORK)
        if not 0 <= step < len(self.step_networks):
            raise SandboxError(
                f"the phase names step {step}, but the sandbox was made for "
                f"{len(self.step_networks)} step(s)' networks"
            )
        return self.step_networks[step].get(role, NO_NETWORK)

    def all_networks(self) -> tuple[NetworkPolicy, ...]:
        """Every policy a phase of this sandbox may get (each once, in order).

        What a backend prepares before the first phase: the filtered network when one of
        them has the internet, the egress proxy when one is an ``allowlist``.
        """
        found: list[NetworkPolicy] = []
        for table in (self.networks, *self.step_networks):
            found += [policy for policy in table.values() if policy not in found]
        return tuple(found)


@dataclass(frozen=True)
class SandboxPaths:
    """Paths as the processes inside the sandbox see them."""

    root: str
    workspace: str
    home: str
    session: str
    verifier: str
    tests: str
    solution: str
    instruction: str
    #: Where the supervisor writes each phase's captured output; never agent-readable.
    logs: str
    #: HOME of a verifier phase: fresh for each, owned by the verifier's user (its TMPDIR
    #: is ``tmp`` inside); nothing of the agent's is in it.
    grader_home: str
    #: Harbor's convention dir for artifacts (``/logs/artifacts``): agent-writable, its
    #: files are collected into the trial's ``artifacts/`` after each step.
    artifacts: str = ""

    @classmethod
    def under(cls, top: str, **overrides: str) -> SandboxPaths:
        """The conventional layout of a trial below ``top``; ``overrides`` replace entries."""
        layout = {
            "root": top,
            "workspace": f"{top}/workspace",
            "home": f"{top}/home",
            "session": f"{top}/session",
            "verifier": f"{top}/verifier",
            "tests": f"{top}/tests",
            "solution": f"{top}/solution",
            "instruction": f"{top}/instruction.md",
            "logs": f"{top}/logs",
            "grader_home": f"{top}/grader/home",
            "artifacts": f"{top}/artifacts",
        }
        layout.update(overrides)
        return cls(**layout)


@dataclass(frozen=True)
class PhaseRequest:
    """One supervised phase: the agent, or the verifier."""

    role: Role
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    timeout_sec: float | None = None
    cwd: str | None = None
    #: Secrets for the phase's environment; sent on the supervisor's stdin only.
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_output_bytes: int = 4 << 20
    #: Environment variables pointing at the model gateway; ``{port}`` is replaced by the
    #: loopback port the supervisor forwards from. Needs ``SandboxSpec.gateway_socket``.
    gateway_env: Mapping[str, str] = field(default_factory=dict)
    #: Run an in-sandbox stdlib entry point in-process after the drop instead of exec'ing
    #: ``argv``: ``{"module": "agent_loop", "config": {...}}``.
    entry: Mapping[str, Any] | None = None
    #: Verifier phases: the environment of the commands it runs as the agent
    #: (``$HARNESS_AGENT_EXEC``); never holds a secret.
    agent_env: Mapping[str, str] = field(default_factory=dict)
    #: Verifier phases: names in ``env`` the agent's code must never read (the task's
    #: ``[verifier].env``). A backend that cannot keep them from the commands run through
    #: ``$HARNESS_AGENT_EXEC`` (gVisor; a verifier of the agent's own uid) refuses those.
    confidential_env: tuple[str, ...] = ()
    #: Name of the phase's output files in the logs dir (default: the role), so a
    #: healthcheck or a step's setup does not overwrite the agent's or verifier's.
    log_name: str | None = None
    #: Verifier phases: see the agent's ``/tmp``, ``/var/tmp`` and ``/dev/shm`` instead of
    #: fresh, verifier-owned ones of their own. Healthchecks only: they write no reward,
    #: and may wait on a service of the image that keeps its files there.
    shared_tmp: bool = False
    #: Verifier phases: ``(host dir, in-sandbox dir)`` pairs uploaded for the verifier's
    #: user once its ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are fresh, just before the
    #: phase: a separate verifier's artifacts declared under them, which an upload before
    #: the phase would see moved aside with everything else there.
    scratch_uploads: tuple[tuple[Path, str], ...] = ()
    #: The index of the step of a multi-step task this phase belongs to: the phase gets
    #: that step's network (``SandboxSpec.step_networks``). None: ``SandboxSpec.networks``.
    step: int | None = None


@dataclass(frozen=True)
class PhaseResult:
    """What the supervisor reports about one phase."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration_sec: float
    posture: dict[str, Any] | None
    error: dict[str, str] | None
    survivors: list[dict[str, Any]]
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    output_truncated: bool = False
    #: Lifetime of the phase's own process (execve to exit), without supervisor work.
    process_sec: float | None = None
    #: Loopback port of the model-gateway forwarder and the connections it relayed.
    gateway_port: int | None = None
    gateway_connections: int | None = None
    #: How many processes outlived the phase's main process (``survivors`` lists 50).
    survivor_count: int = 0
    #: Verifier phases: how many commands it ran as the agent.
    agent_exec_calls: int | None = None
    #: Agent phases with ``agent_services = keep``: the processes kept (each ``{pid, uid,
    #: comm, listening}``); None when nothing was asked to be kept.
    agent_services_kept: list[dict[str, Any]] | None = None
    #: Verifier phases after such an agent phase: the kept processes alive when it
    #: started (empty: none); None when nothing was kept or asked to be.
    agent_processes_alive: list[dict[str, Any]] | None = None
    #: Why kept processes were killed before this verifier instead ({reason, killed}).
    agent_services_dropped: dict[str, Any] | None = None
    #: Why the listening processes could not be found (then every process was killed).
    agent_services_error: str | None = None
    #: Agent phases with ``agent_services = keep``: the processes the listener scan's
    #: bounds left unread (``{count, processes, bounds}``, the first 50 listed), killed as no
    #: listeners; None when every process was read.
    agent_services_unread: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseResult:
        """Build from the supervisor's result line."""
        return cls(
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            timed_out=bool(data.get("timed_out")),
            duration_sec=float(data.get("duration_sec") or 0.0),
            posture=data.get("posture"),
            error=data.get("error"),
            survivors=list(data.get("survivors") or []),
            stdout_bytes=int(data.get("stdout_bytes") or 0),
            stderr_bytes=int(data.get("stderr_bytes") or 0),
            output_truncated=bool(data.get("output_truncated")),
            process_sec=data.get("process_sec"),
            gateway_port=data.get("gateway_port"),
            gateway_connections=data.get("gateway_connections"),
            survivor_count=int(data.get("survivor_count") or len(data.get("survivors") or [])),
            agent_exec_calls=data.get("agent_exec_calls"),
            agent_services_kept=data.get("agent_services_kept"),
            agent_processes_alive=data.get("agent_processes_alive"),
            agent_services_dropped=data.get("agent_services_dropped"),
            agent_services_error=data.get("agent_services_error"),
            agent_services_unread=data.get("agent_services_unread"),
        )


class UserWire(TypedDict):
    """A user to drop to."""

    uid: int
    gid: int


class PhaseWire(TypedDict, total=False):
    """A phase request on the supervisor's wire (``op = "run"``; :mod:`sandbox.inside.supervisor`).

    The backends fill the keys they own: ``user``, ``unreadable``, ``namespaces`` (local),
    ``agent_exec`` (verifier phases), ``prepare_dirs``/``delete_files``.
    """

    op: Literal["run"]
    role: Role
    argv: list[str]
    env: dict[str, str]
    secret_env: dict[str, str]
    cwd: str
    stdin: str | None
    timeout_sec: float | None
    max_output_bytes: int
    logs: dict[str, str]
    rlimits: dict[str, int]
    user: UserWire | None
    unreadable: list[str]
    namespaces: dict[str, Any]
    gateway: dict[str, Any]
    entry: dict[str, Any]
    agent_exec: dict[str, Any]
    kill_uid: bool
    #: Files removed before the phase starts (never following a symlink).
    delete_files: list[str]
    #: A root agent (``agent_root``): ``{"caps": [...]}``, the capabilities it keeps.
    root_agent: dict[str, Any]
    #: The trial cgroup's ``cgroup.procs`` files, joined before the phase runs (local).
    cgroup: list[str]
    #: Agent phases: its listening processes outlive it (``agent_services = keep``).
    keep_listeners: bool
    #: Verifier phases after kept services: ``{"user", "drop"}`` (supervisor's
    #: ``kept_services.before_verifier``).
    agent_services: dict[str, Any]


def phase_payload(
    request: PhaseRequest,
    *,
    cwd: str,
    logs: str,
    nofile: int,
    gateway_socket: str | None,
) -> PhaseWire:
    """The part of a phase request every backend sends the same way.

    Args:
        request: The phase.
        cwd: Its working dir, as the supervisor sees it.
        logs: Dir (as the supervisor sees it) where the phase's output is captured.
        nofile: The open-files limit.
        gateway_socket: The trial's gateway socket as the supervisor sees it, if any.

    Raises:
        SupervisorError: the phase asks for the model gateway but the sandbox has none.
    """
    payload: PhaseWire = {
        "op": "run",
        "role": request.role,
        "argv": list(request.argv),
        "env": dict(request.env),
        "secret_env": dict(request.secret_env),
        "cwd": cwd,
        "stdin": request.stdin,
        "timeout_sec": request.timeout_sec,
        "max_output_bytes": request.max_output_bytes,
        "logs": {
            "stdout": f"{logs}/{request.log_name or request.role}.stdout",
            "stderr": f"{logs}/{request.log_name or request.role}.stderr",
        },
        "rlimits": {"core": 0, "nofile": nofile},
        "user": None,
    }
    if request.entry is not None:
        payload["entry"] = dict(request.entry)
    if request.gateway_env:
        if gateway_socket is None:
            raise SupervisorError("the phase asks for the model gateway but the sandbox has none")
        payload["gateway"] = {"socket": gateway_socket, "env": dict(request.gateway_env)}
    return payload


def dir_files(src: Path, *, readable: bool = True) -> list[dict[str, Any]]:
    """A host dir's regular files as supervisor ``put`` items (symlinks are skipped).

    Read by dir fd without following a link at any component (:mod:`sandbox.beneath`):
    ``src`` itself must be a real dir, nothing below it is reached through a symlink.

    Args:
        src: The host dir.
        readable: Modes readable by others (0o644/0o755) or by the owner only.
    """
    import base64
    import stat

    from sandbox.beneath import read_beneath, walk_beneath

    files: list[dict[str, Any]] = []
    try:
        info = os.lstat(src)
    except FileNotFoundError:
        return files
    if not stat.S_ISDIR(info.st_mode):
        raise SandboxError(f"not a directory of its own (a symlink is never followed): {src}")
    for entry in sorted(walk_beneath(src.parent, src.name), key=lambda e: e.rel):
        if not stat.S_ISREG(entry.info.st_mode):
            continue
        read = read_beneath(src.parent, f"{src.name}/{entry.rel}", entry.info.st_size)
        if read is None:
            continue
        mode = 0o755 if entry.info.st_mode & 0o100 else 0o644
        files.append(
            {
                "path": entry.rel,
                "data": base64.b64encode(read.data).decode(),
                "mode": mode if readable else mode & 0o700,
            }
        )
    return files


@dataclass(frozen=True)
class Capacity:
    """The most a single trial can be given on a backend's engine."""

    cpus: float
    memory_mb: int
    #: False when the runtime can give a trial no network at all (allow_internet refused).
    network: bool = True
    #: The network modes (``sandbox.network_policy``) this backend enforces as
    #: docs/security.md promises them, ``no-network`` included, and PER PHASE (the
    #: ``networks`` of a spec: a trial's agent and verifier may differ). None: not said;
    #: the harness then runs a declared ``public`` as the backend always did (``network``,
    #: one network for every phase, so a task whose phases differ is refused) and an
    #: undeclared one (Harbor's default) as ``no-network``. With ``public`` listed, every
    #: task that leaves its network unstated gets the filtered internet.
    network_modes: frozenset[str] | None = None
    #: Why the modes missing from ``network_modes`` are missing here and how to get them
    #: (what is absent, then the fix after a ``;``): the end of a refusal's message.
    network_problem: str | None = None


@dataclass
class CloseReport:
    """What closing a backend (or what its trials share) did after a run.

    Removed objects and failures are kept apart: a failure is never counted as removed,
    and what was removed is still reported when something else failed.
    """

    #: The leaked objects found and removed (containers, volumes, trial roots, rules).
    removed: list[str] = field(default_factory=list)
    #: What could not be removed or released, each saying what and why.
    failed: list[str] = field(default_factory=list)

    def __add__(self, other: CloseReport) -> CloseReport:
        return CloseReport(self.removed + other.removed, self.failed + other.failed)


class BackendRuntime(Protocol):
    """What all trials of one run share in a backend (a supervisor pool, a docker client)."""

    def capacity(self) -> Capacity | None:
        """The engine's CPUs and memory (None when the backend enforces neither)."""
        ...

    def close(self) -> CloseReport:
        """Release it after the run: the leaked objects it removed, what it could not."""
        ...


class Sandbox(ABC):
    """One trial's sandbox. Backends: ``local``, ``docker``, and ``fake`` for tests.

    Lifecycle: ``start`` → (``put_file``/``put_dir``) → ``run_phase("agent")`` → evidence
    via ``read_file``/``copy_out`` → ``reset_verifier_dir`` + ``put_dir(tests)`` →
    ``run_phase("verifier")`` → ``stop``. ``stop`` must be safe to call at any point and
    more than once, and must leave no process, container or temp dir behind.
    """

    backend: str = "abstract"
    #: Whether the backend builds a spec's Dockerfile into the image it runs.
    builds_images: bool = False
    #: The caps of every evidence walk of this sandbox's trees (``copy_out``,
    #: ``snapshot_out``) besides the byte caps each call passes; the trial settings set it.
    evidence_limits: Limits = DEFAULT_LIMITS

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    @property
    @abstractmethod
    def paths(self) -> SandboxPaths:
        """In-sandbox paths of this trial."""

    def build_image(self) -> str | None:
        """Make the trial's image ready (build or pull it) before :meth:`start`.

        Timed as the trial's ``build`` phase, apart from the container's start. Returns the
        whole build log when this call built an image (the trial keeps it as
        ``build.log``), else None. A failed build raises an error whose ``build_log``
        attribute holds the log. Where nothing is built (the default) it does nothing;
        :meth:`start` must work without it.
        """
        return None

    @abstractmethod
    def start(self) -> None:
        """Create a fresh root (and container) and seed the workspace."""

    @abstractmethod
    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:
        """Write one file at the in-sandbox path ``dest`` (root-owned)."""

    @abstractmethod
    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:
        """Copy a host dir to the in-sandbox path ``dest`` (root-owned)."""

    @abstractmethod
    def upload(self, src: Path, dest: str, *, owner: Role) -> None:
        """Copy a host dir's files into the in-sandbox dir ``dest`` without clearing it.

        Files are owned by the agent (``owner="agent"``) or the verifier's user; nothing
        is written through a symlink planted on the way.
        """

    @abstractmethod
    def reset_dir(self, path: str) -> None:
        """Recreate the in-sandbox dir ``path`` empty and root-only (between steps)."""

    @abstractmethod
    def run_phase(self, request: PhaseRequest) -> PhaseResult:
        """Run one phase under the supervisor; every process of it is dead on return.

        A verifier phase (unless ``shared_tmp``) sees ``/tmp``, ``/var/tmp`` and
        ``/dev/shm`` empty and its own but for ``scratch_uploads``, and the agent's files
        there again afterwards (:mod:`sandbox.scratch`).
        """

    @abstractmethod
    def reset_verifier_dir(self) -> None:
        """Recreate the verifier output dir empty and writable only by the grader."""

    @abstractmethod
    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:
        """Read a small regular in-sandbox file without following symlinks."""

    @abstractmethod
    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        """Copy a file or tree out as evidence: regular files only, never following links."""

    @abstractmethod
    def stop(self) -> None:
        """Kill every process of the trial and remove the root (and container)."""

    def copy_within(
        self, source: str, dest: str, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        """Copy an in-sandbox tree into the dir ``dest``, owned by the agent.

        Through the evidence code both ways (no symlink followed, regular files only,
        size-capped), e.g. a task's ``skills_dir`` into the agent's home.

        Raises:
            SandboxError: ``source`` is missing or out of this backend's reach.
        """
        import tempfile

        with tempfile.TemporaryDirectory(prefix="harness-copy-") as tmp:
            staged = Path(tmp) / "tree"
            events = self.copy_out(
                source, staged, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes
            )
            if not staged.is_dir():
                raise SandboxError(f"{source} is not a directory in the sandbox")
            self.upload(staged, dest, owner="agent")
        return events

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
        """A workspace's evidence as a diff (see :mod:`sandbox.evidence_diff`).

        This default copies the tree out first (regular files only, capped), then walks
        the copy; backends whose trial files are on the host walk them in place.
        """
        import tempfile

        from sandbox.evidence_diff import omitted, snapshot_tree

        with tempfile.TemporaryDirectory(prefix="harness-snapshot-") as tmp:
            events = self.copy_out(
                path,
                Path(tmp) / "ws",
                max_file_bytes=max_file_bytes,
                max_total_bytes=max_total_bytes,
            )
            manifest, _ = snapshot_tree(
                Path(tmp),
                "ws",
                store=store,
                seed=seed,
                links=links,
                max_file_bytes=max_file_bytes,
                max_total_bytes=max_total_bytes,
                limits=self.evidence_limits,
            )
        prefix = path.strip("/") + "/"
        manifest["special"] = [
            {"path": e.path[len(prefix) :], "type": e.kind, "detail": e.detail}
            for e in events
            if e.kind in SPECIAL_KINDS and e.path.startswith(prefix)
        ]
        manifest["omitted"] = omitted(events, path)  # what the copy-out left behind
        return manifest, events

    def new_agent_user(self) -> tuple[int, int] | None:
        """Give the agent phases from now on a user of their own (a second agent here).

        For a second agent in one sandbox (an episode's shared judge after its solver),
        called once every process of the earlier agent is dead. The agent's dirs
        (workspace, home, session, artifacts) pass to the new user, so it reads all the
        earlier agent left there; what it then makes private (mode 0700) no process of the
        earlier agent's user can read or write.

        Returns:
            The new (uid, gid), or None where agents have no user of their own (the local
            sandbox not started as root, no boundary at all).

        Raises:
            SandboxError: This backend cannot give a second agent a user of its own.
        """
        raise SandboxError(
            f"the {self.backend} sandbox cannot give a second agent a user of its own"
        )

    def abort(self) -> None:  # noqa: B027 - optional for backends without processes
        """Kill the running phase now, from another thread (the run was interrupted).

        The phase's ``run_phase`` call then fails; ``stop`` still removes everything.
        """

    def storage_usage(self) -> tuple[int, int] | None:
        """(bytes used, limit) of the trial's storage, or None when it has no limit."""
        return None

    def sidecars(self) -> SidecarAccess | None:
        """The task's compose sidecars (collect hooks, sidecar artifacts); None: none here."""
        return None

    def artifacts_usage(self) -> tuple[int, int] | None:
        """(bytes used, limit) of the artifacts dir's own space, or None when it has none.

        A backend whose artifacts dir is not on the trial's storage gives it a capped space
        of its own (docker: a tmpfs); an agent that fills it is told here, after its phase.
        """
        return None

    def root_changes(self) -> RootChanges | None:
        """What the phases so far changed in the image root, outside the trial's dirs.

        None where the root is not a writable image layer (the local backend, a read-only
        root). Called between phases, when no process of the last phase is alive.
        """
        return None

    def network_events(self) -> list[dict[str, Any]]:
        """The connections its network filter refused since the last call (bounded).

        Each entry is a ``network_refused`` event (:mod:`sandbox.network_events`). Default:
        none (a backend whose filter logs nothing). Called after each step of a multi-step
        task (between phases: no process of the last one is alive) and before the sandbox
        is stopped.
        """
        return []

    def image_config(self) -> ImageConfig | None:
        """The image's ``ENV``, ``WORKDIR`` and ``USER`` (None: the sandbox has no image).

        Every phase's environment is built over its ``env`` (``harness.trial.env``).
        Valid once :meth:`start` returned.
        """
        return None

    def environment_env(self) -> dict[str, str]:
        """Variables the environment defines for its processes (compose ``main.environment``).

        The agent's and the verifier's phases get them, as under Harbor.
        """
        return {}

    def describe(self) -> dict[str, Any]:
        """Backend facts for the trial record (backend, image, runtime, ...)."""
        return {"backend": self.backend, "image": self.spec.image}


#: How long a supervisor gone mid-request is given to be reaped, for its exit status.
_EXIT_WAIT_SEC = 2.0


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc`` to exit, woken by a pidfd (Popen.wait(timeout) polls with sleeps)."""
    if proc.poll() is not None:
        return True
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    return proc.poll() is not None


class SupervisorSession:
    """A long-lived supervisor process: one JSON request line in, one result line out.

    The agent phase and the verifier phase of a trial share one supervisor, so each trial
    pays for one interpreter start. Closing stdin ends it; if the harness dies, the
    supervisor sees EOF mid-phase and kills the phase.
    """

    def __init__(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        self._proc = proc
        self._stdin: IO[bytes] | None = proc.stdin if proc else None
        self._stdout: IO[bytes] | None = proc.stdout if proc else None

    def attach(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        """Use an already-open channel (e.g. a docker exec socket)."""
        self._stdin, self._stdout = stdin, stdout

    def request(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its result.

        Args:
            payload: The request.
            timeout: Seconds to wait for the answer; by default a phase's own timeout plus
                :data:`ANSWER_GRACE_SEC` (the supervisor answers by then even when it had
                to kill the phase), and no limit for file operations.

        Raises:
            SupervisorError: if the supervisor died, answered something unreadable, or gave
                no answer in time (a local supervisor is then killed).
        """
        if self._stdin is None or self._stdout is None:
            raise SupervisorError("supervisor is not running")
        if timeout is None and payload.get("timeout_sec"):
            timeout = float(payload["timeout_sec"]) + ANSWER_GRACE_SEC
        # A per-request nonce the answer must echo: a process that reached the channel
        # (a root agent under gVisor can open /proc/1/fd/N) cannot forge an answer.
        nonce = secrets.token_hex(16)
        line = json.dumps({"version": PROTOCOL_VERSION, **payload, "nonce": nonce}) + "\n"
        try:
            self._stdin.write(line.encode())
            self._stdin.flush()
            if timeout is not None and not self._answer_within(timeout):
                self.kill()
                raise SupervisorError(
                    f"the supervisor gave no answer within {timeout:g}s (the phase's timeout "
                    "plus a grace period); it was stopped"
                )
            answer = self._stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise self._gone(f"supervisor channel broke: {exc}") from exc
        if not answer:
            raise self._gone("supervisor exited without a result")
        try:
            result = json.loads(answer)
        except json.JSONDecodeError as exc:
            raise SupervisorError(f"supervisor answered garbage: {answer[:200]!r}") from exc
        if not isinstance(result, dict):
            raise SupervisorError("supervisor answered a non-object")
        if result.pop("nonce", None) != nonce:
            raise ChannelForged(
                "the supervisor's answer did not carry this request's nonce: something in the "
                "sandbox wrote to the supervisor's channel (docs/security.md, 'A root agent')"
            )
        return result

    def _gone(self, what: str) -> SandboxError:
        """The error of a request the supervisor died under, its exit status said.

        A local supervisor leaves the harness's process group as it starts; one a
        terminal's Ctrl-C caught in that instant dies of it as a host tool would
        (:mod:`sandbox.host_tools`): the run is being interrupted, and the trial is
        ``cancelled`` rather than an environment error to retry.
        """
        code = None
        if self._proc is not None and _wait_exit(self._proc, _EXIT_WAIT_SEC):
            code = self._proc.returncode
        if code is not None and code < 0 and interrupted(code):
            return HostToolInterrupted(
                f"{what}: the supervisor died of {signal.Signals(-code).name} sent to the "
                "harness's process group; the run is being stopped"
            )
        return SupervisorError(what if code is None else f"{what} (exit code {code})")

    def _answer_within(self, timeout: float) -> bool:
        """Whether an answer line arrives within ``timeout`` seconds."""
        stdout = self._stdout
        assert stdout is not None
        wait_line = getattr(stdout, "wait_line", None)
        if wait_line is not None:  # a socket channel that buffers on its own
            return bool(wait_line(timeout))
        ready, _, _ = select.select([stdout.fileno()], [], [], timeout)
        return bool(ready)

    def kill(self) -> None:
        """Kill the supervisor process (local); its phase dies with the trial's sweep."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def close(self, timeout: float = 10.0) -> None:
        """Close the channel and reap the supervisor."""
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass
            self._stdin = None
        if self._proc is not None:
            if not _wait_exit(self._proc, timeout):
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout:
                self._proc.stdout.close()
            self._proc = None

"""DockerSandbox: one hardened container per trial, driven through the Docker SDK.

Hardened by default: no network unless the task allows internet, every capability dropped
except the few the root supervisor needs before its drop (the agent keeps none),
no-new-privileges, a writable root capped by ``storage_mb`` (its layer on the trial's
filesystem: :mod:`sandbox.docker.rootlayer`; else the engine's own cap or the run's watcher
of layer sizes: :mod:`sandbox.docker.rootcap`), pids/memory(=swap)/cpu limits, labels
on everything.
The supervisor is the container's pid 1, so every orphan of a phase comes back to it
(under runc and gVisor alike) and dies before the next phase. It runs on a Python runtime
mounted read-only from the base image, so task images need no python3 of their own, and
the image's interpreter is never trusted with the trial's secrets.

Everything the trial can write — the workspace, its home and session, ``/tmp``,
``/var/tmp``, ``/dev/shm`` — lives on the trial's own size-limited filesystem on the host
(:mod:`sandbox.storage`), bind-mounted in; the workspace is a labelled volume over it, so
the engine still copies the image's own workdir content into it. Without host storage (not
root, a remote engine) the workspace is the image root's own dir, under the root's cap, and
the scratch dirs are tmpfs mounts of their own sizes.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import logging
import os
import posixpath
import secrets
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from docker.types import Mount
from typing_extensions import override

from sandbox.backend import (
    PhaseRequest,
    PhaseResult,
    PhaseWire,
    Role,
    Sandbox,
    SandboxPaths,
    SandboxSpec,
    SupervisorSession,
    dir_files,
    phase_payload,
)
from sandbox.docker import hostguard
from sandbox.docker.channel import ExecChannel
from sandbox.docker.compose import ComposeProject
from sandbox.docker.container import (
    ARTIFACTS_DIR,
    GATEWAY_MOUNT,
    ROOT_AGENT_CAPS,
    TRIAL_DIR,
    ContainerSite,
    cpu_shares,
    create_args,
)
from sandbox.docker.enginefiles import ContainerFiles, container_dir
from sandbox.docker.gpus import no_gpu_error
from sandbox.docker.identity import AgentIdentity, resolve
from sandbox.docker.images import ImageBuildError, ImageRequest, ResolvedImage
from sandbox.docker.labels import MANAGED, RUN, TASK, TRIAL, run_prefix
from sandbox.docker.limits import CGROUP_LIMITS, enforced
from sandbox.docker.rootcap import (
    HARD_ENGINE,
    HARD_LOOP,
    SOFT,
    Watched,
    engine_size_mb,
    layer_bytes,
)
from sandbox.docker.rootlayer import (
    RootLayer,
    layer_paths,
    root_layer_problem,
    storage_driver,
    warn_soft_root,
)
from sandbox.docker.runtime import PYTHON_MOUNT, SUPERVISOR_MOUNT, DockerRuntime
from sandbox.docker.sdk import EngineError, EngineObjectMissing, EngineRequestError, call
from sandbox.docker.sidecar_access import DockerSidecars
from sandbox.docker.tmpfs_caps import inode_caps
from sandbox.docker.trial_network import TrialNetwork
from sandbox.docker.warm import adopt
from sandbox.errors import (
    ChannelForged,
    EnvironmentStartError,
    PermanentStartError,
    SandboxDied,
    SandboxError,
    SpaceFilledByAgent,
    SupervisorError,
)
from sandbox.evidence_diff import ObjectStore, snapshot_tree
from sandbox.image_config import ImageConfig
from sandbox.inside.evidence import EvidenceEvent, copy_path, read_file
from sandbox.root_changes import RootChanges
from sandbox.root_scan import Fingerprint, baseline, scan
from sandbox.scratch import PRIVATE_MODE, SERVICE_MODE, SHARED_MODE, park, unpark
from sandbox.seeding import check_fixture_path, chown_tree, seed_workspace
from sandbox.sidecars import SidecarAccess
from sandbox.storage import DEFAULT_STORAGE_MB, TrialStorage
from sandbox.storage_pool import NoRoomForSpare, PreparedStorage
from sandbox.verifier_tools import EXEC_DIR, EXEC_SOCKET, TOOLS_MOUNT

logger = logging.getLogger(__name__)

DEFAULT_UID = 65532
DEFAULT_GID = 65532
_TRIAL = TRIAL_DIR
#: Trial dirs on its filesystem and where the container sees them (besides the workspace).
_STORAGE_BINDS = (
    ("home", f"{_TRIAL}/home"),
    ("session", f"{_TRIAL}/session"),
    ("tmp", "/tmp"),
    ("var-tmp", "/var/tmp"),
    ("shm", "/dev/shm"),
)
#: What the image's workload's captures keep (``/trial/logs/workload.*``).
_WORKLOAD_LOG_BYTES = 4 << 20
#: The entries of ``/trial`` that outlive a root agent's phase (:meth:`_clear_after_root`):
#: its home and session (mount points of the trial's filesystem) and the captures' dir.
_TRIAL_KEPT = ("home", "session", "logs")
#: What stops a soft-capped root's writer: every process the caller may signal.
_KILL_ALL = "import os, signal; os.kill(-1, signal.SIGKILL)"
#: What a full space's errno is in a supervisor op's error.
_FULL = (errno.ENOSPC, errno.EDQUOT)
#: The scratch dirs a verifier phase gets fresh (:mod:`sandbox.scratch`).
_SCRATCH_TARGETS = ("/tmp", "/var/tmp", "/dev/shm")
#: Mount points of every trial container besides its storage: never root changes.
ROOT_SKIP = (
    _TRIAL,
    "/logs",
    "/solution",
    "/run",
    "/dev",
    "/proc",
    "/sys",
    SUPERVISOR_MOUNT,
    PYTHON_MOUNT,
    GATEWAY_MOUNT,
    "/etc/hostname",
    "/etc/hosts",
    "/etc/resolv.conf",
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _shared_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A trial's labels without those of its own (its id, its task)."""
    return {k: v for k, v in labels.items() if k not in (TRIAL, TASK)}


class DockerSandbox(Sandbox):
    """A trial in its own container."""

    backend = "docker"
    builds_images = True
    #: The role of the last phase run (None before the first): whose a later death is.
    _last_role: str | None = None

    def __init__(self, spec: SandboxSpec, runtime: DockerRuntime) -> None:
        super().__init__(spec)
        self.runtime = runtime
        self.client = runtime.client
        self.image: str | None = None
        self._workdir = "/app"
        self._container: Any = None
        self._volume: Any = None
        self._root: Path | None = None
        self._storage: TrialStorage | None = None
        self._prepared: PreparedStorage | None = None
        self._session: SupervisorSession | None = None
        self._channel: ExecChannel | None = None
        self._agent_id: tuple[int, int] = (DEFAULT_UID, DEFAULT_GID)
        #: What ``sandbox.agent_root`` made of the task's and image's user (``_setup``).
        self.identity: AgentIdentity | None = None
        #: What keeps a root agent off the host besides the container (the backend's).
        self.agent_boundary = "gvisor" if runtime.runtime == "runsc" else "none"
        #: Output files of the grader's phases (a root agent must not read or plant them).
        self._grader_logs: set[str] = set()
        #: The last instruction put (its dir and ``put`` item): put back after a root agent.
        self._instruction: tuple[str, dict[str, Any]] | None = None
        self._verifier_id: tuple[int, int] = (0, 0)
        #: The gid of the image's apt sandbox user (None: none, or unusable), once asked.
        self._service_gid: int | None = None
        self._service_gid_asked = False
        #: Users of earlier agents in this container (a shared judge's solver).
        self._former_agents: list[tuple[int, int]] = []
        self._solution_readable = False
        self._stopped = False
        #: The image's workload once started (argv, uid); see ``_start_workload``.
        self.workload: dict[str, Any] | None = None
        #: What replaces the image's CMD after its ENTRYPOINT (a compose file's
        #: ``command`` of the main service; Harbor's ``sleep infinity`` otherwise).
        self.workload_command: list[str] | None = None
        self._workload_env: dict[str, str] = {}
        self._compose: ComposeProject | None = None
        #: Each sidecar's address by service name, once they run (compose tasks).
        self._sidecar_hosts: dict[str, str] = {}
        #: How the image was had (built, pulled, cached), once :meth:`build_image` ran.
        self._resolved: ResolvedImage | None = None
        self._sidecar_images: dict[str, ResolvedImage] = {}
        #: Each phase's network (:mod:`sandbox.docker.trial_network`).
        self._net = TrialNetwork(
            spec, runtime.egress, namespace=spec.os == "linux" and not runtime.host_filter()
        )
        self._network = self._net.plain_network()
        #: Held while the main supervisor channel serves a request.
        self._idle = threading.Lock()
        #: gVisor keeps FIFOs, sockets and devices in the sandbox (not on the host's disk).
        self._sentry_files = runtime.runtime == "runsc"
        self._aborted = False
        self._warm = False  # took over a container made ahead (warm.py)
        #: The container's writable layer on the trial's filesystem (None: read-only root).
        self._rootlayer: RootLayer | None = None
        #: The engine's dir of the container on it too (None: read-only root).
        self._enginefiles: ContainerFiles | None = None
        #: Its upper dir right after start (what the engine made there, not a phase).
        self._root_base: dict[bytes, Fingerprint] = {}
        #: Which cap holds the image root (rootcap.HARD_LOOP, HARD_ENGINE or SOFT).
        self.root_cap: str | None = None
        #: The watcher's entry of a soft-capped root (None: not watched).
        self._watched: Watched | None = None
        #: The engine-disk room promised to a soft-capped root (MB).
        self._disk_promised = 0
        #: The uid of the running phase's processes (None: between phases).
        self._phase_uid: int | None = None
        #: An agent phase ran asked to keep its listening processes (agent_services).
        self._kept_asked = False

    @property
    @override
    def paths(self) -> SandboxPaths:
        return SandboxPaths(
            root=_TRIAL,
            workspace=self._workdir,
            home=f"{_TRIAL}/home",
            session=f"{_TRIAL}/session",
            verifier="/logs/verifier",
            tests="/tests",
            solution="/solution",
            instruction=f"{_TRIAL}/instruction.md",
            logs=f"{_TRIAL}/logs",
            grader_home=f"{_TRIAL}/grader/home",
            artifacts=ARTIFACTS_DIR,
        )

    # -- supervisor channel ---------------------------------------------------------------

    def _call(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self._session is None or self._channel is None:
            raise SupervisorError("the container's supervisor is not running")
        is_op = payload.get("op", "run") != "run"
        if is_op and not self._idle.acquire(blocking=False):
            # A phase holds the main channel: serve this file op on a one-shot supervisor.
            session, channel = self._exec_supervisor()
            try:
                result = self._op_request(session, payload)
            finally:
                session.close()
        else:
            if not is_op:
                self._idle.acquire()
            session, channel = self._session, self._channel
            try:
                result = self._op_request(session, payload) if is_op else session.request(payload)
            finally:
                self._idle.release()
        error = result.get("error")
        if error and is_op:
            stderr = channel.stderr
            if self._agent_id[0] == 0 and error.get("errno") in _FULL:
                # A root agent writes every root-only space of the container: what it left
                # there filled the one this op writes (docs/security.md, "Storage").
                raise SpaceFilledByAgent(
                    f"supervisor op {payload.get('op')} failed on a space the root agent "
                    f"filled: {error.get('message')}"
                )
            raise SupervisorError(
                f"supervisor op {payload.get('op')} failed: {error.get('type')}: "
                f"{error.get('message')}" + (f"\n{stderr[-2000:]}" if stderr else "")
            )
        return result

    def _op_request(self, session: SupervisorSession, payload: dict[str, Any]) -> dict[str, Any]:
        """A file op's request; a supervisor the container's OOM kill took is SandboxDied.

        After a phase ran, what it left (tmpfs files, which stay charged to the container's
        memory) can bring the container down under a later step of the harness (the copy of
        the artifacts, say): the phase's doing, never a fault of the machine to retry
        (docs/security.md, "Failures"). Without the engine's word that the kernel OOM-killed
        in the container, the failure stays the machine's.
        """
        try:
            return session.request(payload)
        except SupervisorError as exc:
            if isinstance(exc, ChannelForged) or self._last_role is None:
                raise
            died = self._died(self._last_role, oom_only=True)
            if died is None:
                raise
            raise died from exc

    def _exec_supervisor(self) -> tuple[SupervisorSession, ExecChannel]:
        """A one-shot supervisor beside the main one (file ops during a running phase)."""
        exec_id = call(
            self.client.api.exec_create,
            self._container.id,
            self.runtime.supervisor_command(),
            stdin=True,
            stdout=True,
            stderr=True,
            user="0:0",
        )
        channel = ExecChannel(call(self.client.api.exec_start, exec_id["Id"], socket=True))
        session = SupervisorSession()
        session.attach(channel, channel)  # type: ignore[arg-type]
        return session, channel

    def _batch(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """File ops in one supervisor round trip (the first failure raises)."""
        results: list[dict[str, Any]] = self._call({"op": "batch", "ops": ops})["results"]
        return results

    def _check_arch(self, arch: str) -> None:
        assert self.image is not None
        image_arch = str(self.runtime.image_attrs(self.image).get("Architecture"))
        if image_arch != arch:
            raise EnvironmentStartError(
                f"image {self.image} is {image_arch} but the supervisor runtime is {arch}; "
                "use an image of the host architecture"
            )

    # -- lifecycle ------------------------------------------------------------------------

    @override
    def start(self) -> None:
        spec = self.spec
        if spec.os != "linux":
            raise PermanentStartError(
                f'[environment].os = "{spec.os}" is not supported: the harness runs Linux '
                "containers only"
            )
        self._net.prepare()
        if self.image is None:
            self.build_image()
        assert self.image is not None
        volume_name, arch = self.runtime.python_volume()
        self._check_arch(arch)
        attrs = self.runtime.image_attrs(self.image)
        config = attrs.get("Config") or {}
        image_workdir = config.get("WorkingDir") or ""
        fallback = image_workdir if image_workdir not in ("", "/") else "/app"
        self._workdir = spec.workdir or fallback
        try:
            warm = self._take_warm(volume_name, config)
            if warm is not None:
                assert self.runtime.warm is not None
                self._net.adopt(warm._net)
                adopt(self, warm, self.runtime.warm, self._name(spec.trial_id))
            else:
                labels = self._labels(spec.trial_id)
                self._network = self._start_sidecars(labels)
                if self._net.namespaced:
                    self._network = self._net.start_holder(
                        self.client,
                        self.runtime.base_image,
                        name=f"{self._name(spec.trial_id)}-net",
                        labels=labels,
                        host_addresses=self.runtime.host_addresses(),
                    )
                self._boot(self._name(spec.trial_id), labels, volume_name)
                self._setup(config)
            self._seed()
            self._start_workload(config)
            self._watch_root()
        except EngineRequestError as exc:
            gpu_error = no_gpu_error(str(exc.explanation or exc), spec.gpus)
            if gpu_error is not None:
                raise gpu_error from None
            # The engine refused the request itself (an invalid limit, a bad mount): the
            # same request fails the same way on every retry.
            error = PermanentStartError if exc.is_client_error() else EnvironmentStartError
            raise error(f"cannot start the trial container: {exc}") from exc
        except EngineError as exc:
            raise EnvironmentStartError(f"cannot start the trial container: {exc}") from exc

    def build_image(self) -> str | None:
        """Build or pull the trial's image and its compose sidecars' images.

        Returns:
            The build logs of what this call built (None when nothing was built).

        Raises:
            ImageBuildError: a build failed (its ``build_log`` holds every log so far).
            ImagePullError: an image is not local and cannot be pulled.
        """
        if self.image is not None or self.spec.os != "linux":
            return None  # nothing is built for a task that start() refuses
        spec = self.spec
        resolver = self.runtime.resolver
        logs: list[str] = []
        try:
            self._resolved = resolver.resolve_image(
                ImageRequest(
                    name=spec.task_name,
                    image=spec.image,
                    dockerfile=spec.dockerfile,
                    build_timeout_sec=spec.build_timeout_sec,
                    force_build=resolver.force_build,
                )
            )
            if self._resolved.build_log:
                logs.append(self._resolved.build_log)
            self.image = self._resolved.reference
            if spec.compose_file is not None:
                self._compose = self._compose_project(self._labels(spec.trial_id))
                for name, resolved in self._compose.prepare_images(resolver, spec.task_name):
                    self._sidecar_images[name] = resolved
                    if resolved.build_log:
                        logs.append(f"=== sidecar {name} ===\n{resolved.build_log}")
        except ImageBuildError as exc:
            exc.build_log = "".join([*logs, exc.build_log or ""]) or None
            raise
        return "".join(logs) or None

    def _compose_project(self, labels: dict[str, str]) -> ComposeProject:
        spec = self.spec
        assert spec.compose_file is not None and self.image is not None
        return ComposeProject(
            spec.compose_file,
            trial_id=spec.trial_id,
            labels=labels,
            allow_internet=self._net.internet,
            main_image=self.image,
            build_timeout_sec=spec.build_timeout_sec,
            run_label=self.runtime.run_label,
            host_problem=hostguard.problem(self.client),
            allow_host_access=self.runtime.compose_host_access == "allow",
            engine_guard=self._net.namespace,
            engine=self.client,
            holder_image=self.runtime.base_image,
        )

    def _labels(self, trial: str) -> dict[str, str]:
        return {MANAGED: "1", TRIAL: trial, RUN: self.runtime.run_label, **self.spec.labels}

    def _name(self, trial: str) -> str:
        # Named for the run too: found by name if a crash of the engine loses the labels.
        trial = trial[:64].replace("/", "-")
        return f"{run_prefix(self.runtime.run_label)}{trial}-{secrets.token_hex(4)}"

    # -- warm containers ------------------------------------------------------------------

    def _warm_key(self) -> tuple[object, ...] | None:
        """What a warm container must share with this trial (None: no warm container).

        A trial with a gateway socket, sidecars, GPUs or an ``allowlist`` phase (its
        container's resolver is its own egress proxy) has per-trial mounts or networks
        that cannot be made ahead. A warm container's network namespace (its holder, with
        every phase's rules) or its closed chain of the host filter is made with it
        (:meth:`TrialNetwork.ready`) and taken over with it (:meth:`TrialNetwork.adopt`).
        """
        spec = self.spec
        if spec.gateway_socket is not None or spec.compose_file is not None or spec.gpus:
            return None
        if spec.agent_mounts or self._net.allowlist:  # an allowlist's proxy is per trial
            return None
        return (
            self.image,
            self._workdir,
            spec.resources,
            spec.allow_internet,
            # Each phase's policy: a warm container's network was chosen for its own.
            tuple(sorted(spec.networks.items())),
            tuple(tuple(sorted(step.items())) for step in spec.step_networks),
            spec.image_tests,
            spec.agent_user,
            spec.agent_root,
            self.agent_boundary,
            spec.verifier_user,
            tuple(sorted(_shared_labels(spec.labels).items())),
        )

    def _take_warm(self, volume_name: str, config: dict[str, Any]) -> DockerSandbox | None:
        key = self._warm_key()
        pool = self.runtime.warm
        if key is None or pool is None:
            return None
        # Labelled like the trial but for its id and task, which cannot be known: a warm
        # container serves the next trial of its shape, whatever its task.
        labels = _shared_labels(self.spec.labels)
        spec = dataclasses.replace(self.spec, trial_id="warm", fixtures={}, labels=labels)
        image, workdir = self.image, self._workdir

        def make() -> DockerSandbox:
            spare = DockerSandbox(spec, self.runtime)
            spare.image, spare._workdir = image, workdir
            spare.agent_boundary = self.agent_boundary
            try:
                name, labels = self._name("warm"), spare._labels("warm")
                if spare._net.namespaced:  # its own namespace, made ahead with it
                    spare._network = spare._net.start_holder(
                        self.client,
                        self.runtime.base_image,
                        name=f"{name}-net",
                        labels=labels,
                        host_addresses=self.runtime.host_addresses(),
                    )
                try:
                    spare._boot(name, labels, volume_name)
                except NoRoomForSpare:
                    # Finished trials hold their disk room until their removal is done.
                    assert pool is not None
                    if not pool.settle():
                        raise
                    spare._boot(name, labels, volume_name)
                spare._setup(config)
                spare._net.ready(spare._container)
            except BaseException:
                spare.stop()
                raise
            return spare

        return pool.take(
            key,
            make,
            # Its network's rules must refuse the Ray nodes known now (given per trial).
            lambda warm: warm._channel is not None and warm._channel.idle() and warm._net.current(),
            upcoming=self.spec.upcoming,
        )

    def _boot(self, name: str, labels: dict[str, str], volume_name: str) -> None:
        """Create and start the container; its supervisor waits on the attach stream."""
        spec = self.spec
        assert self.image is not None
        mounts = tuple(self._storage_mounts(name, labels))  # sets self._storage (host storage)
        problem = root_layer_problem(
            host_storage=self._storage is not None,
            driver=storage_driver(self.client) if self._storage is not None else None,
        )
        if problem is None:
            self.root_cap = HARD_LOOP
        else:
            self.root_cap, refusal = self.runtime.root_cap()
            if refusal is not None:
                warn_soft_root(self.runtime.run_label, problem, refusal)
        size = None
        if self.root_cap == HARD_ENGINE:
            image_bytes = int(self.runtime.image_attrs(self.image).get("Size") or 0)
            mb = engine_size_mb(self._cap_mb, storage_driver(self.client), image_bytes)
            size = f"{mb}m"
        site = ContainerSite(
            image=self.image,
            name=name,
            labels=labels,
            command=self.runtime.supervisor_command(),
            workdir=self._workdir,
            network=self._network,
            supervisor_dir=self.runtime.supervisor_dir,
            python_volume=volume_name,
            tools_dir=str(self.runtime.tools_dir),
            storage_mounts=mounts,
            host_storage=self._storage is not None,
            extra_hosts=self._sidecar_hosts if self._compose is not None else None,
            dns=self._net.dns(self._network),
            engine_runtime=(
                self.runtime.network_runtime() if self._network != "none" else self.runtime.runtime
            ),
            writable_root=True,
            storage_opt={"size": size} if size is not None else None,
            inode_caps=inode_caps(self.client, self.runtime.base_image),
        )
        self._container = call(self.client.containers.create, **create_args(spec, site))
        if problem is None:
            self._attach_root_layer()
        raw = call(
            self.client.api.attach_socket,
            self._container.id,
            params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1},
        )
        self._channel = ExecChannel(raw)
        self._session = SupervisorSession()
        self._session.attach(self._channel, self._channel)  # type: ignore[arg-type]
        call(self._container.start)
        if self._rootlayer is not None:
            # The engine made the mount points of the trial's dirs in the upper dir.
            self._root_base = baseline(self._rootlayer.upper, self._root_skip())

    def _attach_root_layer(self) -> None:
        """Move the created container's writable layer onto the trial's filesystem."""
        assert self._storage is not None
        paths = layer_paths(self._container.attrs)
        if paths is None:
            raise EnvironmentStartError(
                "the engine gave the trial's container no overlay2 layer: cannot cap its "
                "writable root"
            )
        self._rootlayer = RootLayer(paths, self._storage.mount_point)
        self._rootlayer.attach()
        # The engine's files bound into it read-write (/etc/hosts, ...): capped alike.
        files = container_dir(self._container.attrs)
        if files is None:
            raise EnvironmentStartError(
                "the engine gave the trial's container no overlay2 data root: cannot cap "
                "its /etc/hosts, /etc/hostname and /etc/resolv.conf"
            )
        self._enginefiles = ContainerFiles(files, self._storage.mount_point)
        self._enginefiles.attach()

    @property
    def _cap_mb(self) -> int:
        """The root's cap where no trial filesystem holds it: the task's, or the default."""
        return self.spec.resources.storage_mb or DEFAULT_STORAGE_MB

    def _watch_root(self) -> None:
        """Put a soft-capped root under the run's watcher (and its room on the engine's disk)."""
        if self.root_cap != SOFT or self._watched is not None:
            return
        storage_mb = self._cap_mb
        self.runtime.engine_disk().acquire(storage_mb)
        self._disk_promised = storage_mb
        self._watched = self.runtime.layer_watcher().watch(
            self._container.id, storage_mb << 20, self._stop_writer
        )

    def _stop_writer(self) -> None:
        """The soft cap is reached: kill the running phase's processes (from the watcher).

        A one-shot process of the phase's uid sends ``SIGKILL`` to every process it may
        signal (``kill(-1)``: all of that uid; for root, all but the supervisor, pid 1), so
        the phase ends as killed and the agent's trial as ``storage_full``. Between phases
        only the image's workload runs: if there is one, the container is killed.
        """
        uid = self._phase_uid
        logger.warning(
            "trial %s: the image root's writable layer reached storage_mb (%d MB): stopping "
            "its writer",
            self.spec.trial_id,
            self._cap_mb,
        )
        if uid is None:
            if self.workload is not None:
                call(self._container.kill)
            return
        gid = self._agent_id[1] if uid == self._agent_id[0] else self._verifier_id[1]
        argv = [*self.runtime.supervisor_command()[:-1], "-c", _KILL_ALL]
        exec_id = call(self.client.api.exec_create, self._container.id, argv, user=f"{uid}:{gid}")
        call(self.client.api.exec_start, exec_id["Id"])

    def _root_skip(self) -> list[str]:
        """The trial's own mount points in the container: never root changes."""
        return [
            self._workdir,
            *(target for _sub, target in _STORAGE_BINDS),
            *ROOT_SKIP,
            *(() if self.spec.image_tests else ("/tests",)),
            TOOLS_MOUNT,
            *self.spec.agent_mounts,
        ]

    @override
    def root_changes(self) -> RootChanges | None:
        layer = self._rootlayer
        if layer is None:
            return None
        return scan(layer.upper, layer.paths.lowers, base=self._root_base, skip=self._root_skip())

    def _start_sidecars(self, labels: dict[str, str]) -> str:
        """Start the compose file's sidecars (if any); the network the main container joins."""
        spec = self.spec
        plain = self._net.plain_network()
        if spec.compose_file is None:
            return plain
        assert self.image is not None
        if self._compose is None:
            self._compose = self._compose_project(labels)
        plan = self._compose.plan
        self.workload_command = plan.main_command
        self._workload_env = plan.main_environment
        if not plan.sidecars:
            self._compose.down()  # nothing was started: only its temp files go
            self._compose = None
            self._net.start_proxy()  # a plain container: on the filtered network's gateway
            return plain
        if not self.runtime.runtime_has_network():
            raise PermanentStartError(
                f"the task's compose file has sidecars ({', '.join(plan.sidecars)}) but the "
                f"{self.runtime.runtime} runtime of this engine gives containers no network "
                "(registered with --network=none); run multi-container tasks with runc"
            )
        if self._net.namespace:
            # No host rules: the engine's network is the guard, the holder joins it.
            self._sidecar_hosts = self._compose.up()
            if self._net.namespaced:
                self._net.join_project(
                    self._compose.network, self._compose.subnets, self._sidecar_hosts
                )
            return self._compose.network
        # The host guard first: the trial's chain jumps from INPUT above the guard's drop.
        self._compose.shield_host()
        self._net.before_compose(self._compose.bridge, self._compose.network, self._compose.guard)
        self._sidecar_hosts = self._compose.up()
        self._net.after_compose(self._sidecar_hosts)
        return self._compose.network

    def _storage_mounts(self, name: str, labels: dict[str, str]) -> list[Mount]:
        """The trial's filesystem on the host, and the mounts that put it in the container."""
        if not self.runtime.host_storage:
            # The workspace is the image root's own dir: under the root's cap.
            return []
        # A warm container never waits for disk room a running trial might need.
        self._prepared = self.runtime.storage_pool.take(
            self.spec.resources.storage_mb, spare=self.spec.trial_id == "warm"
        )
        self._root, self._storage = self._prepared.root, self._prepared.storage
        fs = self._storage.mount_point
        os.chmod(fs, 0o755)
        for sub, _target in (("workspace", ""), *_STORAGE_BINDS):
            (fs / sub).mkdir(mode=0o755)
        for sub in ("tmp", "var-tmp", "shm"):
            os.chmod(fs / sub, 0o1777)
        # A volume (not a bind) over the workspace dir, so the engine copies the image's own
        # workdir content into it, and labelled like everything else.
        self._volume = call(
            self.client.volumes.create,
            f"{name}-ws",
            driver="local",
            driver_opts={"type": "none", "o": "bind", "device": str(fs / "workspace")},
            labels=labels,
        )
        return [
            Mount(self._workdir, self._volume.name, type="volume"),
            *(Mount(target, str(fs / sub), type="bind") for sub, target in _STORAGE_BINDS),
        ]

    def _whois(self, user: str | int) -> tuple[int, int]:
        found = self._call({"op": "whois", "name": str(user)})
        return int(found["uid"]), int(found["gid"])

    def _setup(self, config: dict[str, Any]) -> None:
        """The agent's and verifier's ids, and the trial's dirs (before any fixture)."""
        spec = self.spec
        self.identity = resolve(
            spec.agent_root,
            spec.agent_user,
            config.get("User"),
            lambda name: self._whois(name),
            self.agent_boundary,
        )
        self._agent_id = (self.identity.uid, self.identity.gid)
        # Harbor runs the verifier as the image's user (usually root) unless the task says.
        verifier = spec.verifier_user if spec.verifier_user not in (None, "") else None
        verifier = verifier or config.get("User") or "root"
        if str(verifier) not in ("root", "0", "0:0"):
            self._verifier_id = self._whois(str(verifier).split(":")[0])
        agent = {"uid": self._agent_id[0], "gid": self._agent_id[1]}
        root = {"uid": 0, "gid": 0}
        for path, owner, mode in (
            (f"{_TRIAL}/home", agent, 0o700),
            (f"{_TRIAL}/session", agent, 0o700),
            (f"{_TRIAL}/logs", root, 0o700),
            ("/logs/verifier", root, 0o755),
            (ARTIFACTS_DIR, agent, 0o755),
            # A walled root agent is granted /logs/agent by name, which must exist when its
            # phase starts (Harbor's agents write their logs there; /logs is denied whole).
            *((("/logs/agent", agent, 0o755),) if self._landlocked() else ()),
        ):
            # keep_dir: home and session may be mount points (the trial's filesystem).
            self._call(
                {"op": "reset_dir", "path": path, "owner": owner, "mode": mode, "keep_dir": True}
            )
        self._call({"op": "reset_dir", "path": f"{_TRIAL}/home/tmp", "owner": agent, "mode": 0o700})

    def _seed(self) -> None:
        """Put the task's fixtures in the workspace and hand it to the agent."""
        spec = self.spec
        agent = {"uid": self._agent_id[0], "gid": self._agent_id[1]}
        root = {"uid": 0, "gid": 0}
        # The agent's fresh HOME gets its user's dotfiles from the image, as a verifier's.
        self._call(self._seed_home_op(f"{_TRIAL}/home", agent))
        if self._storage is not None:
            # The workspace is on the host, and the engine has copied the image's content in
            # (at start): fill and hand it over there, at disk speed. No process but the
            # supervisor runs yet; writes never follow a symlink the image may hold.
            workspace = self._storage.mount_point / "workspace"
            seed_workspace(workspace, spec.fixtures)
            chown_tree(workspace, *self._agent_id)
            return
        files = []
        for rel, fixture in spec.fixtures.items():
            check_fixture_path(rel)
            data, mode = fixture if isinstance(fixture, tuple) else (fixture, 0o644)
            files.append({"path": rel, "data": _b64(data), "mode": mode})
        if files:
            self._call({"op": "put", "dest": self._workdir, "files": files, "owner": root})
        # The workspace belongs to the agent (image content included).
        self._call({"op": "chown_tree", "path": self._workdir, "owner": agent})

    def _start_workload(self, config: dict[str, Any]) -> None:
        """Run the image's ENTRYPOINT as Harbor does (its CMD replaced by a sleep).

        It is a protected service of the supervisor: it outlives every phase and dies with
        the container. An image without an ENTRYPOINT has no workload.
        """
        entrypoint = list(config.get("Entrypoint") or [])
        if not entrypoint:
            return
        argv = [*entrypoint, *(self.workload_command or ["sh", "-c", "sleep infinity"])]
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        env.update(self._workload_env)
        env.update(self.spec.workload_env)
        user = str(config.get("User") or "").split(":")[0]
        who = None
        if user not in ("", "root", "0"):
            uid, gid = self._whois(user)
            who = {"uid": uid, "gid": gid}
        found = self._call(
            {
                "op": "service",
                "argv": argv,
                "env": env,
                "cwd": self._workdir,
                "user": who,
                "rlimits": {"core": 0, "nofile": self.spec.resources.nofile},
                "logs": {
                    "stdout": f"{_TRIAL}/logs/workload.stdout",
                    "stderr": f"{_TRIAL}/logs/workload.stderr",
                },
                "max_output_bytes": _WORKLOAD_LOG_BYTES,
            }
        )
        error = found.get("service_error")
        if error:
            raise PermanentStartError(
                f"the image's ENTRYPOINT {argv} could not start: {error.get('type')}: "
                f"{error.get('message')}"
            )
        self.workload = {"argv": argv, "uid": who["uid"] if who else 0}

    @override
    def new_agent_user(self) -> tuple[int, int]:
        # The phase's end killed every process of the earlier agent's uid (kill_uid).
        taken = {self._agent_id[0], self._verifier_id[0], *(u for u, _g in self._former_agents)}
        if self.workload is not None:
            taken.add(int(self.workload["uid"]))
        uid = next(u for u in range(DEFAULT_UID - 1, 0, -1) if u not in taken)
        new = {"uid": uid, "gid": uid}
        home = f"{_TRIAL}/home"
        for path in (self._workdir, home, f"{_TRIAL}/session", ARTIFACTS_DIR):
            # Whatever mode the earlier agent gave its home, no other uid may enter it now:
            # the new user's private dirs (a judge's verdict) live there.
            mode = {"mode": 0o700} if path == home else {}
            self._call({"op": "chown_tree", "path": path, "owner": new, **mode})
        self._former_agents.append(self._agent_id)
        self._agent_id = (uid, uid)
        return self._agent_id

    @override
    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:
        directory, name = posixpath.split(dest)
        item = {"path": name, "data": _b64(data), "mode": mode if agent_readable else mode & 0o700}
        self._call({"op": "put", "dest": directory, "files": [item]})
        if dest == self.paths.instruction:
            self._instruction = (directory, item)

    @override
    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:
        files = dir_files(src, readable=agent_readable)
        dir_mode = 0o755 if agent_readable else 0o700
        owner = self._owner(agent_readable)
        self._batch(
            [
                {
                    "op": "reset_dir",
                    "path": dest,
                    "mode": dir_mode,
                    "keep_dir": True,
                    "owner": owner,
                },
                {"op": "put", "dest": dest, "files": files, "dir_mode": dir_mode, "owner": owner},
            ]
        )
        if dest == "/solution":
            self._solution_readable = agent_readable

    @override
    def upload(self, src: Path, dest: str, *, owner: Role) -> None:
        uid, gid = self._agent_id if owner == "agent" else self._verifier_id
        who = {"uid": uid, "gid": gid}
        self._call(
            {
                "op": "put",
                "dest": dest,
                "files": dir_files(src),
                "owner": who,
                "own_top": True,
                "top_mode": 0o755,
            }
        )

    @override
    def reset_dir(self, path: str) -> None:
        self._call({"op": "reset_dir", "path": path, "mode": 0o700, "keep_dir": True})
        if path == "/solution":
            self._solution_readable = False

    def _owner(self, agent_readable: bool) -> dict[str, int] | None:
        """Who owns what the harness puts in: root, or the verifier for grader-only files."""
        if agent_readable or self._verifier_id == (0, 0):
            return None
        return {"uid": self._verifier_id[0], "gid": self._verifier_id[1]}

    def _cap_files(self, payload: PhaseWire) -> None:
        """Without a trial filesystem, no file of a root phase's past ``storage_mb``.

        The engine's ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf`` are bound
        in read-write, outside the layer's cap (engine's or watcher's), and only root
        writes them: a hard ``RLIMIT_FSIZE`` (no phase has ``CAP_SYS_RESOURCE`` to raise it).
        """
        user = payload.get("user")
        root = not isinstance(user, dict) or int(user.get("uid", 0)) == 0
        if root and self.root_cap in (SOFT, HARD_ENGINE):
            payload["rlimits"] = {**payload.get("rlimits", {}), "fsize": self._cap_mb << 20}

    def _confine_agent(self, payload: PhaseWire) -> PhaseWire:
        uid, gid = self._agent_id
        payload["user"] = {"uid": uid, "gid": gid}
        self._cap_files(payload)
        if uid == 0:
            # Root reads what it owns: nothing of the grader's is there while it runs
            # (docs/security.md, "A root agent"); every process of the container but the
            # services is the phase's (kill_uid 0 would name the supervisor itself).
            payload["root_agent"] = {"caps": list(ROOT_AGENT_CAPS)}
            if self._landlocked():
                payload["root_agent"]["landlock"] = self._landlock_spec()
            payload["kill_uid"] = False
            payload["unreadable"] = []
            return payload
        payload["unreadable"] = [
            "/tests",
            SUPERVISOR_MOUNT,
            f"{_TRIAL}/logs",
            f"{_TRIAL}/grader",
            EXEC_DIR,
            *([] if self._solution_readable else ["/solution"]),
            *([GATEWAY_MOUNT] if self.spec.gateway_socket is not None else []),
        ]
        return payload

    @override
    def run_phase(self, request: PhaseRequest) -> PhaseResult:  # noqa: C901
        self._last_role = request.role
        # The previous phase's processes are all dead (its run_phase returned): switch.
        self._net.switch(request.role, self._container, request.step)
        payload = phase_payload(
            request,
            cwd=request.cwd or self._workdir,
            logs=f"{_TRIAL}/logs",
            nofile=self.spec.resources.nofile,
            gateway_socket=self._gateway_socket(),
        )
        # An allowlist phase's proxy (HTTP_PROXY and friends); nothing for the others.
        payload["env"].update(self._net.phase_env(request.role, request.step))
        private_tmp = request.role == "verifier" and not request.shared_tmp
        own_logs = sorted(str(path) for path in payload["logs"].values())
        if request.role != "agent":
            self._grader_logs.update(own_logs)
        if self._agent_id[0] == 0:
            # Fresh inodes for every log (a root agent could have linked one elsewhere),
            # and before a root agent no earlier grader output left to read.
            stale = own_logs + (sorted(self._grader_logs) if request.role == "agent" else [])
            payload["delete_files"] = [*payload.get("delete_files", []), *stale]
        if request.role == "agent":
            self._confine_agent(payload)
            if self.spec.agent_services == "keep" and (
                self._agent_id[0] != 0 or self._landlocked()
            ):
                payload["keep_listeners"] = True
                self._kept_asked = True
        else:
            self._prepare_grader()
            if self._kept_asked:
                payload["agent_services"] = {
                    "user": {"uid": self._agent_id[0], "gid": self._agent_id[1]},
                    "drop": self._kept_refusal(request),
                    # The verifier itself (not a collect hook or a healthcheck): the last.
                    "last": request.log_name is None,
                }
            if self._verifier_id != (0, 0):
                uid, gid = self._verifier_id
                payload["user"] = {"uid": uid, "gid": gid}
            self._cap_files(payload)
            template: PhaseWire = {
                "env": {**request.agent_env, **self._net.phase_env(request.role, request.step)},
                "cwd": self._workdir,
                "rlimits": {"core": 0, "nofile": self.spec.resources.nofile},
            }
            payload["agent_exec"] = {
                "listen": EXEC_SOCKET,
                "owner": {"uid": self._verifier_id[0], "gid": self._verifier_id[1]},
                "template": self._confine_agent(template),
                "max_output_bytes": request.max_output_bytes,
            }
            refused = self._exec_refusal(request)
            if refused is not None:
                payload["agent_exec"]["refused"] = refused
        try:
            if private_tmp:
                self._private_tmp()
            for src, dest in request.scratch_uploads:
                self.upload(src, dest, owner="verifier")
            user = payload.get("user")
            self._phase_uid = int(user["uid"]) if isinstance(user, dict) else 0
            try:
                result = PhaseResult.from_json(self._call(dict(payload)))
            finally:
                self._phase_uid = None
        except BaseException as exc:
            if private_tmp:  # the agent's files back whatever failed (its error is reported)
                self._shared_tmp(quiet=True)
            if not isinstance(exc, SupervisorError):
                raise
            if isinstance(exc, ChannelForged):  # the phase's own processes wrote it
                raise SandboxDied(str(exc), request.role) from exc
            died = self._died(request.role)
            if died is None:
                raise
            raise died from exc
        if private_tmp:
            self._shared_tmp()
        if request.role == "agent" and self._agent_id[0] == 0:
            self._clear_after_root(own_logs, request.max_output_bytes)
        if request.role == "verifier":
            self._close_grader()
        if request.role == "agent" and result.posture is not None and self.identity is not None:
            result.posture["identity"] = self.identity.to_json()
        return result

    def _clear_after_root(self, own_logs: list[str], max_output_bytes: int) -> None:
        """Empty what a root agent left in the root-only spaces the harness writes next.

        A root agent writes ``/trial`` and ``/logs`` (tmpfs mounts of 64 MB): filled, the
        harness's next step there (the grader's home, the verifier's captures and reward)
        would fail with ``ENOSPC``. Every process of the phase is dead now: ``/trial`` keeps
        its mount points and the captures' dir, the captures keep what their writers wrote
        (the phase's own, cut to their cap; the workload's) and nothing else, ``/logs``
        keeps the artifacts' own tmpfs and a fresh, empty ``/logs/verifier``; the
        instruction is put back as the harness wrote it.
        """
        trim = {posixpath.basename(path): max_output_bytes for path in own_logs}
        for stream in ("stdout", "stderr"):
            trim[f"workload.{stream}"] = _WORKLOAD_LOG_BYTES
        ops: list[dict[str, Any]] = [
            {"op": "clear_dir", "path": _TRIAL, "keep": list(_TRIAL_KEPT)},
            {"op": "clear_dir", "path": f"{_TRIAL}/logs", "trim": trim},
            {"op": "clear_dir", "path": "/logs", "keep": [posixpath.basename(ARTIFACTS_DIR)]},
            {"op": "reset_dir", "path": "/logs/verifier", "mode": 0o755},
        ]
        if self._instruction is not None:
            directory, item = self._instruction
            ops.append({"op": "put", "dest": directory, "files": [item]})
        self._batch(ops)

    def _private_tmp(self) -> None:
        """Fresh, empty, verifier-owned ``/tmp``, ``/var/tmp``, ``/dev/shm`` (:mod:`scratch`).

        On the host the agent's entries are parked; inside, the supervisor then empties
        each dir of what is not on the host's disk (gVisor keeps FIFOs and sockets in the
        sandbox) and, without host storage, of everything: the agent's files there do not
        survive a verifier phase.
        """
        if self._storage is not None:
            park(self._storage.mount_point, self._verifier_id)
        group = self._apt_group()
        owner = {
            "uid": self._verifier_id[0],
            "gid": self._verifier_id[1] if group is None else group,
        }
        self._batch(
            [
                {
                    "op": "reset_dir",
                    "path": target,
                    "owner": owner,
                    "mode": PRIVATE_MODE if group is None else SERVICE_MODE,
                    "keep_dir": True,
                }
                for target in _SCRATCH_TARGETS
            ]
        )

    def _apt_group(self) -> int | None:
        """The group apt's sandbox user (``_apt``) runs as, if the agent cannot be in it.

        A verifier's ``apt-get update`` drops to ``_apt``, which must create its files in
        ``/tmp`` (:data:`sandbox.scratch.SERVICE_MODE`). None where the image has no such
        user, or its group is root's, the agent's or the verifier's own.
        """
        if not self._service_gid_asked:
            self._service_gid_asked = True
            try:
                _uid, gid = self._whois("_apt")
            except SandboxError:
                return None
            taken = {0, self._agent_id[1], self._verifier_id[1]}
            self._service_gid = None if gid in taken else gid
        return self._service_gid

    def _shared_tmp(self, *, quiet: bool = False) -> None:
        """The scratch dirs back to the agent: the verifier's files gone, the agent's back.

        ``quiet``: the phase already failed (the container may be gone); its error is the
        one reported, and the host side is restored all the same.
        """
        try:
            self._batch(
                [
                    {"op": "reset_dir", "path": target, "mode": SHARED_MODE, "keep_dir": True}
                    for target in _SCRATCH_TARGETS
                ]
            )
        except SandboxError:
            if not quiet:
                raise
        finally:
            if self._storage is not None:
                unpark(self._storage.mount_point)

    def _exec_refusal(self, request: PhaseRequest) -> str | None:
        """Why the verifier's agent commands must not run here, or None.

        While an agent command runs, the verifier waits for it with ``[verifier].env`` in
        its environment. Linux lets only the same uid read ``/proc/<pid>/environ``; gVisor
        lets every process read it, and has no mount namespace to give the command a /proc
        of its own.
        """
        if self._agent_id[0] == 0:
            return (
                "the agent runs as root (--agent-root), which reads /tests and every grader "
                "file while the verifier runs: $HARNESS_AGENT_EXEC is refused for a root "
                "agent; run the task with --agent-root never"
            )
        names = ", ".join(sorted(request.confidential_env))
        if not names:
            return None
        if self.runtime.runtime == "runsc":
            return (
                f"under gVisor (runsc) any process can read the verifier's environment, and "
                f"so its [verifier].env ({names}): $HARNESS_AGENT_EXEC is refused for this "
                "task; run it with runc, or ship the values in tests/ instead of "
                "[verifier].env"
            )
        if self._verifier_id[0] == self._agent_id[0]:
            return (
                f"the verifier runs as the agent's user (uid {self._agent_id[0]}), whose "
                f"code could read its [verifier].env ({names}): $HARNESS_AGENT_EXEC is "
                "refused for this task; set [verifier].user to another user"
            )
        return None

    def _landlocked(self) -> bool:
        """A root agent whose services are kept: its phases run in a Landlock domain."""
        return self.spec.agent_services == "keep" and self._agent_id[0] == 0

    def _landlock_spec(self) -> dict[str, list[str]]:
        """What of ``/`` a walled root agent may not touch: the grader's and the harness's.

        The agent's own dirs inside them are granted back; of ``/trial``, what is there when
        the phase starts (its home, session, instruction) but the harness's logs and the
        grader's home. ``/opt``'s harness mounts are read-only binds of the harness's code,
        granted with ``/opt`` (docs/security.md).
        """
        deny = ["/tests", "/logs", f"{_TRIAL}/logs", f"{_TRIAL}/grader"]
        if not self._solution_readable:
            deny.append("/solution")
        return {"deny": deny, "grant": ["/logs/agent", ARTIFACTS_DIR]}

    def _kept_refusal(self, request: PhaseRequest) -> str | None:
        """Why the services an agent left running must die before this verifier, or None.

        They run as the agent's user: a verifier of that user is theirs to signal and read
        (``/proc/<pid>/mem``); gVisor shows every process every other one's environment,
        the verifier's ``[verifier].env`` included; and they share the container's network,
        which is the verifier's while it runs.
        """
        agents = {self._agent_id[0], *(uid for uid, _gid in self._former_agents)}
        # A root agent's are walled in by Landlock, whatever the verifier's uid.
        if self._verifier_id[0] in agents and not (self._landlocked() and not self._former_agents):
            return (
                f"the verifier runs as the agent's user (uid {self._verifier_id[0]}), whose "
                "services could signal it and read its memory"
            )
        names = ", ".join(sorted(request.confidential_env))
        if names and self.runtime.runtime == "runsc":
            return (
                f"under gVisor (runsc) any process can read the verifier's environment, and "
                f"so its [verifier].env ({names})"
            )
        # The container's network is the running phase's: beside a verifier that reaches
        # more than the agent did, the services would get it too.
        mine = self.spec.network_for("agent", request.step)
        theirs = self.spec.network_for("verifier", request.step)
        if theirs.internet and (theirs.mode, set(theirs.allowed_hosts)) != (
            mine.mode,
            set(mine.allowed_hosts),
        ):
            return (
                f"the verifier's network ({theirs.mode}) is not the agent's ({mine.mode}): "
                "the services would reach what the agent phase could not"
            )
        return None

    def _close_grader(self) -> None:
        """The grader's dirs live for its phase only: root-only again before any agent.

        A healthcheck or a step's verifier comes before a later agent phase, whose user
        may be the verifier's own (an image ``USER`` for both); nothing of the grader's
        may be readable then.
        """
        self._batch(
            [{"op": "reset_dir", "path": p, "mode": 0o700} for p in (f"{_TRIAL}/grader", EXEC_DIR)]
        )

    def _died(self, role: str, *, oom_only: bool = False) -> SandboxDied | None:
        """Why the container stopped during (or after) a phase, if it stopped by itself.

        ``oom_only``: only a container the engine says ran out of memory (``OOMKilled``).
        """
        if self._aborted or self._container is None:
            return None
        try:
            call(self._container.reload)
        except EngineError:
            return None  # the engine itself is gone: not the phase's doing
        state = self._container.attrs.get("State") or {}
        if state.get("Running") or (oom_only and not state.get("OOMKilled")):
            return None
        limits = self.spec.resources
        if state.get("OOMKilled"):
            why = f"ran out of memory (memory_mb = {limits.memory_mb})"
        else:
            why = (
                f"stopped with exit code {state.get('ExitCode')} (gVisor stops a sandbox whose "
                f"processes exhaust its limits: memory_mb = {limits.memory_mb}, "
                f"pids = {limits.pids})"
            )
        when = "after" if oom_only else "during"  # a harness step after it, else the phase
        return SandboxDied(f"the trial's container {why} {when} the {role} phase", role)

    def _prepare_grader(self) -> None:
        """Fresh home/tmp dirs for the verifier, and the dir of its agent-exec socket."""
        owner = {"uid": self._verifier_id[0], "gid": self._verifier_id[1]}
        paths = (f"{_TRIAL}/grader", f"{_TRIAL}/grader/home", f"{_TRIAL}/grader/home/tmp", EXEC_DIR)
        self._batch(
            [
                *({"op": "reset_dir", "path": p, "owner": owner, "mode": 0o700} for p in paths),
                # A kept service (the agent's uid, or root behind Landlock) could rewrite a
                # vetted repository's config while the tests run: none is trusted then.
                self._seed_home_op(f"{_TRIAL}/grader/home", owner, git_safe=not self._kept_asked),
            ]
        )

    def _seed_home_op(
        self, home: str, owner: dict[str, int], *, git_safe: bool = False
    ) -> dict[str, Any]:
        """The image's dotfiles for ``owner`` into ``home`` (:mod:`sandbox.inside.home_seed`).

        Never from a dir the agent writes. ``git_safe``: the verifier's ``git`` accepts the
        agent's repositories whose config can run nothing (docs/grading.md).
        """
        workspace = self._workdir
        return {
            "op": "seed_home",
            "home": home,
            "owner": owner,
            "deny": [workspace, _TRIAL, "/tmp", "/var/tmp", "/dev/shm", "/logs"],
            # Each vetted repository by name (never ``<workspace>/*``: git 2.46 and later
            # would trust every repository below, its config's commands included).
            "git_safe_walk": [workspace] if git_safe else [],
        }

    def _gateway_socket(self) -> str | None:
        socket = self.spec.gateway_socket
        return None if socket is None else f"{GATEWAY_MOUNT}/{socket.name}"

    @override
    def reset_verifier_dir(self) -> None:
        uid, gid = self._verifier_id
        owner = {"uid": uid, "gid": gid}
        self._call({"op": "reset_dir", "path": "/logs/verifier", "owner": owner, "mode": 0o755})

    def _on_host(self, path: str) -> str | None:
        """``path`` relative to the trial's host filesystem, when it lives there.

        The workspace, home, session and temp dirs are on the host (:mod:`sandbox.storage`):
        once the phase's processes are dead, evidence is read there directly (no-follow,
        by dir fd), at disk speed and without the container's memory.
        """
        if self._storage is None:
            return None
        normal = posixpath.normpath(path)
        for target, sub in ((self._workdir, "workspace"), *((t, s) for s, t in _STORAGE_BINDS)):
            if normal == target:
                return sub
            if normal.startswith(target.rstrip("/") + "/"):
                return posixpath.join(sub, posixpath.relpath(normal, target))
        return None

    @staticmethod
    def _as_seen_inside(event: EvidenceEvent, rel: str, path: str) -> EvidenceEvent:
        """An event of a host-side copy, named as the in-container copy would name it."""
        if event.path == rel or event.path.startswith(rel + "/"):
            return event._replace(path=path.strip("/") + event.path[len(rel) :])
        return event

    @override
    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:
        rel = self._on_host(path)
        if rel is not None and self._storage is not None:
            data, event = read_file(self._storage.mount_point, rel, max_bytes=max_bytes)
            # gVisor keeps FIFOs and sockets inside the sandbox: "missing" on the host may
            # be one of those, which the supervisor can name.
            if event is None or not (event.kind == "missing" and self._sentry_files):
                return data, None if event is None else self._as_seen_inside(event, rel, path)
        found = self._call({"op": "read", "path": path, "max_bytes": max_bytes})
        if "event" in found:
            return None, EvidenceEvent.from_dict(found["event"])
        return base64.b64decode(found["data"]), None

    @override
    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        rel = self._on_host(path)
        if rel is not None and self._storage is not None:
            events = [
                self._as_seen_inside(event, rel, path)
                for event in copy_path(
                    self._storage.mount_point,
                    rel,
                    dest,
                    max_file_bytes=max_file_bytes,
                    max_total_bytes=max_total_bytes,
                    limits=self.evidence_limits,
                )
            ]
            if self._sentry_files:
                found = self._call({"op": "scan_special", "path": path})["events"]
                events += [EvidenceEvent.from_dict(e) for e in found]
            return events
        found = self._call(
            {
                "op": "archive",
                "path": path,
                "max_file_bytes": max_file_bytes,
                "max_total_bytes": max_total_bytes,
                "limits": self.evidence_limits.as_dict(),
            }
        )
        kept: list[EvidenceEvent] = []
        for item in found.get("files", []):
            sub = str(item["path"])
            parts = sub.split("/")
            if sub and (
                sub.startswith("/")
                or ".." in parts
                or len(os.fsencode(sub)) > self.evidence_limits.max_path_bytes
            ):  # the walk inside never names such a path: refuse it, never write it
                kept.append(EvidenceEvent("error", f"{path.strip('/')}/{sub}", "bad path"))
                continue
            target = dest / sub if sub else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(item["data"]))
        events = found.get("events", [])
        return [EvidenceEvent.from_dict(e) for e in events] + kept

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
        rel = self._on_host(path)
        if rel is None or self._storage is None:
            return super().snapshot_out(
                path,
                store=store,
                seed=seed,
                links=links,
                max_file_bytes=max_file_bytes,
                max_total_bytes=max_total_bytes,
            )
        manifest, found = snapshot_tree(
            self._storage.mount_point,
            rel,
            store=store,
            seed=seed,
            links=links,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
            limits=self.evidence_limits,
        )
        events = [self._as_seen_inside(event, rel, path) for event in found]
        if self._sentry_files:
            specials = self._call({"op": "scan_special", "path": path})["events"]
            prefix = path.strip("/") + "/"
            for e in specials:
                events.append(EvidenceEvent.from_dict(e))
                if e["path"].startswith(prefix):
                    entry = {"path": e["path"][len(prefix) :], "type": e["kind"]}
                    manifest["special"].append({**entry, "detail": e.get("detail", "")})
        return manifest, events

    @override
    def abort(self) -> None:
        # Killing the container ends the supervisor's exec stream: the phase call fails
        # at once, and stop() removes the container and its volume as usual.
        self._aborted = True
        if self._container is not None:
            try:
                call(self._container.kill)
            except EngineError:
                pass

    @override
    def environment_env(self) -> dict[str, str]:
        return dict(self._workload_env)

    @override
    def sidecars(self) -> SidecarAccess | None:
        if self._compose is None or not self._compose.started or self._container is None:
            return None
        return DockerSidecars(self.client, self._compose, self._container)

    @override
    def image_config(self) -> ImageConfig | None:
        if self.image is None:
            return None
        return ImageConfig.from_engine(self.runtime.image_attrs(self.image).get("Config"))

    def network_events(self) -> list[dict[str, Any]]:
        """The egress filter's refusals since the last call (``network_refused`` events).

        One per destination range and phase, with a packet count.
        """
        return self._net.events()

    @override
    def storage_usage(self) -> tuple[int, int] | None:
        if self._storage is None:
            if self.root_cap not in (SOFT, HARD_ENGINE) or self._container is None:
                return None
            # The root layer is the trial's storage (the workspace in it): as the engine
            # measures it, at least what the watcher saw when it stopped the writer.
            used = layer_bytes(self.client, self._container.id)
            limit = self._cap_mb << 20
            if self._watched is not None and self._watched.full:
                used = max(used, self._watched.peak_bytes)
            if self.root_cap == HARD_ENGINE and used >= limit - max(16 << 20, limit // 16):
                # The engine's quota counts what SizeRw does not (the filesystem's metadata,
                # btrfs's share of the image): this close to it, writes met EDQUOT/ENOSPC.
                used = limit
            return used, limit
        usage = self._storage.usage()
        return usage.used_bytes, usage.limit_bytes

    @override
    def artifacts_usage(self) -> tuple[int, int] | None:
        space = self._call({"op": "space", "path": ARTIFACTS_DIR})
        total, free = int(space["total_bytes"]), int(space["free_bytes"])
        return total - free, total

    @override
    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._channel is not None:
            # No goodbye needed: removing the container ends the supervisor.
            self._channel.drop()
            self._session = None
        pool = self.runtime.warm
        if pool is not None and self._compose is None and not self._aborted:
            # Off the critical path: the trial's evidence is out, its record is next;
            # the run waits for (and reports) every removal before it ends.
            pool.later(self._remove)
            return
        self._remove()

    def _remove(self) -> None:  # noqa: C901
        """Remove the container, its sidecars, its volume and its filesystem, in order."""
        errors: list[Exception] = []
        if self._watched is not None:
            self.runtime.layer_watcher().forget(self._watched.container_id)
        try:
            self._net.remove()  # its chain first: the container is dropped from now on
        except SandboxError as exc:
            errors.append(exc)
        if self._rootlayer is not None:
            # Unbound first (lazily: the container's overlay keeps its own references), so
            # the engine removes only its own original layer dir, never the agent's tree.
            try:
                self._rootlayer.detach()
            except Exception as exc:
                errors.append(exc)
        if self._enginefiles is not None:  # likewise: the engine removes its own dir
            try:
                self._enginefiles.detach()
            except Exception as exc:
                errors.append(exc)
        # Every step runs whatever the engine answers (an unreachable engine raises the
        # SDK's connection errors, not an EngineError): the trial's filesystem and its
        # share of the storage budget must go even then.
        if self._container is not None:
            try:
                call(self._container.remove, force=True, v=True)
            except EngineObjectMissing:
                pass
            except Exception as exc:
                errors.append(SandboxError(f"cannot remove container: {exc}"))
        try:
            self._net.remove_holder()  # after the container, whose namespace it held
        except Exception as exc:
            errors.append(SandboxError(f"cannot remove the network namespace's holder: {exc}"))
        if self._compose is not None:
            try:
                self._compose.down()
            except SandboxError as exc:
                errors.append(exc)
        if self._volume is not None:
            try:
                call(self._volume.remove, force=True)
            except EngineObjectMissing:
                pass
            except Exception as exc:
                errors.append(SandboxError(f"cannot remove volume {self._volume.name}: {exc}"))
        try:
            self._remove_storage()
        except Exception as exc:
            errors.append(exc)
        if self._disk_promised:  # the container and its layer are gone
            self.runtime.engine_disk().release(self._disk_promised)
            self._disk_promised = 0
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("docker sandbox stop failed", errors)

    def _remove_storage(self) -> None:
        """Hand the trial's filesystem to the background removal (checked at the run's end).

        The container, and so every process that could write to it, is gone by now.
        """
        if self._prepared is not None:
            prepared, self._prepared = self._prepared, None
            self.runtime.storage_pool.give_back(prepared)

    @override
    def describe(self) -> dict[str, Any]:
        res = self.spec.resources
        return {
            "backend": self.backend,
            "image": self.image,
            **({"image_build": self._resolved.describe()} if self._resolved is not None else {}),
            **(
                {"sidecar_images": {n: r.describe() for n, r in self._sidecar_images.items()}}
                if self._sidecar_images
                else {}
            ),
            "runtime": self.runtime.runtime or "runc",
            "container": self._container.short_id if self._container is not None else None,
            "warm": self._warm,
            "network": self._network,
            **self._net.describe(),
            **({"compose": self._compose.describe()} if self._compose is not None else {}),
            "uid": self._agent_id[0],
            "gid": self._agent_id[1],
            **({"agent_identity": self.identity.to_json()} if self.identity is not None else {}),
            "verifier_uid": self._verifier_id[0],
            **({"workload": self.workload} if self.workload is not None else {}),
            **(
                {
                    "agent_services": "keep",
                    "agent_services_wall": "landlock" if self._landlocked() else "uid",
                }
                if self.spec.agent_services == "keep"
                else {}
            ),
            **({"gpus": self.spec.gpus} if self.spec.gpus else {}),
            "limits": {
                "cpus": res.cpus,
                "memory_mb": res.memory_mb,
                "pids": res.pids,
                "storage_mb": (
                    self._storage.size_mb
                    if self._storage is not None
                    else self._cap_mb
                    if self.root_cap is not None
                    else None
                ),
                "storage": self.root_cap,
                "enforced": self._limits_enforced(),
                "policy": {"cpus": self.spec.cpu_policy, "memory_mb": self.spec.memory_policy},
                # Each tmpfs's inode cap (an engine may refuse nr_inodes: tmpfs_caps.py).
                "tmpfs_inodes": inode_caps(self.client, self.runtime.base_image),
            },
        }

    def _limits_enforced(self) -> dict[str, bool | str]:
        """Which limits held, as the engine and the created container's configuration say."""
        res = self.spec.resources
        held: dict[str, bool | str] = dict.fromkeys(CGROUP_LIMITS, False)
        if self._container is not None:
            host_config = self._container.attrs.get("HostConfig") or {}
            held = enforced(
                self.runtime.engine_info(),
                host_config,
                memory_mb=res.memory_mb,
                cpus=res.cpus,
                pids=res.pids,
                policies={"cpus": self.spec.cpu_policy, "memory_mb": self.spec.memory_policy},
                shares=cpu_shares(res.cpus),
            )
        storage: bool | str = self._storage is not None or self.root_cap == HARD_ENGINE
        if not storage and self.root_cap == SOFT:
            storage = "soft"  # polled and stopped at the cap, not refused by the kernel
        return {**held, "storage_mb": storage}

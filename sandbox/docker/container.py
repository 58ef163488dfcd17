"""A trial container's create arguments: every hardening flag, in one readable place.

:func:`create_args` is pure: from a trial's :class:`~sandbox.backend.SandboxSpec` and what
the backend already decided for it (:class:`ContainerSite`: its image, name, network, the
mounts of its filesystem) to the keyword arguments of ``containers.create``. The backend
makes the volumes and the trial filesystem, then hands their mounts here; nothing in this
module talks to an engine, so every flag is unit-tested without one
(tests/unit/test_container_args.py).

The container (docs/security.md): the supervisor as pid 1 under ``0:0`` with only
:data:`SUPERVISOR_CAPS` (it drops them for every phase), ``no-new-privileges``, a
writable root capped by ``storage_mb`` (its layer on the trial's filesystem:
:mod:`sandbox.docker.rootlayer`; else ``storage_opt size`` where the engine has it, else
the run's watcher: :mod:`sandbox.docker.rootcap`), its own tmpfs scratch dirs, no core
dumps, pids, memory (no swap beyond it), CPU and open-file limits, no environment of its
own but the supervisor's (the image's, with its dynamic-loader variables emptied, the C
locale and no OpenSSL config), and the engine's default seccomp profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import LogConfig, Mount, Ulimit

from sandbox.backend import SandboxSpec
from sandbox.docker.egress import NETWORK as EGRESS_NETWORK
from sandbox.docker.egress import SYSCTLS as EGRESS_SYSCTLS
from sandbox.docker.gpus import device_requests
from sandbox.docker.runtime import PYTHON_MOUNT, SUPERVISOR_MOUNT
from sandbox.resource_policy import caps, reserves
from sandbox.verifier_tools import TOOLS_MOUNT

#: Where the trial's model-gateway socket dir is mounted (root-only: the agent can't open it).
GATEWAY_MOUNT = "/opt/harness-gateway"
#: Capabilities the root supervisor keeps until it drops; the agent's sets are all empty.
#: ``FSETID`` and ``NET_BIND_SERVICE`` are here only for a root agent (``agent_root``):
#: ``dpkg`` keeps a package's setgid bits with the first (``chage``'s ``shadow``) and a
#: service the agent starts binds port 80 with the second; an unprivileged agent drops
#: both with the rest, and neither reaches past the container (no mount, no raw socket).
SUPERVISOR_CAPS = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "SETUID",
    "SETGID",
    "SETPCAP",
    "KILL",
    "NET_BIND_SERVICE",
]
#: What a root agent keeps of them: ``apt-get install`` (``dpkg`` chowns, writes root's
#: and ``_apt``'s dirs, drops to ``_apt``), ``useradd``/``chown``, starting and stopping
#: services that switch users. Never ``SETPCAP`` (its bounding set stays cut), never
#: ``SYS_ADMIN``, ``SYS_PTRACE``, ``NET_ADMIN``, ``MKNOD`` or ``SYS_MODULE`` (not in the
#: container at all).
ROOT_AGENT_CAPS = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "SETUID",
    "SETGID",
    "KILL",
    "NET_BIND_SERVICE",
]
#: The trial's own dirs (home, session, ...) inside the container.
TRIAL_DIR = "/trial"
#: Harbor's artifacts convention dir: a tmpfs of its own, never ``/logs``'s space, so an
#: agent that fills it leaves the verifier room for its reward (``/logs/verifier``).
ARTIFACTS_DIR = "/logs/artifacts"
#: Its size: what the agent leaves there past this fails with ``ENOSPC`` (less where
#: ``memory_mb`` is small: :func:`agent_spaces_mb`).
ARTIFACTS_MB = 64
#: Every tmpfs gets one inode (``nr_inodes``) per this many bytes of its size: an empty
#: file costs no page but kernel memory (its inode and dentry) charged to the container
#: all the same, so a tmpfs caps the count of its files as well as their bytes.
INODE_SPAN = 8 << 10
#: The same for the root-only spaces the harness and the verifier write (``/trial`` with
#: the grader's home, ``/logs``, ``/tests``, ...): their many small files (a verifier's
#: package cache) need more inodes; only a root agent writes them, and the harness empties
#: ``/trial`` and ``/logs`` after its phase (:mod:`sandbox.docker.backend`).
HARNESS_INODE_SPAN = 2 << 10
#: What one tmpfs inode can cost the container's memory at most: the inode, its dentry
#: and a 255-byte name (about 1.2 KB measured; rounded up).
INODE_COST = 1536
#: The memory-backed spaces an unprivileged agent writes, and the sizes they get where
#: ``memory_mb`` has room for them (:func:`agent_spaces_mb`). ``/logs/artifacts`` always;
#: the scratch dirs and the agent's own dirs only without host storage (with it they are
#: on the trial's filesystem on disk, whose pages the kernel can write back and drop).
AGENT_SPACES_MB = {
    ARTIFACTS_DIR: ARTIFACTS_MB,
    "/tmp": 512,
    "/var/tmp": 256,
    "/dev/shm": 64,
    "/trial/home": 256,
    "/trial/session": 64,
}
#: The container's IPC namespace: a System V shared memory segment is destroyed once no
#: process is attached to it. Otherwise a segment the agent made stays charged to the
#: container's memory after its processes are dead (300 MB of 512 left the verifier's
#: allocation OOM-killed): memory-backed space with no size of its own.
IPC_SYSCTLS = {"kernel.shm_rmid_forced": "1"}
_ON_HOST_STORAGE = ("/tmp", "/var/tmp", "/dev/shm", "/trial/home", "/trial/session")
# Docker adds noexec to tmpfs mounts unless told otherwise; agents and tests legitimately
# run what they build or install in scratch dirs.
SCRATCH_OPTIONS = "rw,nosuid,nodev,exec"
PLAIN_OPTIONS = "rw,nosuid,nodev,noexec"
#: The engine gives the container's pid 1 (the supervisor, root) the image's ``ENV``,
#: which no container setting can unset: these dynamic-loader variables, set empty here,
#: keep an image's ``LD_PRELOAD`` or ``LD_AUDIT`` library out of the supervisor (and of a
#: one-shot supervisor ``docker exec`` starts). Phases get their own environment.
NEUTRAL_LOADER_ENV = {
    name: ""
    for name in (
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "LD_DEBUG",
        "LD_DEBUG_OUTPUT",
        "LD_PROFILE",
        "GLIBC_TUNABLES",
    )
}

#: What else the supervisor's interpreter (and a one-shot supervisor's) must not take from
#: the container's root, where a root agent writes: ``LC_ALL=C`` keeps it in the C locale
#: (no locale file read, so no charset whose ``gconv`` module glibc would ``dlopen``; with
#: ``LC_ALL`` set Python does not coerce to ``C.UTF-8`` either), ``LOCPATH`` names a dir
#: that never exists (inside the read-only supervisor mount) should a locale be asked for,
#: and ``OPENSSL_CONF=/dev/null`` keeps ``/usr/lib/ssl/openssl.cnf`` (which can name
#: provider and engine modules) out of the ``ssl`` import. Phases get their own environment.
SUPERVISOR_ENV = {
    "LC_ALL": "C",
    "LOCPATH": f"{SUPERVISOR_MOUNT}/no-locales",
    "OPENSSL_CONF": "/dev/null",
}


@dataclass(frozen=True)
class ContainerSite:
    """What the backend decided for one trial's container before it is created.

    Attributes:
        image: The resolved image.
        name: The container's name.
        labels: Its labels (the run's, the trial's).
        command: The supervisor's command line (on the mounted Python runtime).
        workdir: The agent's working dir.
        network: ``none``, ``bridge`` or the compose project's network.
        supervisor_dir: Host dir of the staged in-sandbox code (root-only).
        python_volume: The volume with the base image's Python runtime.
        tools_dir: Host dir of the verifier's tools.
        storage_mounts: The trial filesystem's mounts (workspace volume, scratch binds).
        host_storage: The trial's scratch dirs are on its host filesystem (else: tmpfs).
        extra_hosts: Sidecar names and their addresses (compose tasks).
        dns: The resolvers the engine's embedded DNS forwards to (an ``allowlist``
            trial: its egress proxy's responder; None: the host's).
        engine_runtime: The OCI runtime (``runsc``; None: the engine's default).
        writable_root: The image root is writable. Set it only with a cap: its layer
            moved onto the trial's filesystem before start (:mod:`sandbox.docker.rootlayer`),
            ``storage_opt``, or the run's watcher (:mod:`sandbox.docker.rootcap`).
        storage_opt: The engine's own cap of the writable layer (``{"size": "<n>m"}``).
        inode_caps: The engine takes ``nr_inodes`` on tmpfs mounts (podman 4.3 does not).
    """

    image: str
    name: str
    labels: Mapping[str, str]
    command: list[str]
    workdir: str
    network: str
    supervisor_dir: str
    python_volume: str
    tools_dir: str
    storage_mounts: tuple[Mount, ...] = ()
    host_storage: bool = False
    extra_hosts: Mapping[str, str] | None = None
    dns: tuple[str, ...] | None = None
    engine_runtime: str | None = None
    writable_root: bool = False
    storage_opt: Mapping[str, str] | None = None
    inode_caps: bool = True


def inodes(size_mb: int, span: int = INODE_SPAN) -> int:
    """The ``nr_inodes`` of a tmpfs of ``size_mb``: one per ``span`` bytes."""
    return max(1, (size_mb << 20) // span)


def charged_mb(size_mb: int) -> int:
    """What a full tmpfs of ``size_mb`` can hold of the container's memory: bytes and inodes."""
    return size_mb + -(-inodes(size_mb) * INODE_COST >> 20)


def agent_spaces_mb(*, memory_mb: int, host_storage: bool) -> dict[str, int]:
    """The sizes of the memory-backed spaces an unprivileged agent writes, within memory_mb.

    A tmpfs's pages and inodes are charged to the container's memory and stay charged after
    the agent's processes are dead: what the agent leaves there is memory the verifier (and
    the harness's copy of the artifacts) no longer has. Together, full, they may hold at most
    half of ``memory_mb`` (:func:`charged_mb` of each: its bytes plus ``nr_inodes`` times
    :data:`INODE_COST`); where :data:`AGENT_SPACES_MB` would hold more, each is cut in
    proportion (at least 1 MB).
    """
    wanted = {
        path: size
        for path, size in AGENT_SPACES_MB.items()
        if not (host_storage and path in _ON_HOST_STORAGE)
    }
    budget = memory_mb // 2
    charged = sum(charged_mb(size) for size in wanted.values())
    if charged <= budget:
        return wanted
    return {path: max(1, size * budget // charged) for path, size in wanted.items()}


def _tmpfs(
    options: str, size_mb: int, mode: str, span: int = HARNESS_INODE_SPAN, *, caps: bool = True
) -> str:
    if not caps:  # an engine that refuses nr_inodes (sandbox.docker.tmpfs_caps)
        return f"{options},size={size_mb}m,mode={mode}"
    return f"{options},size={size_mb}m,nr_inodes={inodes(size_mb, span)},mode={mode}"


def tmpfs_dirs(
    *, image_tests: bool, host_storage: bool, memory_mb: int = 2048, inode_caps: bool = True
) -> dict[str, str]:
    """The container's tmpfs mounts, each capped in bytes and in inodes (``nr_inodes``).

    The artifacts dir, which the agent writes, is a tmpfs of its own inside ``/logs``
    (the engine mounts ``/logs`` first): filling it never fills ``/logs/verifier``. The
    spaces an unprivileged agent writes are sized by :func:`agent_spaces_mb`. An engine that
    refuses ``nr_inodes`` (``inode_caps`` False) gets the byte caps alone.
    """
    agent = agent_spaces_mb(memory_mb=memory_mb, host_storage=host_storage)

    def tmpfs_of(options: str, size_mb: int, mode: str, span: int = HARNESS_INODE_SPAN) -> str:
        return _tmpfs(options, size_mb, mode, span, caps=inode_caps)

    tmpfs = {
        "/run": tmpfs_of(PLAIN_OPTIONS, 16, "755"),
        TRIAL_DIR: tmpfs_of(SCRATCH_OPTIONS, 64, "711"),
        "/logs": tmpfs_of(PLAIN_OPTIONS, 64, "755"),
        ARTIFACTS_DIR: tmpfs_of(PLAIN_OPTIONS, agent[ARTIFACTS_DIR], "755", INODE_SPAN),
        "/tests": tmpfs_of(SCRATCH_OPTIONS, 256, "700"),
        "/solution": tmpfs_of(SCRATCH_OPTIONS, 256, "700"),
    }
    if image_tests:
        del tmpfs["/tests"]  # a separate verifier's image brings /tests/test.sh
    if not host_storage:
        for path in ("/tmp", "/var/tmp"):
            tmpfs[path] = tmpfs_of(SCRATCH_OPTIONS, agent[path], "1777", INODE_SPAN)
        # The engine's own /dev/shm (shm_size) has no inode cap: this one replaces it.
        tmpfs["/dev/shm"] = tmpfs_of(PLAIN_OPTIONS, agent["/dev/shm"], "1777", INODE_SPAN)
        # The agent's own dirs, never in /trial's space (the grader's home, the captures).
        for path in (f"{TRIAL_DIR}/home", f"{TRIAL_DIR}/session"):
            tmpfs[path] = tmpfs_of(SCRATCH_OPTIONS, agent[path], "700", INODE_SPAN)
    return tmpfs


def gateway_mounts(socket: Path | None) -> list[Mount]:
    """The trial's gateway socket dir (root-only on the host), read-only."""
    if socket is None:
        return []
    return [Mount(GATEWAY_MOUNT, str(socket.parent), type="bind", read_only=True)]


def cpu_args(policy: str, cpus: float) -> dict[str, Any]:
    """``containers.create`` arguments for ``cpus`` under ``policy``.

    A cap is ``--cpus``; a request is a weight, 1024 CPU shares per CPU (Docker's default
    for one container), which only counts when the host's CPUs are contended.
    """
    found: dict[str, Any] = {}
    if caps(policy):
        found["nano_cpus"] = int(cpus * 1e9)
    if reserves(policy):
        found["cpu_shares"] = cpu_shares(cpus)
    return found


def cpu_shares(cpus: float) -> int:
    """The CPU shares a request of ``cpus`` is given (at least the kernel's minimum, 2)."""
    return max(2, int(cpus * 1024))


def memory_args(policy: str, memory_mb: int) -> dict[str, Any]:
    """``containers.create`` arguments for ``memory_mb`` under ``policy``.

    A cap is ``--memory`` with no swap beyond it; a request is ``--memory-reservation``
    (the soft limit the kernel reclaims down to under pressure).
    """
    found: dict[str, Any] = {}
    if caps(policy):
        found["mem_limit"] = f"{memory_mb}m"
        found["memswap_limit"] = f"{memory_mb}m"
    if reserves(policy):
        found["mem_reservation"] = f"{memory_mb}m"
    return found


def create_args(spec: SandboxSpec, site: ContainerSite) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` for a trial's container.

    Args:
        spec: The trial.
        site: What the backend decided for its container.

    Returns:
        ``image`` and every other argument of ``DockerClient.containers.create``.
    """
    res = spec.resources
    # The supervisor is the container's pid 1 (no --init): every orphan of a phase
    # is its child. Its stdin is the attach stream, once-only, so closing it ends the
    # supervisor and the container, and no exec is needed per trial.
    return {
        "image": site.image,
        "command": site.command,
        "entrypoint": [],
        "name": site.name,
        # A container joining another's namespace (its network holder's) takes its name.
        "hostname": None if site.network.startswith("container:") else "sandbox",
        "user": "0:0",
        "working_dir": site.workdir,
        "labels": dict(site.labels),
        "init": False,
        "network_mode": site.network,
        # The filtered network has no IPv6: no link-local address either (egress.py).
        "sysctls": {
            **IPC_SYSCTLS,
            **(EGRESS_SYSCTLS if site.network == EGRESS_NETWORK else {}),
        },
        # A joined namespace shares its owner's /etc/hosts (the engine refuses entries).
        "extra_hosts": (
            dict(site.extra_hosts)
            if site.extra_hosts is not None and not site.network.startswith("container:")
            else None
        ),
        "dns": list(site.dns) if site.dns else None,
        "cap_drop": ["ALL"],
        "cap_add": SUPERVISOR_CAPS,
        "security_opt": ["no-new-privileges"],
        "read_only": not site.writable_root,
        "storage_opt": dict(site.storage_opt) if site.storage_opt else None,
        "tmpfs": tmpfs_dirs(
            image_tests=spec.image_tests,
            host_storage=site.host_storage,
            memory_mb=res.memory_mb,
            inode_caps=site.inode_caps,
        ),
        "mounts": [
            *site.storage_mounts,
            Mount(SUPERVISOR_MOUNT, site.supervisor_dir, type="bind", read_only=True),
            Mount(PYTHON_MOUNT, site.python_volume, type="volume", read_only=True),
            Mount(TOOLS_MOUNT, site.tools_dir, type="bind", read_only=True),
            *gateway_mounts(spec.gateway_socket),
            *(
                Mount(dst, str(src), type="bind", read_only=True)
                for dst, src in sorted(spec.agent_mounts.items())
            ),
        ],
        "pids_limit": res.pids,
        # Each resource as the run's policy says (sandbox.resource_policy).
        **cpu_args(spec.cpu_policy, res.cpus),
        **memory_args(spec.memory_policy, res.memory_mb),
        "ulimits": [
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=res.nofile, hard=res.nofile),
        ],
        "runtime": site.engine_runtime,
        # The engine logs the supervisor's channel: at most 1 MB of it, on the trial's
        # filesystem with a writable root (sandbox.docker.enginefiles), else its own disk.
        "log_config": LogConfig(
            type=LogConfig.types.JSON, config={"max-size": "1m", "max-file": "1"}
        ),
        "environment": {**NEUTRAL_LOADER_ENV, **SUPERVISOR_ENV},
        "device_requests": device_requests(spec.gpus),
        "stdin_open": True,
        "tty": False,
    }


__all__ = [
    "ARTIFACTS_DIR",
    "AGENT_SPACES_MB",
    "ARTIFACTS_MB",
    "GATEWAY_MOUNT",
    "HARNESS_INODE_SPAN",
    "INODE_COST",
    "INODE_SPAN",
    "IPC_SYSCTLS",
    "NEUTRAL_LOADER_ENV",
    "PLAIN_OPTIONS",
    "ROOT_AGENT_CAPS",
    "SCRATCH_OPTIONS",
    "SUPERVISOR_CAPS",
    "SUPERVISOR_ENV",
    "TRIAL_DIR",
    "ContainerSite",
    "agent_spaces_mb",
    "charged_mb",
    "create_args",
    "gateway_mounts",
    "inodes",
    "tmpfs_dirs",
]

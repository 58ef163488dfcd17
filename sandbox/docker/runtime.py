"""What every docker trial of a run shares.

The client, the image resolver, the supervisor's files, the Python runtime it runs on, the
verifier's tools, and the run's disk budget for trial storage.
"""

from __future__ import annotations

import logging
import os
import py_compile
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

import docker
from sandbox.backend import Capacity, CloseReport, inside_modules
from sandbox.docker.egress import EgressRun
from sandbox.docker.egress import problem as egress_problem
from sandbox.docker.engine import remove_leaks
from sandbox.docker.engine_host import engine_host_ipv4
from sandbox.docker.images import ImageResolver
from sandbox.docker.labels import KIND, MANAGED, RUNTIME_KIND
from sandbox.docker.rootcap import (
    HARD_ENGINE,
    SOFT,
    EngineDisk,
    LayerWatcher,
    engine_size_refusal,
    visible_data_root,
)
from sandbox.docker.sdk import EngineError, EngineObjectMissing, ImageMissing, call
from sandbox.docker.warm import WarmPool
from sandbox.errors import EnvironmentStartError, PermanentStartError, SandboxError
from sandbox.storage import StorageBudget, storage_supported
from sandbox.storage_pool import StoragePool
from sandbox.verifier_tools import stage_tools

logger = logging.getLogger(__name__)

SUPERVISOR_MOUNT = "/opt/harness"
PYTHON_MOUNT = "/opt/harness-python"
RUNTIME_PYTHON = (3, 11)
#: The runtime's own loader: glibc's, with its one built-in path of the preload list
#: (``/etc/ld.so.preload``, read by every loader run and no option turns it off)
#: renamed to one in the supervisor's read-only mount that never exists, so a one-shot
#: supervisor ``docker exec`` starts after a root agent wrote that file loads nothing.
#: Written into the runtime volume when it is filled (:data:`PRELOAD_PATCH`).
RUNTIME_LOADER = "lib/x86_64-linux-gnu/ld-harness.so.2"
PRELOAD_LIST = b"/etc/ld.so.preload"
NO_PRELOAD_LIST = b"/opt/harness/nopre"  # same length; under SUPERVISOR_MOUNT, never made
#: Runs in the base image while its ``/usr`` fills the volume: the patched loader copy.
PRELOAD_PATCH = (
    "import os\n"
    "src = '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'\n"
    f"dst = '/usr/{RUNTIME_LOADER}'\n"
    "data = open(src, 'rb').read()\n"
    f"assert data.count({PRELOAD_LIST!r}) == 1, 'the loader names its preload list once'\n"
    f"open(dst + '.tmp', 'wb').write(data.replace({PRELOAD_LIST!r}, {NO_PRELOAD_LIST!r}))\n"
    "os.chmod(dst + '.tmp', 0o755)\n"
    "os.rename(dst + '.tmp', dst)\n"
)
#: The runtime volume's layout: a new one is filled when this changes.
RUNTIME_LAYOUT = "3"
#: The empty volume whose existence says the runtime volume of the same name is filled.
RUNTIME_READY_SUFFIX = "-ready"


def _volume_exists(client: docker.DockerClient, name: str) -> bool:
    try:
        call(client.volumes.get, name)
    except EngineObjectMissing:
        return False
    return True


class DockerRuntime:
    """What every docker trial of a run shares: client, images, supervisor, Python runtime."""

    def __init__(
        self,
        client: docker.DockerClient,
        resolver: ImageResolver,
        *,
        runtime: str | None = None,
        run_label: str = "adhoc",
        base_image: str = "harness/base:bookworm",
        tmp_dir: Path | None = None,
        host_storage: bool | None = None,
        spares: int = 0,
        compose_host_access: str = "deny",
    ) -> None:
        # spares: containers and trial filesystems started ahead (follow -j; 0: none)
        self.client = client
        #: ``allow``: compose sidecars run even where the host cannot be shielded from
        #: their network (``sandbox.compose_host_access``; insecure).
        self.compose_host_access = compose_host_access
        self.resolver = resolver
        self.runtime = runtime
        self.run_label = run_label
        self.base_image = base_image
        self._lock = threading.Lock()
        self._python_volume: str | None = None
        self._arch: str | None = None
        self._staged = tempfile.mkdtemp(prefix="harness-supervisor-")
        # Root-only copy: the agent user cannot read the supervisor's files in the container.
        os.chmod(self._staged, 0o700)
        # Bytecode saves compiling at every trial (the mount is read-only, so nothing would
        # be cached); only when our Python is the runtime's minor version (bookworm: 3.11).
        compiled = sys.version_info[:2] == RUNTIME_PYTHON
        for source in inside_modules():  # the whole in-sandbox folder, the supervisor among it
            if compiled:
                target = Path(self._staged) / f"{source.stem}.pyc"
                py_compile.compile(str(source), cfile=str(target), doraise=True)
            else:
                target = Path(self._staged) / source.name
                shutil.copyfile(source, target)
            os.chmod(target, 0o600)
        self.supervisor_file = f"{SUPERVISOR_MOUNT}/supervisor.{'pyc' if compiled else 'py'}"
        self._image_attrs: dict[str, dict[str, Any]] = {}
        self._engine_info: dict[str, Any] | None = None
        self._host_filter: bool | None = None
        self._runtime_network: bool | None = None
        self._network_runtime: str | None | bool = False  # False: not asked yet
        #: The host egress filter of internet phases (:mod:`sandbox.docker.egress`).
        self.egress = EgressRun(client, run_label)
        self._tools_parent = tempfile.mkdtemp(prefix="harness-tools-")
        os.chmod(self._tools_parent, 0o711)
        #: The verifier's tools (``$HARNESS_AGENT_EXEC``), mounted read-only.
        self.tools_dir = stage_tools(
            Path(self._tools_parent) / "tools", self.supervisor_command()[:-3]
        )
        #: Where trial roots (and their storage images) are created on the host.
        self.tmp_dir = tmp_dir or Path(tempfile.gettempdir())
        if host_storage is None:
            host_storage = storage_supported() and engine_is_local(client)
        #: Trial storage on size-limited host filesystems (the engine runs on this host).
        self.host_storage = host_storage
        self.storage_budget = StorageBudget(self.tmp_dir) if host_storage else None
        #: Trial filesystems made ahead and removed in the background.
        self.storage_pool = StoragePool(self.tmp_dir, self.storage_budget, spares=spares)
        #: The soft-capped roots' watcher and their room on the engine's disk (made once
        #: a trial needs them: :meth:`layer_watcher`, :meth:`engine_disk`).
        self._layer_watcher: LayerWatcher | None = None
        self._engine_disk: EngineDisk | None = None
        #: Containers started ahead for the next trials, and background removals.
        self.warm: WarmPool[Any] | None = None
        if spares > 0:
            self.warm = WarmPool(spares, dispose=lambda spare: spare.stop())

    @property
    def supervisor_dir(self) -> str:
        """Host dir mounted read-only at ``/opt/harness``."""
        return self._staged

    def python_volume(self) -> tuple[str, str]:
        """The volume with the base image's /usr (created once) and its architecture."""
        with self._lock:
            if self._python_volume is None or self._arch is None:
                try:
                    base = call(self.client.images.get, self.base_image)
                except ImageMissing:
                    raise EnvironmentStartError(
                        f"base image {self.base_image} is missing; build it offline with "
                        "`bash images/bootstrap-base.sh`"
                    ) from None
                name = f"harness-python-{RUNTIME_LAYOUT}-{str(base.id).split(':')[-1][:12]}"
                self._ensure_python_volume(name)
                self._python_volume = name
                self._arch = str(base.attrs.get("Architecture"))
            return self._python_volume, self._arch

    def _ensure_python_volume(self, name: str) -> None:
        """Make ``name`` a filled runtime volume, unless its ready marker says it is one.

        The marker (an empty volume, ``NAME-ready``) is created only after the fill has
        finished, so a fill that was interrupted (the harness killed, the engine restarted)
        leaves a volume without it, which the next run removes and fills again instead of
        mounting a half-copied ``/usr`` into every trial. A volume named so but not made by
        the harness (``docker run -v NAME:...`` creates one empty) is replaced the same way.
        """
        ready = f"{name}{RUNTIME_READY_SUFFIX}"
        if _volume_exists(self.client, ready):
            return
        try:
            volume = call(self.client.volumes.get, name)
        except EngineObjectMissing:
            pass
        else:
            try:
                call(volume.remove, force=True)
            except EngineError:
                # In use: another run is filling it right now; its marker will follow.
                if self._wait_for_marker(ready):
                    return
                raise
        self._fill_python_volume(name)
        call(self.client.volumes.create, ready, labels={MANAGED: "1", KIND: RUNTIME_KIND})

    def _wait_for_marker(self, ready: str, timeout: float = 300.0) -> bool:
        """Whether another run's fill finishes (its marker appears) within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _volume_exists(self.client, ready):
                return True
            time.sleep(1.0)
        return False

    def _fill_python_volume(self, name: str) -> None:
        volume = call(self.client.volumes.create, name, labels={MANAGED: "1", KIND: RUNTIME_KIND})
        try:
            # A fresh volume mounted over /usr is filled from the image's /usr; the
            # supervisor's loader is added to it (RUNTIME_LOADER).
            call(
                self.client.containers.run,
                self.base_image,
                ["/usr/bin/python3", "-I", "-S", "-c", PRELOAD_PATCH],
                volumes={name: {"bind": "/usr", "mode": "rw"}},
                network_mode="none",
                remove=True,
                labels={MANAGED: "1", KIND: RUNTIME_KIND},
            )
        except EngineError:
            call(volume.remove, force=True)
            raise

    def image_attrs(self, ref: str) -> dict[str, Any]:
        """``docker image inspect`` of ``ref``, looked up once per run."""
        with self._lock:
            attrs = self._image_attrs.get(ref)
        if attrs is None:
            attrs = call(self.client.images.get, ref).attrs
            with self._lock:
                self._image_attrs[ref] = attrs
        return attrs

    def supervisor_command(self) -> list[str]:
        """The supervisor on the mounted runtime, loader invoked by its real path.

        Its libraries come from the runtime alone: ``--library-path`` names its dir and
        ``--inhibit-cache`` keeps the container's ``/etc/ld.so.cache`` (a root agent's to
        write) out of every lookup; its loader (:data:`RUNTIME_LOADER`) reads no
        ``/etc/ld.so.preload``. Its environment (:data:`SUPERVISOR_ENV` in
        :mod:`sandbox.docker.container`) keeps the container's locales and OpenSSL config
        out too.
        """
        python = PYTHON_MOUNT
        return [
            # gVisor does not resolve a symlinked executable: use the loader's real path.
            f"{python}/{RUNTIME_LOADER}",
            "--inhibit-cache",
            "--library-path",
            f"{python}/lib/x86_64-linux-gnu",
            f"{python}/bin/python3",
            "-I",
            "-S",
            self.supervisor_file,
        ]

    def runtime_has_network(self) -> bool:
        """Whether containers of the run's runtime get a network (see ``Capacity.network``)."""
        with self._lock:
            known = self._runtime_network
        if known is None:
            known = self._runtime_network = self.capacity().network
        return known

    def network_runtime(self) -> str | None:
        """The OCI runtime of containers that get a network (None: the engine's default).

        The run's own runtime when it has networking, else its ``-net`` sibling
        (``runsc-net``: gVisor on the container's own network namespace, see
        docker/start-engine.sh), so no-network trials keep gVisor's own netstack.

        Raises:
            PermanentStartError: neither has networking (the message says how to fix it).
        """
        with self._lock:
            known = self._network_runtime
        if known is False:
            runtimes = self.engine_info().get("Runtimes") or {}
            known = network_runtime_of(self.runtime, runtimes)
            with self._lock:
                self._network_runtime = known
        if known is None and self.runtime not in (None, "runc"):
            raise PermanentStartError(
                f"a phase of this task gets the internet, but the {self.runtime} runtime of "
                "this engine gives containers no network (registered with --network=none) "
                f"and no {self.runtime}-net runtime is registered; run "
                "`bash docker/start-engine.sh` to register it, or use runc"
            )
        return None if known is None or known == "runc" else str(known)

    def host_filter(self) -> bool:
        """Whether the host egress filter can be installed for this engine (asked once).

        Where it cannot (the harness is not root on the engine's host), internet phases are
        filtered inside each trial's own network namespace instead.
        """
        with self._lock:
            if self._host_filter is None:
                self._host_filter = egress_problem(self.client) is None
            return self._host_filter

    def host_addresses(self) -> tuple[str, ...]:
        """The IPv4 addresses of the engine's host, as many as can be known.

        Those its host network holds, asked of the engine (:mod:`sandbox.docker.engine_host`),
        and the harness's own when the engine is local (the rootless engine's host network
        is not the real host's).
        """
        own: set[str] = set()
        if engine_is_local(self.client):
            own = {
                str(address.address)
                for addresses in psutil.net_if_addrs().values()
                for address in addresses
                if address.family == socket.AF_INET
            }
        return tuple(sorted(own | set(engine_host_ipv4(self.client, self.base_image))))

    def engine_info(self) -> dict[str, Any]:
        """The engine's ``docker info`` answer, asked once per run."""
        with self._lock:
            if self._engine_info is None:
                self._engine_info = dict(call(self.client.info))
            return self._engine_info

    def root_cap(self) -> tuple[str, str | None]:
        """How a root this host cannot move onto a trial filesystem is capped here.

        Returns:
            ``(HARD_ENGINE, None)`` where the engine caps a layer (``storage_opt size``),
            else ``(SOFT, the engine's refusal)``.
        """
        refusal = engine_size_refusal(self.client, self.base_image)
        return (HARD_ENGINE, None) if refusal is None else (SOFT, refusal)

    def layer_watcher(self) -> LayerWatcher:
        """The run's one watcher of soft-capped layers (its thread starts with a trial)."""
        with self._lock:
            if self._layer_watcher is None:
                self._layer_watcher = LayerWatcher(self.client)
            return self._layer_watcher

    def engine_disk(self) -> EngineDisk:
        """The soft-capped trials' room on the engine's disk (unknown on a remote one)."""
        info = self.engine_info()
        with self._lock:
            if self._engine_disk is None:
                local = engine_is_local(self.client)
                self._engine_disk = EngineDisk(visible_data_root(info, local))
            return self._engine_disk

    def capacity(self) -> Capacity:
        """The engine's CPUs and memory, from ``docker info``."""
        info = self.engine_info()
        runtimes = info.get("Runtimes") or {}
        network = network_runtime_of(self.runtime, runtimes) is not None
        # Per phase: no-network always; public and allowlist everywhere a trial has a
        # network (the host filter and its proxy, else the trial's own namespace with the
        # proxy relayed into it: trial_network.py).
        modes = {"no-network"} | ({"public", "allowlist"} if network else set())
        problem = None
        if not network:
            name = self.runtime or "runc"
            problem = (
                f"the {name} runtime gives containers no network (registered with "
                f"--network=none) and no {name}-net runtime is registered; run `bash "
                "docker/start-engine.sh` to register it, or use runc"
            )
        return Capacity(
            cpus=float(info.get("NCPU") or os.cpu_count() or 1),
            memory_mb=int(info.get("MemTotal") or 0) >> 20,
            network=network,
            network_modes=frozenset(modes),
            network_problem=problem,
        )

    def _drain(self) -> list[str]:
        """Drain the warm containers and the spare filesystems; what could not be removed."""
        failed = self.warm.drain() if self.warm is not None else []
        return failed + self.storage_pool.close()

    def release(self) -> None:
        """Drain this process's spares; remove the staged supervisor copy and tools."""
        watcher, self._layer_watcher = self._layer_watcher, None
        if watcher is not None:
            watcher.close()
        for failure in self._drain():
            logger.warning("%s", failure)
        shutil.rmtree(self._staged, ignore_errors=True)
        shutil.rmtree(self._tools_parent, ignore_errors=True)

    def close(self) -> CloseReport:
        """Remove whatever this run leaked (by label), then the staged supervisor copy."""
        failed = self._drain()
        report = remove_leaks(self.client, run=self.run_label)
        failed += report.errors
        try:
            # The run's share of the host filter given back (the last run removes the
            # network and the hooks): an orderly release, never a leak of the run's.
            self.egress.close()
        except (SandboxError, EngineError) as exc:
            failed.append(f"egress filter: {exc}")
        self.release()
        return CloseReport(removed=report.removed, failed=failed)


def _has_network(entry: dict[str, Any]) -> bool:
    return "--network=none" not in (entry.get("runtimeArgs") or [])


def network_runtime_of(runtime: str | None, runtimes: dict[str, Any]) -> str | None:
    """The runtime giving ``runtime``'s containers a network: itself, its ``-net`` sibling.

    None when neither is registered with networking.
    """
    name = runtime or "runc"
    entry = runtimes.get(name)
    if entry is None and name == "runc":
        return "runc"
    if entry is not None and _has_network(entry):
        return name
    sibling = runtimes.get(f"{name}-net")
    if sibling is not None and _has_network(sibling):
        return f"{name}-net"
    return None


def engine_is_local(client: docker.DockerClient) -> bool:
    """Whether the engine runs on this host (so host paths can be bind-mounted)."""
    # docker-py rewrites a unix socket URL to http+docker://localhost (an ssh engine is
    # http+docker://ssh, tcp keeps its address): only the first is surely this host.
    return str(getattr(client.api, "base_url", "")) == "http+docker://localhost"

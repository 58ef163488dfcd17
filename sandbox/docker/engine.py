"""Connecting to the Docker engine, finding leaks by label, and `harness doctor` facts."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docker.utils

import docker
from sandbox.docker import egress
from sandbox.docker.hostguard import sweep
from sandbox.docker.labels import KIND, MANAGED, RUN, RUN_OBJECT_NAME, RUNTIME_KIND, run_prefix
from sandbox.docker.sdk import (
    UNREACHABLE_WORDS,
    EngineError,
    EngineObjectMissing,
    EngineRequestError,
    EngineUnreachable,
    call,
)
from sandbox.errors import EngineUnavailable

START_HINT = "start it with `bash docker/start-engine.sh` (as root), or set DOCKER_HOST"
PING_TIMEOUT_SEC = 5
"""How long a health ping waits for the engine."""

#: The engine's own failures: it did not answer (:class:`EngineUnreachable`, raised only for
#: the transport errors on the way to its socket), or it answered that it is shutting down
#: (its database closed). Never the words of an answer's message ("connection refused" from
#: a registry the engine could not reach, or from a task's own output).
_ENGINE_FAILURE = re.compile(
    rf"{re.escape(UNREACHABLE_WORDS)}|\bdatabase not open\b", re.IGNORECASE
)


def engine_failure(message: str) -> bool:
    """Whether a retryable error's message is the engine's own failure (away, shutting down).

    Decided from where the error came from, which the SDK seam (:mod:`sandbox.docker.sdk`)
    words: a transport failure to the engine's socket, never a registry's or a task's
    ``connection refused``. The run's engine watch asks this only of errors a retry could
    change, and only while the engine answers its ping again (see
    :meth:`harness.runner.outage.EngineWatch.broke`).
    """
    return bool(_ENGINE_FAILURE.search(message))


def engine_address() -> str:
    """Where the SDK finds the engine: ``DOCKER_HOST``, else the default unix socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(timeout: int = 60) -> docker.DockerClient:
    """A Docker SDK client whose engine answers, with the API version negotiated.

    Raises:
        EngineUnavailable: naming the socket and how to start the engine.
    """
    where = engine_address()
    try:
        client = call(docker.from_env, timeout=timeout, max_pool_size=32)
        _no_proxy_lookups(client.api)
        call(client.ping)
    except EngineError as exc:
        said = exc.__cause__ if isinstance(exc, EngineUnreachable) and exc.__cause__ else exc
        raise EngineUnavailable(
            f"cannot reach the Docker engine at {where}: {said}; {START_HINT}"
        ) from exc
    return client


def pinger(client: docker.DockerClient) -> docker.APIClient:
    """A client of the same engine for health pings: short timeout, version already known."""
    env: dict[str, Any] = dict(call(docker.utils.kwargs_from_env))
    api = call(docker.APIClient, **env, version=client.api.api_version, timeout=PING_TIMEOUT_SEC)
    _no_proxy_lookups(api)
    return api


def _no_proxy_lookups(api: docker.APIClient) -> None:
    """Skip the proxy environment lookups of every request on a unix socket.

    ``requests`` reads the whole environment for ``*_proxy`` variables on each request (a
    fifth of the harness's own CPU per docker trial); no proxy can apply to a unix socket.
    A ``tcp://`` engine keeps them: it may sit behind one.
    """
    if str(api.base_url).startswith("http+docker://"):
        api.trust_env = False


def ping(api: docker.APIClient) -> str | None:
    """None when the engine answers a ping, else why not (one line)."""
    try:
        call(api.ping)
    except Exception as exc:  # any failure to answer is the answer
        # An SDK error without words is named for the SDK's own class, as it always was.
        named = exc.__cause__ if isinstance(exc, EngineError) and exc.__cause__ else exc
        # Not the words our seam adds: the SDK's own say why ("Connection aborted", ...).
        said = str(named) if isinstance(exc, EngineUnreachable) else str(exc)
        text = said.splitlines()[0] if said else type(named).__name__
        return text[:300]
    finally:
        # A new connection each time: a kept-alive one is still served by an engine that
        # is shutting down (its socket is gone, it answers no new client).
        api.close()
    return None


@dataclass
class LeakReport:
    """What ``remove_leaks`` removed."""

    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    #: Host firewall rules of compose networks that are gone (``sandbox.docker.hostguard``),
    #: and the egress filter's chains of trials whose container is gone.
    rules: list[str] = field(default_factory=list)
    #: The egress filter the runs of the engine share (its network, its hooks), removed
    #: because no live run held it.
    shared: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def removed(self) -> list[str]:
        """Everything removed, of every kind."""
        return self.containers + self.volumes + self.networks + self.rules + self.shared


@dataclass(frozen=True)
class _Listed:
    """A container as the engine lists it, never inspected.

    One the engine is removing ("Removal In Progress", which can last until the engine
    restarts) is listed but cannot be inspected: the SDK's ``containers.list`` would raise.
    """

    id: str
    name: str
    labels: dict[str, str]
    state: str


def _containers(client: docker.DockerClient, filters: dict[str, Any]) -> list[_Listed]:
    return [
        _Listed(
            id=str(entry["Id"]),
            name=str((entry.get("Names") or [""])[0]).lstrip("/"),
            labels=dict(entry.get("Labels") or {}),
            state=str(entry.get("State") or ""),
        )
        for entry in call(client.api.containers, all=True, filters=filters)
    ]


def _unlabelled(items: list[Any], labels: Any, named: Callable[[str], bool]) -> list[Any]:
    """The objects without the harness label whose names say they are the harness's."""
    return [
        item
        for item in items
        if MANAGED not in (labels(item) or {}) and named(str(item.name or ""))
    ]


def _leaked(
    client: docker.DockerClient, run: str | None, keep_runtime: bool
) -> tuple[list[Any], list[Any], list[Any]]:
    """The containers, volumes and networks of the harness (of one run) still on the engine.

    Labelled ones, and unlabelled ones named for the run (or for any run, without ``run``):
    an engine that stopped while it created an object can bring it back without labels.
    """
    wanted = [f"{MANAGED}=1"] + ([f"{RUN}={run}"] if run else [])
    prefix = run_prefix(run) if run else "harness-"

    def named(name: str) -> bool:
        return name.startswith(prefix) if run else bool(RUN_OBJECT_NAME.match(name))

    near: dict[str, Any] = {"name": prefix}
    containers = _containers(client, {"label": wanted})
    containers += _unlabelled(_containers(client, near), lambda c: c.labels, named)
    volumes = [
        volume
        for volume in call(client.volumes.list, filters={"label": wanted})
        if not (keep_runtime and (volume.attrs.get("Labels") or {}).get(KIND) == RUNTIME_KIND)
    ]
    volumes += _unlabelled(
        call(client.volumes.list, filters=near), lambda v: v.attrs.get("Labels"), named
    )
    networks = call(client.networks.list, filters={"label": wanted})
    networks += _unlabelled(
        call(client.networks.list, filters=near), lambda n: n.attrs.get("Labels"), named
    )
    return containers, volumes, networks


def _remove_containers(
    client: docker.DockerClient, containers: list[_Listed], report: LeakReport
) -> None:
    for container in containers:
        if container.state == "removing":
            continue  # the engine is removing it already
        name = container.name or container.id[:12]
        try:
            call(client.api.remove_container, container.id, force=True, v=True)
            report.containers.append(name)
        except EngineObjectMissing:
            pass
        except EngineRequestError as exc:
            report.errors.append(f"container {name}: {exc}")


def _remove(
    client: docker.DockerClient,
    containers: list[_Listed],
    volumes: list[Any],
    networks: list[Any],
    report: LeakReport,
) -> None:
    """Remove the containers, then the volumes and networks they used, into ``report``."""
    _remove_containers(client, containers, report)
    for volume in volumes:
        try:
            call(volume.remove, force=True)
            report.volumes.append(volume.name)
        except EngineObjectMissing:
            pass
        except EngineRequestError as exc:
            report.errors.append(f"volume {volume.name}: {exc}")
    for network in networks:
        try:
            call(network.remove)
            report.networks.append(str(network.name))
        except EngineRequestError as exc:
            report.errors.append(f"network {network.name}: {exc}")


def remove_labelled(client: docker.DockerClient, label: str) -> LeakReport:
    """Remove every container, volume and network labelled ``label`` (``key=value``).

    What ``remove_leaks`` does for the harness's own labels, for another one (a compose
    project's, when compose cannot remove its project).
    """
    report = LeakReport()
    wanted = {"label": [label]}
    _remove(
        client,
        _containers(client, wanted),
        call(client.volumes.list, filters=wanted),
        call(client.networks.list, filters=wanted),
        report,
    )
    return report


def remove_leaks(
    client: docker.DockerClient,
    *,
    run: str | None = None,
    keep_runtime: bool = True,
    shared: bool = False,
) -> LeakReport:
    """Remove every container, volume and network of the harness (of one run), and rules.

    Those with the harness label (and the run's), and those without labels whose names are
    a run's (:func:`~sandbox.docker.labels.run_prefix`, or the run's own with ``run``).
    With ``shared`` (always without ``run``), also the egress filter's network and hooks
    that runs share, when no live run holds them (:func:`~sandbox.docker.egress.sweep`).
    """
    report = LeakReport()
    _remove(client, *_leaked(client, run, keep_runtime), report)
    # After the networks: a rule whose bridge is still there stays.
    rules, errors = sweep(run)
    report.rules += rules
    report.errors += errors
    # After the containers: a trial chain whose container is gone goes (every chain, the
    # hooks and the filtered network too without ``run`` when no live run holds them).
    swept = egress.sweep(client, run, shared=shared)
    report.rules += swept.chains
    report.shared += swept.shared
    report.errors += swept.errors
    return report


def engine_facts(client: docker.DockerClient) -> dict[str, Any]:
    """Engine version, API version, runtimes, cgroup facts for `harness doctor`."""
    info = call(client.info)
    version = call(client.version)
    return {
        "server_version": version.get("Version"),
        "api_version": version.get("ApiVersion"),
        "client_api_version": client.api.api_version,
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        "default_runtime": info.get("DefaultRuntime"),
        "cgroup_driver": info.get("CgroupDriver"),
        "cgroup_version": info.get("CgroupVersion"),
        "storage_driver": info.get("Driver"),
        "security_options": info.get("SecurityOptions") or [],
        "memory_limit": info.get("MemoryLimit"),
        "pids_limit": info.get("PidsLimit"),
    }

"""Connecting to the Docker engine, finding leaks by label, and `harness doctor` facts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import docker.errors

import docker
from sandbox.docker.labels import KIND, MANAGED, RUNTIME_KIND
from sandbox.errors import EngineUnavailable

START_HINT = "start it with `bash docker/start-engine.sh` (as root), or set DOCKER_HOST"


def connect(timeout: int = 60) -> docker.DockerClient:
    """A Docker SDK client whose engine answers, with the API version negotiated.

    Raises:
        EngineUnavailable: naming the socket and how to start the engine.
    """
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout, max_pool_size=32)
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(
            f"cannot reach the Docker engine at {where}: {exc}; {START_HINT}"
        ) from exc
    return client


@dataclass
class LeakReport:
    """What ``remove_leaks`` removed."""

    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def remove_leaks(
    client: docker.DockerClient, *, run: str | None = None, keep_runtime: bool = True
) -> LeakReport:
    """Remove every container, volume and network with the harness label (of one run)."""
    report = LeakReport()
    wanted = [f"{MANAGED}=1"] + ([f"org.harness.run={run}"] if run else [])
    for container in client.containers.list(all=True, filters={"label": wanted}):
        try:
            container.remove(force=True, v=True)
            report.containers.append(str(container.name or container.id))
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            report.errors.append(f"container {container.name}: {exc}")
    for volume in client.volumes.list(filters={"label": wanted}):
        labels = volume.attrs.get("Labels") or {}
        if keep_runtime and labels.get(KIND) == RUNTIME_KIND:
            continue
        try:
            volume.remove(force=True)
            report.volumes.append(volume.name)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            report.errors.append(f"volume {volume.name}: {exc}")
    for network in client.networks.list(filters={"label": wanted}):
        try:
            network.remove()
            report.networks.append(str(network.name))
        except docker.errors.APIError as exc:
            report.errors.append(f"network {network.name}: {exc}")
    return report


def engine_facts(client: docker.DockerClient) -> dict[str, Any]:
    """Engine version, API version, runtimes, cgroup facts for `harness doctor`."""
    info = client.info()
    version = client.version()
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

"""``harness doctor`` says, on each engine a user reaches, which guarantee holds and how.

The real CLI, run as root on the engine's host, as a non-root member of the ``docker``
group, and as the rootless engine's user against that engine. Each row is judged against
what really is there, asked of the engine independently (``docker info``) and of the user
(root or not): the filter of internet phases, the writable root, each limit, the compose
host guard, gVisor, and the second boundary of ``--agent-root isolated``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from support.docker import docker_client, prerequisite_missing, require_image
from support.users import (
    REPO,
    ROOTLESS_USER,
    docker_group_user,
    rootless_engine,
    user_harness,
)

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL = "unix:///var/run/docker.sock"


def _info(host: str) -> dict[str, Any]:
    """The engine's ``docker info``, asked by the docker CLI (not by the harness)."""
    done = subprocess.run(
        ["docker", "-H", host, "info", "--format", "{{json .}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def _engine_caps_layers(host: str) -> bool:
    """Whether the engine takes ``--storage-opt size=`` (asked by the docker CLI)."""
    done = subprocess.run(
        ["docker", "-H", host, "create", "--rm", "--storage-opt", "size=64m", "--network"]
        + ["none", "--label", "org.harness.managed=1", "harness/base:bookworm", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 0:
        subprocess.run(["docker", "-H", host, "rm", "-f", done.stdout.strip()], check=True)
    return done.returncode == 0


def _rows(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    report = json.loads(done.stdout)
    assert done.returncode == (1 if report["problems"] else 0), done.stderr
    # Every problem left is one a user fixes (a base image to bootstrap) or the local
    # sandbox's, never a guarantee of the docker sandbox.
    assert all(
        "base image" in problem or problem.startswith("the local sandbox")
        for problem in report["problems"]
    ), report
    rows = {row["name"]: row for row in report["guarantees"]}
    assert set(rows) == {
        "network: no-network",
        "network: public",
        "network: allowlist",
        "writable root",
        "limit: memory_mb",
        "limit: cpus",
        "limit: pids",
        "compose host guard",
        "gVisor",
        "--agent-root isolated",
    }, rows
    return rows


def _limits_and_runtimes(rows: dict[str, dict[str, Any]], info: dict[str, Any]) -> None:
    """The limit, gVisor and isolated rows against the engine's own ``docker info``."""
    no_driver = info.get("CgroupDriver") == "none"
    for limit, flag in (
        ("memory_mb", "MemoryLimit"),
        ("cpus", "CpuCfsQuota"),
        ("pids", "PidsLimit"),
    ):
        row = rows[f"limit: {limit}"]
        assert row["holds"] is (not no_driver and info.get(flag) is not False), row
        if no_driver:
            assert "CgroupDriver: none" in row["how"], row
    runtimes = info.get("Runtimes") or {}
    assert rows["gVisor"]["holds"] is ("runsc" in runtimes), rows["gVisor"]
    security = " ".join(info.get("SecurityOptions") or [])
    remapped = "name=rootless" in security or "name=userns" in security
    isolated = rows["--agent-root isolated"]
    assert isolated["holds"] is (remapped or "runsc" in runtimes), isolated
    assert ("runc behind" in isolated["how"]) is remapped, isolated
    assert ("--runtime runsc" in isolated["how"]) is ("runsc" in runtimes), isolated


def _without_root(
    rows: dict[str, dict[str, Any]], host: str, why: str = "the harness does not run as root"
) -> None:
    """What a user who is not root on the engine's host gets, whatever the engine."""
    assert rows["network: no-network"]["holds"], rows
    public = rows["network: public"]
    assert public["holds"] and "own namespace filter" in public["how"], public
    assert why in public["how"], public
    allowlist = rows["network: allowlist"]
    assert allowlist["holds"] and "own namespace filter" in allowlist["how"], allowlist
    root = rows["writable root"]
    assert root["holds"] and "not root" in root["how"], root
    cap = "hard-engine" if _engine_caps_layers(host) else "soft"
    assert root["how"].startswith(f"writable, {cap} cap"), root
    # No host rules: the engine makes each compose network without a host address (the
    # doctor made one, read it back and removed it).
    guard = rows["compose host guard"]
    assert guard["holds"] and "engine-made network without a host address" in guard["how"]
    assert why in guard["how"], guard


def test_doctor_as_root_on_the_engines_host() -> None:
    """Root: internet phases by the host filter, a capped writable root, the host guard."""
    require_image(docker_client())
    done = subprocess.run(
        [sys.executable, "-m", "harness", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    rows = _rows(done)
    public = rows["network: public"]
    assert public["holds"] and "host egress filter" in public["how"], public
    assert rows["network: allowlist"]["holds"], rows
    assert rows["writable root"]["holds"] and "hard-loop cap" in rows["writable root"]["how"], rows
    assert rows["compose host guard"]["holds"], rows
    _limits_and_runtimes(rows, _info(ROOTFUL))


def test_doctor_as_a_docker_group_user() -> None:
    """A docker-group user: internet phases by each trial's namespace filter, no host layer."""
    require_image(docker_client())
    user = user_harness(docker_group_user())
    done = user.cli("doctor", "--json", docker_host=ROOTFUL, timeout=300)
    rows = _rows(done)
    _without_root(rows, ROOTFUL)
    _limits_and_runtimes(rows, _info(ROOTFUL))
    report = json.loads(done.stdout)
    assert report["checks"]["running as root"] == "no"
    assert report["checks"]["local sandbox"].startswith("needs root"), report["checks"]


def test_doctor_on_the_rootless_engine() -> None:
    """Rootless docker: the namespace filter, and limits not enforced where it has no cgroups."""
    host = rootless_engine()
    user = user_harness(ROOTLESS_USER)
    done = user.cli("doctor", "--json", docker_host=host, timeout=300)
    rows = _rows(done)
    _without_root(rows, host)
    info = _info(host)
    _limits_and_runtimes(rows, info)
    # The rootless engine's own user namespace is a second boundary for a root agent.
    assert "rootless" in rows["--agent-root isolated"]["how"], rows


def test_doctor_in_the_ci_image() -> None:
    """The CI image: root in its own container, the engine's socket mounted (scripts/ci-image).

    Root there is not root in the engine's network namespace: no host filter, no compose
    host rules, no loop filesystem; what holds is the docker-group case's. This checkout's
    harness and sandbox are mounted over the image's copies.
    """
    require_image(docker_client())
    image = "harness/ci:latest"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        prerequisite_missing(f"the CI image {image} (bash scripts/ci-image --build-only)")
    site = "/opt/harness/site"
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", "org.harness.managed=1"]
        + ["-v", "/var/run/docker.sock:/var/run/docker.sock"]
        + [
            "-v",
            f"{REPO / 'harness'}:{site}/harness:ro",
            "-v",
            f"{REPO / 'sandbox'}:{site}/sandbox:ro",
        ]
        + [image, "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    rows = _rows(done)
    assert json.loads(done.stdout)["checks"]["running as root"] == "yes"
    _without_root(rows, ROOTFUL, why="iptables")
    _limits_and_runtimes(rows, _info(ROOTFUL))

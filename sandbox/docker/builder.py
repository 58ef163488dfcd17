"""Which builder builds task images: BuildKit where the engine and a docker CLI have it.

BuildKit (parallel stages, no intermediate images left by a failed build) needs an engine
of 18.09 or later and a client that drives it: ``docker buildx`` where the plug-in is
installed, else a docker CLI older than 23.0, whose own ``build`` speaks BuildKit under
``DOCKER_BUILDKIT=1`` (Debian's 20.10 package is one). A CLI of 23.0 or later without buildx
has only the legacy builder, which is then used, and every build log says so.

BuildKit resolves a ``FROM`` through the engine's image store first: a base image that
exists only locally (``harness/base:bookworm``, an ``--base-alias`` target) builds with no
registry reachable, as the legacy builder does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Literal

from sandbox.host_tools import run_tool

BuilderChoice = Literal["auto", "buildkit", "legacy"]
BUILDER_CHOICES: tuple[str, ...] = ("auto", "buildkit", "legacy")
_PROBE_TIMEOUT = 20


@dataclass(frozen=True)
class Builder:
    """How to run a build: the command's first words, its environment, and what it is."""

    command: tuple[str, ...]
    environ: tuple[tuple[str, str], ...]
    buildkit: bool
    #: One line for the build log: which builder, and why (the legacy one: why not BuildKit).
    note: str

    def env(self) -> dict[str, str]:
        """The process environment of a build."""
        return {**os.environ, **dict(self.environ)}


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return run_tool(argv, timeout=_PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _major(version: str) -> int | None:
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _clis() -> list[str]:
    """Every ``docker`` executable on PATH, first one first (each once)."""
    found: list[str] = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory or ".", "docker")
        real = os.path.realpath(path)
        if os.access(path, os.X_OK) and os.path.isfile(path) and real not in found:
            found.append(real)
    return found


def _engine_has_buildkit(cli: str) -> tuple[bool, str]:
    done = _run([cli, "version", "--format", "{{.Server.Version}}|{{.Server.Os}}"])
    if done is None or done.returncode != 0:
        return False, "the engine's version could not be read"
    version, _, system = done.stdout.strip().partition("|")
    parts = version.split(".")
    major, minor = _major(parts[0]) or 0, _major(parts[1]) if len(parts) > 1 else 0
    if system and system != "linux":
        return False, f"the engine runs {system} containers"
    if (major, minor or 0) < (18, 9):
        return False, f"engine {version} predates BuildKit (18.09)"
    return True, f"engine {version}"


def detect() -> Builder:
    """The best builder this machine has (BuildKit if any docker CLI here drives it)."""
    legacy = _legacy_note = "no docker CLI found"
    clis = _clis()
    if not clis:
        return Builder(("docker", "build"), (("DOCKER_BUILDKIT", "0"),), False, legacy)
    first = clis[0]
    engine_ok, engine = _engine_has_buildkit(first)
    if not engine_ok:
        return _legacy(first, f"BuildKit unavailable: {engine}")
    for cli in clis:
        buildx = _run([cli, "buildx", "version"])
        if buildx is not None and buildx.returncode == 0:
            return Builder(
                (cli, "buildx", "build", "--load"),
                (),
                True,
                f"builder: BuildKit (docker buildx, {engine})",
            )
    for cli in clis:
        done = _run([cli, "version", "--format", "{{.Client.Version}}"])
        major = _major(done.stdout) if done is not None and done.returncode == 0 else None
        if major is not None and major < 23:
            return Builder(
                (cli, "build"),
                (("DOCKER_BUILDKIT", "1"),),
                True,
                f"builder: BuildKit (docker CLI {done.stdout.strip() if done else ''} at {cli}, "
                f"{engine})",
            )
    _legacy_note = (
        "BuildKit unavailable: no docker CLI here drives it (docker buildx is not installed "
        "and the docker CLI is 23.0 or later); using the legacy builder"
    )
    return _legacy(first, _legacy_note)


def _legacy(cli: str, why: str) -> Builder:
    if "legacy builder" not in why:
        why += "; using the legacy builder"
    return Builder((cli, "build"), (("DOCKER_BUILDKIT", "0"),), False, why)


_cache_lock = threading.Lock()
_cache: dict[str, Builder] = {}


def builder(choice: BuilderChoice = "auto") -> Builder:
    """The builder for ``choice``, probed once per process.

    ``legacy`` forces the legacy builder; ``buildkit`` and ``auto`` take BuildKit where
    there is one (``buildkit`` on a machine without it still builds, with the legacy
    builder, saying so in the log).
    """
    with _cache_lock:
        if "auto" not in _cache:
            _cache["auto"] = detect()
        found = _cache["auto"]
    if choice == "legacy":
        cli = found.command[0]
        if found.buildkit and found.command[1:2] == ("buildx",):
            cli = shutil.which("docker") or cli
        return Builder(
            (cli, "build"), (("DOCKER_BUILDKIT", "0"),), False, "builder: legacy (chosen)"
        )
    return found


__all__ = ["BUILDER_CHOICES", "Builder", "BuilderChoice", "builder", "detect"]

"""The harness CLI in the CI image, driving the host's engine as ``scripts/ci-image`` does.

``harness/ci`` (``docker/harness.Dockerfile``) runs with the engine's socket mounted and
``--network none``; the work dir (task dirs, output dirs, ``TMPDIR``, the gateway's socket
dir) is mounted at the same path on both sides, since the engine bind-mounts those paths
from its own host. This checkout's ``harness`` and ``sandbox`` are mounted over the
image's copies, so the tests judge the code under test, not the image's build.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from support.docker import prerequisite_missing
from support.users import REPO

CI_IMAGE = "harness/ci:latest"
_SITE = "/opt/harness/site"


def require_ci_image() -> None:
    """Fail (CI) or skip unless the CI image is built."""
    if subprocess.run(["docker", "image", "inspect", CI_IMAGE], capture_output=True).returncode:
        prerequisite_missing(f"the CI image {CI_IMAGE} (bash scripts/ci-image --build-only)")


def ci_cli(work: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """``harness ARGS...`` in the CI image, ``work`` mounted at its own path."""
    require_ci_image()
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o711)
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--label", "org.harness.managed=1",
         "-v", "/var/run/docker.sock:/var/run/docker.sock",
         "-v", f"{REPO / 'harness'}:{_SITE}/harness:ro",
         "-v", f"{REPO / 'sandbox'}:{_SITE}/sandbox:ro",
         "-v", f"{work}:{work}", "-w", str(work),
         "-e", f"TMPDIR={tmp}", "-e", f"HARNESS_GATEWAY_DIR={tmp / 'gateway'}",
         CI_IMAGE, *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def ci_python(
    work: Path, script: str, stdin: str, *, network: str = "bridge", timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``python3 -c SCRIPT`` in the CI image (its harness importable), ``stdin`` fed to it.

    For what the CLI cannot say (a pinned name, a backend driven directly); on ``network``
    (``bridge`` by default: ``scripts/ci-image``'s ``--network none`` is for runs that need
    none, and a trial's egress proxy and DNS responder run in the harness's process).
    """
    require_ci_image()
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    tmp.chmod(0o711)
    return subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", network, "--label", "org.harness.managed=1",
         "-v", "/var/run/docker.sock:/var/run/docker.sock",
         "-v", f"{REPO / 'harness'}:{_SITE}/harness:ro",
         "-v", f"{REPO / 'sandbox'}:{_SITE}/sandbox:ro",
         "-v", f"{work}:{work}", "-w", str(work), "-e", f"TMPDIR={tmp}",
         "--entrypoint", "python3", CI_IMAGE, "-c", script],
        input=stdin, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@contextlib.contextmanager
def ci_workdir() -> Iterator[Path]:
    """A short work dir under ``/tmp`` for a run in the image (removed after).

    The image's harness puts its proxy's unix sockets under ``TMPDIR`` (the work dir's
    ``tmp``), and a socket's path has at most 107 bytes: pytest's own dirs are too deep.
    """
    work = Path(tempfile.mkdtemp(prefix="hxci-", dir="/tmp"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)

"""Task images: content-addressed builds reused across trials, and FROM aliases.

A task with ``environment/Dockerfile`` gets ``harness-task/<name>:<hash12>``, where the
hash covers the build context and the aliases applied to it; a tag that exists is reused,
never rebuilt or deleted per trial. ``[environment].docker_image`` is used as it is (after
``--base-alias``), pulled when missing per the pull policy (:mod:`sandbox.docker.pulls`).
Builds use the docker CLI's classic builder (buildx is often absent offline) and end at the
task's ``build_timeout_sec``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
from sandbox.docker.labels import IMAGE_HASH, MANAGED
from sandbox.docker.pulls import ImagePuller
from sandbox.docker.sdk import ImageMissing, call
from sandbox.errors import PermanentStartError

DEFAULT_IMAGE = "harness/base:bookworm"
_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)(\S+)(.*)$", re.IGNORECASE)
_TAG_UNSAFE = re.compile(r"[^a-z0-9._-]+")
LOG_TAIL_LINES = 40


class ImageBuildError(PermanentStartError):
    """A task image failed to build; ``log_tail`` holds the end of the build output."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(f"{message}\n--- build log (tail) ---\n{log_tail}")
        self.log_tail = log_tail


def parse_aliases(pairs: list[str]) -> dict[str, str]:
    """Parse ``FROM=LOCAL`` pairs (``--base-alias``).

    Raises:
        ValueError: for a pair without ``=`` or with an empty side.
    """
    aliases = {}
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise ValueError(f"--base-alias expects FROM=LOCAL, got {pair!r}")
        aliases[source.strip()] = target.strip()
    return aliases


def rewrite_from_lines(dockerfile: str, aliases: Mapping[str, str]) -> str:
    """Replace the image of each ``FROM`` line that has an alias; keep everything else."""
    out = []
    for line in dockerfile.splitlines(keepends=True):
        match = _FROM.match(line.rstrip("\n"))
        if match and match.group(2) in aliases:
            ending = "\n" if line.endswith("\n") else ""
            line = f"{match.group(1)}{aliases[match.group(2)]}{match.group(3)}{ending}"
        out.append(line)
    return "".join(out)


def context_hash(context: Path, dockerfile: Path, aliases: Mapping[str, str]) -> str:
    """sha256 of the build context files (no symlinks followed) plus the applied aliases."""
    digest = hashlib.sha256(b"harness-image-v1\0")
    for dirpath, dirnames, filenames in os.walk(context, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(context).as_posix().encode()
            if full.is_symlink():
                digest.update(b"L\0" + rel + b"\0" + os.readlink(full).encode() + b"\0")
                continue
            digest.update(b"F\0" + rel + b"\0")
            digest.update(full.read_bytes())
    digest.update(b"D\0" + dockerfile.read_bytes())
    for source, target in sorted(aliases.items()):
        digest.update(f"A\0{source}\0{target}\0".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class ImageRequest:
    """What a trial needs: a prebuilt image, or a Dockerfile to build."""

    name: str
    image: str | None = None
    dockerfile: Path | None = None
    build_timeout_sec: float | None = None


class ImageResolver:
    """Resolves and builds task images once per run; thread-safe, failures remembered."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        aliases: Mapping[str, str] | None = None,
        default_image: str = DEFAULT_IMAGE,
        puller: ImagePuller | None = None,
    ) -> None:
        self.client = client
        self.aliases = dict(aliases or {})
        self.default_image = default_image
        #: Makes ``docker_image`` images local (pull policy, progress).
        self.puller = puller or ImagePuller(client)
        self._lock = threading.Lock()
        self._tag_locks: dict[str, threading.Lock] = {}
        self._done: dict[str, str | ImageBuildError] = {}

    def tag_for(self, request: ImageRequest) -> str:
        """The content-addressed tag a Dockerfile task builds to."""
        assert request.dockerfile is not None
        digest = context_hash(request.dockerfile.parent, request.dockerfile, self.aliases)
        name = _TAG_UNSAFE.sub("-", request.name.lower()).strip("-.") or "task"
        return f"harness-task/{name[:100]}:{digest[:12]}"

    def resolve(self, request: ImageRequest) -> str:
        """Return a local image reference for the request, building it if needed.

        Raises:
            ImageBuildError: when the build fails or times out (also on every later call).
            ImagePullError: when a named image is not local and cannot be pulled.
        """
        if request.image:
            image = self.aliases.get(request.image, request.image)
            self.puller.ensure(image)
            return image
        if request.dockerfile is None:
            if self._done.get(self.default_image) is None:  # checked once per run
                try:
                    call(self.client.images.get, self.default_image)
                except ImageMissing:
                    raise PermanentStartError(
                        f"the base image {self.default_image} is missing; build it offline "
                        "with `bash images/bootstrap-base.sh`"
                    ) from None
                self._done[self.default_image] = self.default_image
            return self.default_image
        tag = self.tag_for(request)
        with self._lock:
            lock = self._tag_locks.setdefault(tag, threading.Lock())
        with lock:
            done = self._done.get(tag)
            if isinstance(done, ImageBuildError):
                raise done
            if done is not None:
                return done
            try:
                self._build(request, tag)
            except ImageBuildError as exc:
                self._done[tag] = exc
                raise
            self._done[tag] = tag
            return tag

    def _build(self, request: ImageRequest, tag: str) -> None:
        try:
            call(self.client.images.get, tag)
            return  # content-addressed: an existing tag is exactly this context
        except ImageMissing:
            pass
        from python_on_whales import DockerClient

        assert request.dockerfile is not None
        with tempfile.TemporaryDirectory(prefix="harness-build-") as tmp:
            context = Path(tmp) / "context"
            shutil.copytree(request.dockerfile.parent, context, symlinks=True)
            dockerfile = context / request.dockerfile.name
            dockerfile.write_text(rewrite_from_lines(dockerfile.read_text(), self.aliases))
            # The classic builder, with --force-rm: a failed RUN must not leave its
            # intermediate container behind.
            command = [
                *DockerClient().docker_cmd,
                "build",
                "--quiet",
                "--force-rm",
                "--label",
                f"{MANAGED}=1",
                "--label",
                f"{IMAGE_HASH}={tag.rsplit(':', 1)[1]}",
                "--tag",
                tag,
                "--file",
                str(dockerfile),
                str(context),
            ]
            timeout = request.build_timeout_sec
            try:
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env={**os.environ, "DOCKER_BUILDKIT": "0"},  # buildx may be absent
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                output = _text(exc.stdout) + _text(exc.stderr)
                raise ImageBuildError(
                    f"building the image of task {request.name} did not finish within "
                    f"build_timeout_sec = {timeout:g}s",
                    _tail(output),
                ) from None
            if done.returncode != 0:
                raise ImageBuildError(
                    f"building the image of task {request.name} failed",
                    _tail(done.stdout + done.stderr),
                )


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _tail(output: str) -> str:
    return "\n".join(output.splitlines()[-LOG_TAIL_LINES:])

"""Task images: content-addressed builds reused across trials, and FROM aliases.

A task with ``environment/Dockerfile`` gets ``harness-task/<name>:<hash12>``, where the
hash covers the build context and the aliases applied to it; a tag that exists is reused,
never rebuilt or deleted per trial. ``[environment].docker_image`` is used as it is (after
``--base-alias``), pulled when missing per the pull policy (:mod:`sandbox.docker.pulls`),
unless the request forces the build (``--force-build``: the Dockerfile is built even when
``docker_image`` is set).

Builds run through BuildKit where the engine and a docker CLI have it, else the legacy
builder (:mod:`sandbox.docker.builder`; the build log says which), and end at the task's
``build_timeout_sec``. Every stage of the Dockerfile gets the harness's labels as its first
instruction, so each layer a build makes carries them: the untagged intermediate images a
failed legacy build leaves are found (and removed) by ``harness images prune`` and
``harness sandbox cleanup`` like the images themselves. The whole build log, ANSI codes
and the legacy builder's banner stripped and bounded (:data:`LOG_MAX_BYTES`), is kept for
the trial's evidence; a failed build's message carries its last :data:`LOG_TAIL_LINES`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import docker
from sandbox.docker.aliases import AliasUse, parse_aliases, rewrite_dockerfile, rewrite_from_lines
from sandbox.docker.builder import Builder, BuilderChoice, builder
from sandbox.docker.labels import IMAGE_HASH, MANAGED
from sandbox.docker.pulls import ImagePuller
from sandbox.docker.sdk import ImageMissing, call
from sandbox.errors import PermanentStartError

DEFAULT_IMAGE = "harness/base:bookworm"
_FROM = re.compile(r"^\s*FROM\s", re.IGNORECASE)
_TAG_UNSAFE = re.compile(r"[^a-z0-9._-]+")
LOG_TAIL_LINES = 40
#: The most of a build's log kept (its start and its end; the middle is cut, saying so).
LOG_MAX_BYTES = 2 * 1024 * 1024
_ANSI = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_BANNER_START = "DEPRECATED: The legacy builder is deprecated"
_BANNER_LINES = ("Install the buildx component", "https://docs.docker.com/go/buildx/")
_LEGACY_STEP = re.compile(r"^Step \d+/\d+ : ")
_SYNTAX = re.compile(r"^#\s*syntax\s*=\s*(\S+)\s*$", re.IGNORECASE)
_BUILDKIT_STEP = re.compile(r"^#\d+ \[[^\]]*\d+/\d+\] ")

ImageSource = Literal["built", "cached", "pulled"]


class ImageBuildError(PermanentStartError):
    """A task image failed to build.

    Attributes:
        log_tail: The end of the build output (ANSI and the legacy banner stripped).
        build_log: The whole build log, bounded (None when the build never started).
    """

    def __init__(self, message: str, log_tail: str, build_log: str | None = None) -> None:
        super().__init__(f"{message}\n--- build log (tail) ---\n{log_tail}")
        self.log_tail = log_tail
        self.build_log = build_log


def clean_line(line: str) -> str:
    """``line`` without ANSI escapes, as a terminal would last show it (after a carriage return)."""
    line = _ANSI.sub("", line.rstrip("\n"))
    if "\r" in line:
        parts = [part for part in line.split("\r") if part.strip()]
        line = parts[-1] if parts else ""
    return line


def clean_log(text: str) -> str:
    """A build's output without ANSI escapes and the legacy builder's deprecation banner."""
    out: list[str] = []
    banner = False
    for raw in text.split("\n"):
        line = clean_line(raw)
        if line.startswith(_BANNER_START):
            banner = True
            continue
        if banner:
            if not line.strip() or line.strip().startswith(_BANNER_LINES):
                continue
            banner = False
        out.append(line)
    return "\n".join(out)


def context_hash(
    context: Path, dockerfile: Path, aliases: Mapping[str, str], extra: str = ""
) -> str:
    """sha256 of the build context files (no symlinks followed), the aliases and ``extra``."""
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
    if extra:
        digest.update(b"X\0" + extra.encode())
    return digest.hexdigest()


def label_stages(dockerfile: str, labels: Mapping[str, str]) -> str:
    """Put ``LABEL`` of ``labels`` right after every ``FROM``, so every layer carries them."""
    label = "LABEL " + " ".join(f'"{k}"="{v}"' for k, v in sorted(labels.items()))
    out = []
    for line in dockerfile.splitlines(keepends=True):
        out.append(line)
        body = line.rstrip("\r\n")
        if _FROM.match(body) and not body.endswith("\\"):
            if not line.endswith("\n"):
                out.append("\n")
            out.append(label + "\n")
    return "".join(out)


@dataclass(frozen=True)
class ImageRequest:
    """What a trial needs: a prebuilt image, or a Dockerfile to build.

    Attributes:
        name: The task's name (the tag's name and the messages').
        image: ``docker_image``: used as it is unless ``force_build``.
        dockerfile: The Dockerfile to build (its directory is the context unless
            ``context`` says otherwise).
        build_timeout_sec: When a build is given up.
        force_build: Build ``dockerfile`` even when ``image`` is set (``--force-build``).
        context: The build context (a compose sidecar's ``build.context``).
        repository: The tag's repository prefix (``harness-sidecar`` for sidecars).
        build_args: ``--build-arg`` pairs (a compose sidecar's ``build.args``).
        target: The stage to build (a compose sidecar's ``build.target``).
    """

    name: str
    image: str | None = None
    dockerfile: Path | None = None
    build_timeout_sec: float | None = None
    force_build: bool = False
    context: Path | None = None
    repository: str = "harness-task"
    build_args: tuple[tuple[str, str], ...] = ()
    target: str | None = None

    @property
    def builds(self) -> bool:
        """Whether this request is satisfied by building ``dockerfile``."""
        return self.dockerfile is not None and (self.image is None or self.force_build)


@dataclass(frozen=True)
class ResolvedImage:
    """The image a request got, and how.

    Attributes:
        reference: The local image reference (a tag).
        source: ``built`` (by this call), ``cached`` (already local, or built earlier in the
            run), ``pulled`` (by this call).
        image_id: The engine's image id.
        build_seconds: How long the build took (``built`` only).
        build_log: The whole build log, bounded and cleaned (``built`` only).
        builder: Which builder built it (``built`` only).
    """

    reference: str
    source: ImageSource
    image_id: str | None = None
    build_seconds: float | None = None
    build_log: str | None = None
    builder: str | None = None

    def describe(self) -> dict[str, object]:
        """Record facts (the log left out)."""
        facts: dict[str, object] = {"source": self.source, "id": self.image_id}
        if self.builder is not None:
            facts["builder"] = self.builder
        if self.build_seconds is not None:
            facts["build_seconds"] = round(self.build_seconds, 3)
        return facts


class _Log:
    """A build's output as it comes: cleaned, its start and end kept within a bound."""

    def __init__(self, limit: int = LOG_MAX_BYTES) -> None:
        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: deque[str] = deque()
        self.tail_bytes = 0
        self.cut = 0
        self.half = limit // 2
        self.banner = False

    def add(self, raw: str) -> str | None:
        """Keep one line of output; the cleaned line, None for a banner line."""
        line = clean_line(raw)
        if line.startswith(_BANNER_START):
            self.banner = True
            return None
        if self.banner:
            if not line.strip() or line.strip().startswith(_BANNER_LINES):
                return None
            self.banner = False
        size = len(line.encode("utf-8", "replace")) + 1
        if self.head_bytes + size <= self.half and not self.tail:
            self.head.append(line)
            self.head_bytes += size
            return line
        self.tail.append(line)
        self.tail_bytes += size
        while self.tail_bytes > self.half and len(self.tail) > 1:
            dropped = self.tail.popleft()
            self.tail_bytes -= len(dropped.encode("utf-8", "replace")) + 1
            self.cut += 1
        return line

    def text(self) -> str:
        middle = [f"[... {self.cut} line(s) of the build log left out ...]"] if self.cut else []
        return "\n".join([*self.head, *middle, *self.tail]) + "\n"

    def last(self, count: int) -> str:
        lines = [*self.head, *self.tail]
        return "\n".join(lines[-count:])


class ImageResolver:
    """Resolves and builds task images once per run; thread-safe, failures remembered.

    Args:
        client: The engine.
        aliases: ``--base-alias`` pairs (or an :class:`AliasUse` shared with others).
        default_image: What a task with neither image nor Dockerfile gets.
        puller: Makes named images local (pull policy, progress).
        builder_choice: ``auto`` (BuildKit where there is one), ``buildkit``, ``legacy``.
        progress: Where build progress goes (the run's message line).
        force_build: Build a task's Dockerfile even when it names a ``docker_image``.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        aliases: Mapping[str, str] | AliasUse | None = None,
        default_image: str = DEFAULT_IMAGE,
        puller: ImagePuller | None = None,
        builder_choice: BuilderChoice = "auto",
        progress: Callable[[str], None] | None = None,
        force_build: bool = False,
    ) -> None:
        self.client = client
        self.force_build = force_build
        self.alias_use = aliases if isinstance(aliases, AliasUse) else AliasUse(dict(aliases or {}))
        self.aliases = self.alias_use.aliases
        self.default_image = default_image
        #: Makes ``docker_image`` images local (pull policy, progress).
        self.puller = puller or ImagePuller(client)
        self.builder_choice: BuilderChoice = builder_choice
        #: Build progress ("building image of <task>", its steps, how long it took).
        self.progress = progress
        self._lock = threading.Lock()
        self._tag_locks: dict[str, threading.Lock] = {}
        self._done: dict[str, ResolvedImage | ImageBuildError] = {}

    def tag_for(self, request: ImageRequest) -> str:
        """The content-addressed tag a Dockerfile task builds to."""
        assert request.dockerfile is not None
        context = request.context or request.dockerfile.parent
        extra = "\0".join(
            [*(f"{k}={v}" for k, v in request.build_args), f"target={request.target or ''}"]
        )
        # Only the aliases this Dockerfile uses: another task's alias changes nothing here.
        applied = AliasUse(dict(self.aliases))
        rewrite_dockerfile(request.dockerfile.read_text(errors="replace"), applied)
        used = {source: self.aliases[source] for source in applied.used}
        digest = context_hash(
            context, request.dockerfile, used, extra if extra != "target=" else ""
        )
        name = _TAG_UNSAFE.sub("-", request.name.lower()).strip("-.") or "task"
        return f"{request.repository}/{name[:100]}:{digest[:12]}"

    def resolve(self, request: ImageRequest) -> str:
        """Return a local image reference for the request, building it if needed.

        Raises:
            ImageBuildError: when the build fails or times out (also on every later call).
            ImagePullError: when a named image is not local and cannot be pulled.
        """
        return self.resolve_image(request).reference

    def resolve_image(self, request: ImageRequest) -> ResolvedImage:
        """Like :meth:`resolve`, saying whether the image was built, pulled or cached.

        Raises:
            ImageBuildError: when the build fails or times out (also on every later call).
            ImagePullError: when a named image is not local and cannot be pulled.
        """
        if request.image and not request.builds:
            image = self.alias_use.lookup(request.image)
            pulled = self.puller.ensure(image)
            return ResolvedImage(image, "pulled" if pulled else "cached", self._id(image))
        if request.dockerfile is None:
            if self._done.get(self.default_image) is None:  # checked once per run
                try:
                    call(self.client.images.get, self.default_image)
                except ImageMissing:
                    raise PermanentStartError(
                        f"the base image {self.default_image} is missing; build it offline "
                        "with `bash images/bootstrap-base.sh`"
                    ) from None
                self._done[self.default_image] = ResolvedImage(self.default_image, "cached")
            return ResolvedImage(self.default_image, "cached", self._id(self.default_image))
        tag = self.tag_for(request)
        with self._lock:
            lock = self._tag_locks.setdefault(tag, threading.Lock())
        with lock:
            done = self._done.get(tag)
            if isinstance(done, ImageBuildError):
                raise done
            if done is not None:
                # Built (or found) earlier in this run: this trial did not build it.
                return replace(done, source="cached", build_log=None, build_seconds=None)
            try:
                resolved = self._build(request, tag)
            except ImageBuildError as exc:
                self._done[tag] = exc
                raise
            self._done[tag] = resolved
            return resolved

    def _id(self, image: str) -> str | None:
        try:
            return str(call(self.client.images.get, image).id)
        except ImageMissing:
            return None

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def _build(self, request: ImageRequest, tag: str) -> ResolvedImage:
        # The Dockerfile is read through the aliases even for an existing tag: the run's
        # unused-alias warning must know what this task's images would match.
        assert request.dockerfile is not None
        rewritten = rewrite_dockerfile(request.dockerfile.read_text(), self.alias_use)
        existing = self._id(tag)
        if existing is not None:
            return ResolvedImage(tag, "cached", existing)  # content-addressed: this context
        chosen = builder(self.builder_choice)
        source = request.context or request.dockerfile.parent
        labels = {MANAGED: "1", IMAGE_HASH: tag.rsplit(":", 1)[1]}
        with tempfile.TemporaryDirectory(prefix="harness-build-") as tmp:
            context = Path(tmp) / "context"
            shutil.copytree(source, context, symlinks=True)
            try:
                dockerfile = context / request.dockerfile.resolve().relative_to(source.resolve())
            except ValueError:  # a sidecar's build.dockerfile outside its context
                dockerfile = Path(tmp) / "Dockerfile"
            # Every stage labelled from its first layer (a failed build's layers included).
            dockerfile.write_text(label_stages(rewritten, labels))
            command = [
                *chosen.command,
                *(("--progress=plain",) if chosen.buildkit else ("--force-rm",)),
                *(arg for k, v in sorted(labels.items()) for arg in ("--label", f"{k}={v}")),
                *(arg for k, v in request.build_args for arg in ("--build-arg", f"{k}={v}")),
                *(("--target", request.target) if request.target else ()),
                "--tag",
                tag,
                "--file",
                str(dockerfile),
                str(context),
            ]
            log = _Log()
            log.add(chosen.note)
            if chosen.buildkit:
                text, note = self._local_frontend(dockerfile.read_text())
                if note is not None:
                    dockerfile.write_text(text)
                    log.add(note)
            started = time.monotonic()
            self._say(f"building image of {request.name}")
            code, timed_out = self._stream(command, chosen, log, request, started)
            seconds = time.monotonic() - started
        if timed_out:
            self._say(f"building image of {request.name}: gave up after {seconds:.0f}s")
            raise ImageBuildError(
                f"building the image of task {request.name} did not finish within "
                f"build_timeout_sec = {request.build_timeout_sec:g}s",
                log.last(LOG_TAIL_LINES),
                log.text(),
            )
        if code != 0:
            self._say(f"building image of {request.name}: failed after {seconds:.0f}s")
            raise ImageBuildError(
                f"building the image of task {request.name} failed",
                log.last(LOG_TAIL_LINES),
                log.text(),
            )
        self._say(f"built image of {request.name} in {seconds:.1f}s ({tag})")
        return ResolvedImage(
            tag,
            "built",
            self._id(tag),
            build_seconds=seconds,
            build_log=log.text(),
            builder="buildkit" if chosen.buildkit else "legacy",
        )

    def _local_frontend(self, dockerfile: str) -> tuple[str, str | None]:
        """Drop a ``# syntax=IMAGE`` directive whose frontend image is not local.

        BuildKit would pull the frontend from its registry before building anything, which
        fails offline; the engine's built-in frontend builds the file instead (as the
        legacy builder, which ignores the directive, would). An alias applies to it too.
        """
        lines = dockerfile.splitlines(keepends=True)
        for index, line in enumerate(lines):
            match = _SYNTAX.match(line.strip())
            if match is None:
                if line.strip().startswith("#") or not line.strip():
                    continue  # another parser directive, or a comment before any
                break
            image = self.alias_use.lookup(match.group(1))
            if self._id(image) is not None:
                lines[index] = f"# syntax={image}\n"
                return "".join(lines), None
            del lines[index]
            return "".join(lines), (
                f"# syntax={match.group(1)} left out: its frontend image is not local, so "
                "the engine's built-in Dockerfile frontend builds the file (--base-alias "
                f"{match.group(1)}=LOCAL names a local one)"
            )
        return dockerfile, None

    def _stream(
        self,
        command: list[str],
        chosen: Builder,
        log: _Log,
        request: ImageRequest,
        started: float,
    ) -> tuple[int, bool]:
        """Run the build, its output into ``log``; (exit code, whether it timed out)."""
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=chosen.env(),
            start_new_session=True,
        )
        assert proc.stdout is not None
        seen: set[str] = set()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = log.add(raw.decode("utf-8", "replace"))
                # Each step once, as it starts (BuildKit repeats a step's header when
                # parallel stages interleave).
                if line and (_LEGACY_STEP.match(line) or _BUILDKIT_STEP.match(line)):
                    step = line.split(" ", 1)[1] if line.startswith("#") else line
                    if step not in seen:
                        seen.add(step)
                        elapsed = time.monotonic() - started
                        self._say(
                            f"building image of {request.name} ({elapsed:.0f}s): {step[:160]}"
                        )

        reader = threading.Thread(target=read, name="image-build-log", daemon=True)
        reader.start()
        timeout = request.build_timeout_sec
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()
            reader.join(10)
            return proc.returncode, True
        reader.join(30)
        return code, False


__all__ = [
    "DEFAULT_IMAGE",
    "LOG_MAX_BYTES",
    "LOG_TAIL_LINES",
    "ImageBuildError",
    "ImageRequest",
    "ImageResolver",
    "ResolvedImage",
    "clean_log",
    "context_hash",
    "label_stages",
    "parse_aliases",
    "rewrite_from_lines",
]

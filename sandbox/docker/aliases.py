"""``--base-alias FROM=LOCAL``: the images a task names, rewritten to local ones.

An alias applies wherever a task names an image: ``[environment].docker_image``, every
``FROM`` of its Dockerfile (multi-stage, ``--platform=``, and ``ARG``-driven ones whose
value the Dockerfile's own defaults give), ``COPY --from=`` and ``RUN --mount=from=`` of an
image, and a compose sidecar's ``image:`` and Dockerfile. References are compared the way
the engine reads them (``ubuntu`` is ``docker.io/library/ubuntu:latest``), so an alias of
``ubuntu:24.04`` also matches ``docker.io/library/ubuntu:24.04``. A stage name (``FROM x
AS build`` ... ``FROM build``) is never an image and never rewritten.

:class:`AliasUse` remembers which aliases matched something, so the run can name the
ones that matched nothing (a typo in an alias is otherwise silent).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)
_ARG = re.compile(r"^\s*ARG\s+(.*)$", re.IGNORECASE)
_STAGE = re.compile(r"\s+AS\s+(\S+)\s*$", re.IGNORECASE)
_COPY_FROM = re.compile(r"(--from=)(\S+)", re.IGNORECASE)
_MOUNT_FROM = re.compile(r"(--mount=\S*?\bfrom=)([^,\s]+)", re.IGNORECASE)
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::?[-+][^}]*)?\}|(\w+))")


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


def normal(reference: str) -> str:
    """``reference`` as the engine reads it: registry, ``library/``, ``:latest`` explicit."""
    name, at, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    elif first in ("index.docker.io", "registry-1.docker.io"):
        name = f"docker.io/{rest}"
    if name.startswith("docker.io/") and name.count("/") == 1:
        name = name.replace("docker.io/", "docker.io/library/", 1)
    last = name.rsplit("/", 1)[-1]
    if not at and ":" not in last:
        name += ":latest"
    return name + (f"@{digest}" if at else "")


@dataclass
class AliasUse:
    """The run's aliases, and which of them matched an image (thread-safe)."""

    aliases: dict[str, str]
    used: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._by_normal = {normal(source): source for source in self.aliases}

    def lookup(self, reference: str) -> str:
        """``reference`` rewritten by its alias (itself when none applies); marks the alias used."""
        source = self._by_normal.get(normal(reference)) if reference else None
        if source is None:
            return reference
        with self._lock:
            self.used.add(source)
        return self.aliases[source]

    def unused(self) -> list[str]:
        """``FROM=LOCAL`` of each alias that has matched nothing so far."""
        with self._lock:
            return [f"{s}={t}" for s, t in self.aliases.items() if s not in self.used]

    def warning(self) -> str | None:
        """The one warning naming the aliases that matched nothing (None: all matched)."""
        unused = self.unused()
        if not unused:
            return None
        return (
            "--base-alias matched no image of the run's tasks: "
            + ", ".join(unused)
            + " (compare it with the tasks' FROM lines and docker_image)"
        )


def _arg_defaults(lines: Iterable[str]) -> dict[str, str]:
    """The ``ARG name=value`` defaults given before the first ``FROM`` (the global ARGs)."""
    values: dict[str, str] = {}
    for line in lines:
        if _FROM.match(line):
            break
        match = _ARG.match(line)
        if match is None:
            continue
        for item in match.group(1).split():
            name, sep, value = item.partition("=")
            if sep:
                values[name] = _expand(value.strip("\"'"), values)
    return values


def _expand(text: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(one, text)


def rewrite_dockerfile(dockerfile: str, use: AliasUse) -> str:
    """Rewrite every image a Dockerfile names that has an alias; keep everything else.

    An ``ARG``-driven ``FROM ${BASE}`` is rewritten when the global ``ARG`` defaults give
    it a value that has an alias (a ``--build-arg`` is never passed by the harness).
    """
    lines = dockerfile.splitlines(keepends=True)
    args = _arg_defaults(line.rstrip("\n") for line in lines)
    stages: set[str] = set()
    out = []
    for line in lines:
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        match = _FROM.match(body)
        if match is not None:
            image = match.group(2)
            if image.lower() not in stages:
                resolved = _expand(image, args)
                target = use.lookup(resolved)
                if target != resolved:
                    body = f"{match.group(1)}{target}{match.group(3)}"
            stage = _STAGE.search(match.group(3))
            if stage is not None:
                stages.add(stage.group(1).lower())
        elif body.lstrip().upper().startswith(("COPY", "RUN", "ADD")):
            body = _rewrite_from_flags(body, use, stages)
        out.append(body + ending)
    return "".join(out)


def _rewrite_from_flags(body: str, use: AliasUse, stages: set[str]) -> str:
    def one(match: re.Match[str]) -> str:
        value = match.group(2)
        if value.isdigit() or value.lower() in stages:
            return match.group(0)  # a stage, by index or name
        return match.group(1) + use.lookup(value)

    return _MOUNT_FROM.sub(one, _COPY_FROM.sub(one, body))


def rewrite_from_lines(dockerfile: str, aliases: Mapping[str, str]) -> str:
    """Replace the image of each ``FROM`` (and ``--from=``) that has an alias."""
    return rewrite_dockerfile(dockerfile, AliasUse(dict(aliases)))


def dockerfile_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile names (``FROM`` and ``--from=``), stage names left out."""
    found: list[str] = []

    class _Collect(AliasUse):
        def lookup(self, reference: str) -> str:
            found.append(reference)
            return reference

    rewrite_dockerfile(dockerfile, _Collect({}))
    return found


__all__ = [
    "AliasUse",
    "dockerfile_images",
    "mark_task_images",
    "normal",
    "parse_aliases",
    "rewrite_dockerfile",
    "rewrite_from_lines",
]


def mark_task_images(
    use: AliasUse,
    *,
    image: str | None,
    dockerfile: Path | None,
    force_build: bool,
    compose_file: Path | None,
) -> None:
    """Look up, through ``use``, every image one task would name (nothing is built).

    What the task's build would read: its ``docker_image`` (unless its Dockerfile is
    built), its Dockerfile's images, and its compose sidecars' ``image:`` and Dockerfiles.
    An unreadable file is skipped: the build reports it.
    """
    if image and not (force_build and dockerfile is not None):
        use.lookup(image)
    elif dockerfile is not None:
        _mark_dockerfile(use, dockerfile)
    if compose_file is None:
        return
    import yaml

    try:
        data = yaml.safe_load(compose_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return
    services = data.get("services") if isinstance(data, dict) else None
    for name, spec in (services or {}).items():
        if name == "main" or not isinstance(spec, dict):
            continue
        build = spec.get("build")
        if isinstance(build, str):
            build = {"context": build}
        if isinstance(build, dict):
            context = compose_file.parent / str(build.get("context") or ".")
            _mark_dockerfile(use, context / str(build.get("dockerfile") or "Dockerfile"))
        elif isinstance(spec.get("image"), str):
            use.lookup(spec["image"])


def _mark_dockerfile(use: AliasUse, dockerfile: Path) -> None:
    try:
        rewrite_dockerfile(dockerfile.read_text(encoding="utf-8", errors="replace"), use)
    except OSError:
        pass

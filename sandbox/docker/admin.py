"""The docker backend's admin verbs: task images, the engine's leftovers, its health check.

What ``harness images`` does, and the docker backend's part of ``harness sandbox cleanup``
and ``harness doctor`` (``harness.backends.upkeep`` adds the other backends' and the
harness's own), as functions returning what they found (the CLI only displays it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

import docker
from sandbox.docker import hostguard
from sandbox.docker.aliases import mark_task_images
from sandbox.docker.boundary import second_boundary
from sandbox.docker.compose import engine_network_problem
from sandbox.docker.engine import connect, engine_facts, remove_leaks
from sandbox.docker.images import (
    DEFAULT_IMAGE,
    ImageBuildError,
    ImageRequest,
    ImageResolver,
    parse_aliases,
)
from sandbox.docker.labels import IMAGE_HASH, KIND, MANAGED
from sandbox.docker.limits import CGROUP_LIMITS, applied, engine_gaps
from sandbox.docker.rootcap import HARD_ENGINE, HARD_LOOP, SOFT, engine_size_refusal
from sandbox.docker.rootlayer import root_layer_problem
from sandbox.docker.runtime import engine_is_local, network_runtime_of
from sandbox.docker.sdk import (
    EngineError,
    EngineObjectMissing,
    EngineRequestError,
    ImageMissing,
    call,
)
from sandbox.errors import EngineUnavailable, EnvironmentStartError, UsageError
from sandbox.plugin import DoctorReport, Guarantee, Leftovers, TaskFacts
from sandbox.storage import storage_supported


def engine(timeout: int | None = None) -> docker.DockerClient:
    """A client of the engine.

    Raises:
        UsageError: The engine cannot be reached (the message says how to start it).
    """
    try:
        return connect() if timeout is None else connect(timeout=timeout)
    except EngineUnavailable as exc:
        raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class ImageResult:
    """One task's image: its reference, or why it could not be built."""

    task: str
    image: str | None = None
    error: str | None = None
    #: ``built``, ``cached`` or ``pulled``.
    source: str | None = None


@dataclass
class BuildReport:
    """``harness images build``: each task's image, and warnings (an unused alias)."""

    results: list[ImageResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def build_images(
    tasks: Sequence[TaskFacts],
    base_aliases: Sequence[str] = (),
    *,
    force_build: bool = False,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """Build (or reuse) the content-addressed image of every task with a Dockerfile.

    Args:
        tasks: The tasks (loaded and checked by the harness).
        base_aliases: ``FROM=LOCAL`` pairs.
        force_build: Build a task's Dockerfile even when it names a ``docker_image``.
        progress: Where build progress goes ("building image of <task>", its steps).

    Raises:
        UsageError: An invalid alias, or no engine.
    """
    try:
        aliases = parse_aliases(list(base_aliases))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    resolver = ImageResolver(engine(), aliases=aliases, force_build=force_build, progress=progress)
    report = BuildReport()
    for task in tasks:
        request = ImageRequest(
            name=task.name,
            image=task.docker_image,
            dockerfile=task.dockerfile,
            build_timeout_sec=task.build_timeout_sec,
            force_build=force_build,
        )
        try:
            resolved = resolver.resolve_image(request)
            report.results.append(
                ImageResult(task.key, image=resolved.reference, source=resolved.source)
            )
        except (ImageBuildError, EnvironmentStartError) as exc:
            report.results.append(ImageResult(task.key, error=str(exc)))
    # What the builds matched, and what the tasks' compose sidecars would (not built here).
    for task in tasks:
        mark_task_images(
            resolver.alias_use,
            image=task.docker_image,
            dockerfile=task.dockerfile,
            force_build=force_build,
            compose_file=task.compose_file,
        )
    warning = resolver.alias_use.warning()
    if warning is not None:
        report.warnings.append(warning)
    return report


@dataclass(frozen=True)
class ImageRow:
    """An image the harness built (or its base image)."""

    tag: str
    short_id: str
    size_mb: float
    content_hash: str


def _tags(image: dict[str, Any]) -> list[str]:
    return [tag for tag in image.get("RepoTags") or [] if tag != "<none>:<none>"]


def _managed_images(client: docker.DockerClient, *, untagged: bool) -> list[dict[str, Any]]:
    """The labelled images to remove: tagged ones, and untagged leaves (failed builds').

    Never a layer another image builds on: removing an image also removes the untagged
    layers under it that nothing else uses, so a failed build's chain goes with its last
    layer.
    """
    found: list[dict[str, Any]] = call(
        client.api.images, all=True, filters={"label": f"{MANAGED}=1"}
    )
    every: list[dict[str, Any]] = call(client.api.images, all=True)
    parents = {str(image.get("ParentId") or "") for image in every}
    leaves = [image for image in found if str(image["Id"]) not in parents]
    if untagged:
        return [image for image in leaves if not _tags(image)]
    # Leaves first: a tagged image another of ours builds on goes after it.
    return leaves + [image for image in found if _tags(image) and image not in leaves]


def list_images() -> tuple[list[ImageRow], bool]:
    """Task images built by the harness (each tag whole), then the base image.

    Untagged ones are what failed builds left (``harness images prune`` removes them).

    Returns:
        The images, and whether the base image is there.
    """
    client = engine()
    rows = []
    for image in call(client.api.images, filters={"label": f"{MANAGED}=1"}):
        labels = image.get("Labels") or {}
        size = (image.get("Size") or 0) / 1e6
        short = str(image["Id"]).removeprefix("sha256:")[:12]
        for tag in _tags(image) or ["<untagged>"]:
            rows.append(ImageRow(tag, short, size, labels.get(IMAGE_HASH, "-")))
    rows.sort(key=lambda row: (row.tag == "<untagged>", row.tag))
    try:
        base = call(client.images.get, DEFAULT_IMAGE)
    except ImageMissing:
        return rows, False
    short = str(base.id).removeprefix("sha256:")[:12]
    rows.append(ImageRow(DEFAULT_IMAGE, short, (base.attrs.get("Size") or 0) / 1e6, "base"))
    return rows, True


def _remove_images(
    client: docker.DockerClient, images: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """Remove ``images`` (every tag of each); (removed ids, why each kept one was kept).

    An image the engine already removed counts as removed; one a container uses, or that
    an image which is not the harness's builds on, is kept.
    """
    removed, kept = [], []
    for image in images:
        image_id, tags = str(image["Id"]), _tags(image)
        try:
            for tag in tags[1:]:
                call(client.api.remove_image, tag)
            call(client.api.remove_image, tags[0] if tags else image_id)
            removed.append(image_id)
        except EngineObjectMissing:
            removed.append(image_id)  # went with another tag or its child
        except EngineRequestError as exc:
            kept.append(f"kept {tags or image_id[7:19]}: {exc.explanation}")
    return removed, kept


def prune_images(*, untagged_only: bool = False) -> tuple[int, list[str]]:
    """Remove every image the harness built, and every layer its failed builds left.

    Args:
        untagged_only: Only the untagged ones (what failed builds left); the task images
            stay.

    Returns:
        How many images (tags and untagged layers) were removed, and why each kept one was
        kept.
    """
    client = engine()
    removed, kept = _remove_images(client, _managed_images(client, untagged=untagged_only))
    return len(removed), kept


def remove_engine_leftovers(run: str | None = None) -> Leftovers:
    """Remove every container, volume and network carrying the harness labels.

    Args:
        run: Only the objects of this run (its name); other runs are untouched. Without
            it, the untagged layers failed builds left go too (a layer a running build
            still uses is kept by the engine: it has a child or a container).

    Raises:
        UsageError: The engine cannot be reached.
    """
    client = engine()
    # ``shared``: what a run could not give back at its end (the egress filter's network
    # the engine refused to remove) goes too once no live run holds it, as the run said.
    leaks = remove_leaks(client, run=run, keep_runtime=run is not None, shared=True)
    found = Leftovers(
        removed={
            "container": list(leaks.containers),
            "volume": list(leaks.volumes),
            "network": list(leaks.networks),
            "firewall rule": list(leaks.rules),
        },
        errors=list(leaks.errors),
    )
    if leaks.shared:
        found.notes.append(f"removed the egress filter no live run held: {', '.join(leaks.shared)}")
    if run is None:
        images = _remove_images(client, _managed_images(client, untagged=True))[0]
        if images:
            found.removed["failed-build image layer"] = images
    return found


def _host_rules(client: docker.DockerClient) -> str:
    """Whether the INPUT rules shielding the host from compose networks can be installed."""
    reason = hostguard.problem(client)
    if reason is None:
        return "can be installed (an INPUT DROP rule per compose bridge)"
    # Not a problem: only compose tasks are affected, and they are refused saying so.
    return (
        f"cannot be installed: {reason}. Compose networks are made by the engine without a "
        "host address instead (the `compose host guard` row)"
    )


def _network_rows(client: docker.DockerClient, runtimes: dict[str, Any]) -> list[Guarantee]:
    """Each network mode: by which filter it holds here (as the docker runtime decides it)."""
    host = hostguard.problem(client)  # the host egress filter's condition (egress.problem)
    gvisor = "runsc" in runtimes
    gvisor_net = network_runtime_of("runsc", runtimes) if gvisor else None
    if not gvisor:
        under_gvisor = ""
    elif gvisor_net is None:
        under_gvisor = "; not under gVisor: no runsc-net runtime is registered"
    else:
        under_gvisor = f"; under gVisor through the {gvisor_net} runtime"
    if host is None:
        public = "the host egress filter (iptables on the engine's host, the harness is root)"
        allowlist = Guarantee(
            "network: allowlist", True, "its egress proxy behind the host egress filter"
        )
    else:
        public = (
            "each trial's own namespace filter (a holder container with NET_ADMIN only in "
            f"the trial's namespace writes its rules); no host filter: {host}"
        )
        allowlist = Guarantee(
            "network: allowlist",
            True,
            "each trial's own namespace filter, loopback alone: the holder relays its egress "
            "proxy and DNS responder there from the harness's unix sockets (the proxy reaches "
            "out from the harness's own network)",
        )
    return [
        Guarantee(
            "network: no-network", True, "every runtime: the container has no network (none)"
        ),
        Guarantee("network: public", True, public + under_gvisor),
        allowlist,
    ]


def _root_row(client: docker.DockerClient, info: dict[str, Any]) -> Guarantee:
    """The trial's image root: writable, and which cap holds it here (as a run decides it)."""
    host_storage = storage_supported() and engine_is_local(client)
    why = root_layer_problem(host_storage=host_storage, driver=str(info.get("Driver") or ""))
    if why is None:
        return Guarantee(
            "writable root",
            True,
            f"writable, {HARD_LOOP} cap of storage_mb: the container's layer on the trial's "
            "loop filesystem on this host",
        )
    try:
        refusal = engine_size_refusal(client, DEFAULT_IMAGE)
    except (EngineError, requests.RequestException) as exc:
        return Guarantee("writable root", False, f"unknown: the engine's probe failed: {exc}")
    if refusal is None:
        how = f"the engine caps the layer (--storage-opt size=); no loop filesystem: {why}"
        return Guarantee("writable root", True, f"writable, {HARD_ENGINE} cap of storage_mb: {how}")
    return Guarantee(
        "writable root",
        True,
        f"writable, {SOFT} cap of storage_mb: the layer's size is polled through the engine "
        "and a trial at its cap ends as storage_full (overshoot possible); no loop "
        f"filesystem: {why}; no --storage-opt size=: {refusal}",
    )


#: The probe container's limits (created, inspected and removed; never started).
_PROBE_MEMORY_MB, _PROBE_CPUS, _PROBE_PIDS = 64, 0.5, 64


def _held_by_a_container(client: docker.DockerClient) -> dict[str, bool] | None:
    """Which limits a created container's configuration holds (None: no probe was possible).

    Some engines accept a limit and drop it without an error (rootless podman on cgroup v1
    says it has a cgroup driver, then leaves ``Memory: 0``), as a run's records find too.
    """
    try:
        probe = call(
            client.containers.create,
            DEFAULT_IMAGE,
            ["true"],
            entrypoint=[],
            network_mode="none",
            mem_limit=f"{_PROBE_MEMORY_MB}m",
            nano_cpus=int(_PROBE_CPUS * 1e9),
            pids_limit=_PROBE_PIDS,
            labels={MANAGED: "1", KIND: "doctor-probe"},
        )
    except (EngineError, requests.RequestException):
        return None
    try:
        host_config = call(client.api.inspect_container, str(probe.id)).get("HostConfig") or {}
        return applied(
            host_config,
            memory_mb=_PROBE_MEMORY_MB,
            cpus=_PROBE_CPUS,
            pids=_PROBE_PIDS,
        )
    finally:
        try:
            call(probe.remove, force=True)
        except (EngineError, requests.RequestException):
            pass  # labelled: `harness sandbox cleanup` removes it


def _limit_rows(client: docker.DockerClient, info: dict[str, Any]) -> list[Guarantee]:
    """Each cgroup limit: enforced by the engine, or not and why (records say the same).

    Judged as a run's records are: what the engine says it can enforce (``docker info``)
    and what a created container's configuration holds.
    """
    gaps = engine_gaps(info)
    held = _held_by_a_container(client)
    driver, version = info.get("CgroupDriver"), info.get("CgroupVersion")
    rows = []
    for limit in CGROUP_LIMITS:
        if limit in gaps:
            why = gaps[limit]
        elif held is not None and not held[limit]:
            why = "the engine dropped it from a created container's configuration (HostConfig)"
        else:
            how = f"the engine's cgroups ({driver} driver, cgroup v{version})"
            if held is None:
                how += "; the engine's word only (no probe container could be created)"
            rows.append(Guarantee(f"limit: {limit}", True, how))
            continue
        how = f"not enforced: {why}; each record says so (sandbox.limits.enforced)"
        rows.append(Guarantee(f"limit: {limit}", False, how))
    return rows


def _isolation_rows(client: docker.DockerClient, info: dict[str, Any]) -> list[Guarantee]:
    """The compose host guard, gVisor, and the second boundary of ``--agent-root isolated``."""
    runtimes = info.get("Runtimes") or {}
    guard = hostguard.problem(client)
    if guard is None:
        row = Guarantee(
            "compose host guard", True, "an INPUT DROP rule per compose bridge on the engine's host"
        )
    else:
        engine = engine_network_problem(client)
        row = Guarantee(
            "compose host guard",
            engine is None,
            "an engine-made network without a host address (internal, no IPv4 on its "
            "bridge, no IPv6; sidecars without NET_RAW and without the internet), no host "
            f"rules: {guard}"
            if engine is None
            else f"compose tasks are refused: {guard}, and {engine}",
        )
    rows = [row]
    if "runsc" in runtimes:
        net = network_runtime_of("runsc", runtimes)
        how = "runsc is registered" + (
            f"; its trials with the internet run on {net}"
            if net is not None
            else "; no runsc-net: its trials get no internet"
        )
        rows.append(Guarantee("gVisor", True, how))
    else:
        rows.append(
            Guarantee("gVisor", False, "runsc is not registered (`bash docker/start-engine.sh`)")
        )
    boundary = second_boundary(None, info)
    ways = []
    if boundary != "none":
        ways.append(f"runc behind the engine's {boundary} user namespace")
    if "runsc" in runtimes:
        ways.append("--runtime runsc (gVisor)")
    if ways:
        how = "with " + ", or ".join(ways)
        if boundary == "none":
            how += "; not on runc (no user-namespace remapping)"
        rows.append(Guarantee("--agent-root isolated", True, how))
    else:
        rows.append(
            Guarantee(
                "--agent-root isolated",
                False,
                "refused: no gVisor and no user-namespace remapping on this engine",
            )
        )
    return rows


def guarantees(client: docker.DockerClient) -> list[Guarantee]:
    """What the docker sandbox guarantees on this engine, run by this user, and how."""
    info: dict[str, Any] = dict(call(client.info))
    runtimes = info.get("Runtimes") or {}
    return [
        *_network_rows(client, runtimes),
        _root_row(client, info),
        *_limit_rows(client, info),
        *_isolation_rows(client, info),
    ]


def doctor(report: DoctorReport) -> None:
    """Add the engine's rows to ``report``: API version, runtimes, cgroups, host rules, image.

    Then each guarantee of the docker sandbox on that engine (:func:`guarantees`). The
    problems are what keeps a sandbox from running at all; a guarantee that does not hold
    here is a row, not a problem (a run needing it is refused, or says so, itself).
    """
    try:
        client = connect(timeout=10)
    except EngineUnavailable as exc:
        report.checks.append(("docker engine", "unreachable"))
        report.problems.append(str(exc))
        return
    # The engine answered a ping within 10 s; a probe container's create may take longer
    # (rootless podman's vfs driver copies the image's root for each one).
    client.api.timeout = 120
    facts = engine_facts(client)
    report.checks += [
        ("docker engine", str(facts["server_version"])),
        ("API version", f"{facts['api_version']} (client {facts['client_api_version']})"),
        ("runtimes", ", ".join(facts["runtimes"])),
        ("cgroups", f"v{facts['cgroup_version']} ({facts['cgroup_driver']})"),
        ("memory / pids limits", f"{facts['memory_limit']} / {facts['pids_limit']}"),
        ("security options", ", ".join(facts["security_options"])),
    ]
    report.checks.append(("compose host rules", _host_rules(client)))
    try:
        call(client.images.get, DEFAULT_IMAGE)
        report.checks.append(("base image", DEFAULT_IMAGE))
    except ImageMissing:
        report.checks.append(("base image", "missing"))
        report.problems.append(
            f"base image {DEFAULT_IMAGE} is missing: `bash images/bootstrap-base.sh`"
        )
    report.guarantees = guarantees(client)


__all__ = [
    "DEFAULT_IMAGE",
    "BuildReport",
    "ImageResult",
    "ImageRow",
    "build_images",
    "doctor",
    "engine",
    "guarantees",
    "list_images",
    "prune_images",
    "remove_engine_leftovers",
]

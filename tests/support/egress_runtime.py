"""A DockerRuntime for the egress tests: under runc, or gVisor with its ``runsc-net`` sibling."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from support.docker import docker_client, require_image, unavailable


@contextmanager
def egress_runtime(runtime: str | None, label: str) -> Iterator[Any]:
    """A run's DockerRuntime (closed after), labelled ``<label>-<random>``.

    Args:
        runtime: None (runc) or ``runsc`` (then ``runsc-net`` must be registered too).
        label: The run label's prefix.
    """
    from sandbox.docker.images import ImageResolver
    from sandbox.docker.runtime import DockerRuntime

    client = docker_client()
    require_image(client)
    runtimes = client.info().get("Runtimes") or {}
    if runtime and not {"runsc", "runsc-net"} <= set(runtimes):
        unavailable("runtimes runsc and runsc-net are not registered (docker/start-engine.sh)")
    made = DockerRuntime(
        client,
        ImageResolver(client),
        runtime=runtime,
        run_label=f"{label}-{secrets.token_hex(4)}",
    )
    try:
        yield made
    finally:
        made.close()

"""The supervisor's runtime volume is used only once its fill has finished.

A fill that was interrupted (the harness killed mid-copy, the engine restarted) leaves a
volume with the runtime's name and nothing or half of ``/usr`` in it. Every later trial
would mount it and its supervisor would fail to start. The ready marker, created after
the fill, is what says a volume is usable: a volume without it is filled again.

The base image is re-tagged with a label of this test's own, so that its runtime volume
has a name no other test's trials use (the name follows the image's id).
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from support.docker import docker_client, require_image

from sandbox.docker.images import ImageResolver
from sandbox.docker.labels import KIND, MANAGED, RUNTIME_KIND
from sandbox.docker.runtime import RUNTIME_READY_SUFFIX, DockerRuntime

pytestmark = pytest.mark.docker


@pytest.fixture
def own_base() -> Iterator[tuple[Any, str]]:
    """A base image with an id of its own, and the engine's client; removed after."""
    client = docker_client()
    require_image(client)
    tag = f"harness-test/runtime-volume:{secrets.token_hex(4)}"
    dockerfile = f"FROM harness/base:bookworm\nLABEL org.harness.test={tag}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        yield client, tag
    finally:
        name = _volume_name(image)
        for volume in (name, f"{name}{RUNTIME_READY_SUFFIX}"):
            try:
                client.volumes.get(volume).remove(force=True)
            except Exception:  # absent already
                pass
        client.images.remove(tag, force=True)
        client.close()


def _volume_name(image: Any) -> str:
    from sandbox.docker.runtime import RUNTIME_LAYOUT

    return f"harness-python-{RUNTIME_LAYOUT}-{str(image.id).split(':')[-1][:12]}"


def _has_python(client: Any, base: str, volume: str) -> bool:
    out = client.containers.run(
        base,
        ["/bin/sh", "-c", "test -x /usr/bin/python3 && echo yes || echo no"],
        volumes={volume: {"bind": "/usr", "mode": "ro"}},
        network_mode="none",
        remove=True,
    )
    return bool(out.strip() == b"yes")


def _runtime(client: Any, base: str) -> DockerRuntime:
    return DockerRuntime(
        client, ImageResolver(client), base_image=base, run_label=f"rtv-{secrets.token_hex(3)}"
    )


def test_an_interrupted_fill_is_filled_again(own_base: tuple[Any, str]) -> None:
    client, base = own_base
    name = _volume_name(client.images.get(base))
    # What an interrupted fill leaves: the volume, labelled as the fill labels it, empty.
    client.volumes.create(name, labels={MANAGED: "1", KIND: RUNTIME_KIND})
    runtime = _runtime(client, base)
    try:
        volume, _arch = runtime.python_volume()
    finally:
        runtime.close()
    assert volume == name
    assert _has_python(client, base, name), "the half-filled volume was mounted as it was"
    client.volumes.get(f"{name}{RUNTIME_READY_SUFFIX}")  # the marker now says it is filled


def test_a_filled_volume_is_reused_as_it_is(own_base: tuple[Any, str]) -> None:
    client, base = own_base
    first = _runtime(client, base)
    try:
        name, _ = first.python_volume()
    finally:
        first.close()
    created = client.volumes.get(name).attrs["CreatedAt"]
    second = _runtime(client, base)
    try:
        assert second.python_volume()[0] == name
    finally:
        second.close()
    assert client.volumes.get(name).attrs["CreatedAt"] == created
    assert _has_python(client, base, name)

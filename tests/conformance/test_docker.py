"""The Sandbox contract over ``DockerSandbox`` (runc), on one runtime shared by the module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from support.docker import docker_client, require_image
from support.sandbox_contract import ProjectSandboxContract

from sandbox.backend import Sandbox, SandboxSpec

pytestmark = pytest.mark.docker

_RUNTIME: list[Any] = []


@pytest.fixture(scope="module", autouse=True)
def _close_runtime() -> Iterator[None]:
    """The shared runtime's staged supervisor copy goes away with the module."""
    yield
    while _RUNTIME:
        _RUNTIME.pop().close()


class TestDockerSandbox(ProjectSandboxContract):
    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        from sandbox.docker.backend import DockerSandbox
        from sandbox.docker.images import ImageResolver
        from sandbox.docker.runtime import DockerRuntime

        client = docker_client()  # skips (fails in CI) without an engine
        require_image(client)
        if not _RUNTIME:
            # A label of this process's: closing removes every object of the label, which
            # must never be another pytest worker's sandbox still in use (``pytest -n``).
            label = f"conformance-{os.getpid()}"
            _RUNTIME.append(DockerRuntime(client, ImageResolver(client), run_label=label))
        return DockerSandbox(spec, _RUNTIME[0])

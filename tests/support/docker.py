"""Shared Docker helpers for tests: connect to the engine, or skip/fail with the reason.

The rule: when the engine is unreachable, a docker test is *skipped* with the reason,
except under ``HARNESS_REQUIRE_DOCKER=1`` (CI), where it *fails* instead, so a missing
engine can never turn the docker suite green by skipping it.

Usage from any test module or conftest (``tests/`` is on ``sys.path`` under pytest)::

    from support.docker import docker_client, requires_docker  # noqa: F401 (fixtures)

    @pytest.mark.docker
    def test_something(requires_docker):  # the fixture is the connected client
        ...

``docker_client()`` (a plain function) does the same outside fixtures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

REQUIRE_ENV = "HARNESS_REQUIRE_DOCKER"

_cached: Any = None
_cached_error: str | None = None


def docker_required() -> bool:
    """Whether an unreachable engine must fail the tests (``HARNESS_REQUIRE_DOCKER=1``)."""
    return os.environ.get(REQUIRE_ENV, "").strip() == "1"


def prerequisite_missing(reason: str) -> NoReturn:
    """Fail (``HARNESS_REQUIRE_DOCKER=1``) or skip the current test, naming what is missing.

    For any prerequisite of a test that CI must have (a tool, a kernel feature, root), so a
    missing one can never turn CI green by skipping.
    """
    if docker_required():
        pytest.fail(f"required under {REQUIRE_ENV}=1 (CI) but missing: {reason}")
    pytest.skip(reason)


def unavailable(reason: str) -> NoReturn:
    """Fail (``HARNESS_REQUIRE_DOCKER=1``) or skip the current test, naming the reason."""
    prerequisite_missing(f"Docker engine unavailable: {reason}")


def docker_client() -> Any:
    """A connected ``docker.DockerClient`` (cached per process), or skip/fail the test."""
    global _cached, _cached_error
    if _cached is None and _cached_error is None:
        try:
            from sandbox.docker.engine import connect

            _cached = connect(timeout=30)
        except Exception as exc:  # EngineUnavailable, or the SDK missing entirely
            _cached_error = f"{type(exc).__name__}: {exc}"
    if _cached is None:
        unavailable(_cached_error or "unknown error")
    return _cached


def require_image(client: Any, image: str = "harness/base:bookworm") -> None:
    """Skip/fail when a local image is missing (it can never be pulled here)."""
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        unavailable(f"image {image} is missing; build it with `bash images/bootstrap-base.sh`")


@pytest.fixture(scope="session")
def requires_docker() -> Iterator[Any]:
    """The connected Docker client; skips (or fails under HARNESS_REQUIRE_DOCKER=1)."""
    yield docker_client()


__all__ = [
    "REQUIRE_ENV",
    "docker_client",
    "docker_required",
    "prerequisite_missing",
    "require_image",
    "requires_docker",
    "unavailable",
]

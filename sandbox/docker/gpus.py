"""``[environment].gpus`` as Docker device requests, and the engine's "no GPU" answer.

A task asking for GPUs gets ``--gpus N`` (a device request for N devices with the ``gpu``
capability). An engine without a GPU driver refuses such a container with "could not
select device driver"; the trial then fails for good, saying how many GPUs the task needs.
The engine cannot select GPU models, so ``gpu_types`` is recorded, not enforced.

Before a run (and in ``harness tasks check``) :func:`gpu_probe` asks the engine that same
question with a container of an image it already has: its real answer, before any image
of the task is built or pulled.
"""

from __future__ import annotations

from collections.abc import Mapping

from docker.types import DeviceRequest

import docker
from sandbox.docker.sdk import EngineObjectMissing, EngineRequestError, call
from sandbox.errors import PermanentStartError

#: What the engine says when no driver provides the ``gpu`` capability.
NO_DRIVER = "could not select device driver"


class NoGpuError(PermanentStartError):
    """The task needs GPUs and the engine has none."""


def device_requests(gpus: int) -> list[DeviceRequest]:
    """The device requests of a task needing ``gpus`` GPUs (none for 0)."""
    if gpus <= 0:
        return []
    return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]


def no_gpu_error(message: str, gpus: int) -> NoGpuError | None:
    """The permanent error for the engine's "no GPU" answer to a GPU task (else None)."""
    if gpus <= 0 or NO_DRIVER not in message:
        return None
    return NoGpuError(
        f"the task needs {gpus} GPU(s) and the Docker engine has none (it has no GPU "
        f"device driver: {message.strip()}); run it on an engine with the NVIDIA container "
        "toolkit"
    )


def gpu_probe(
    client: docker.DockerClient,
    gpus: int,
    *,
    image: str,
    runtime: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> str | None:
    """The engine's own "no GPU" answer to a container asking ``gpus`` GPUs (None: none).

    Creates and starts ``true`` in ``image`` (one the engine has: the harness's base image)
    with the task's device request, no network, and removes it. Only the engine's refusal
    to select a GPU driver is an answer; any other failure (no such image) says nothing.

    Raises:
        EngineUnreachable: The engine did not answer.
    """
    try:
        container = call(
            client.containers.create,
            image,
            ["true"],
            device_requests=device_requests(gpus),
            network_mode="none",
            runtime=runtime,
            labels=dict(labels or {}),
        )
    except EngineRequestError as exc:
        return _answer(exc)
    try:
        call(container.start)
        call(container.wait, timeout=60)
    except EngineRequestError as exc:
        return _answer(exc)
    finally:
        try:
            call(container.remove, force=True)
        except EngineObjectMissing:
            pass
    return None


def _answer(exc: EngineRequestError) -> str | None:
    words = str(exc.explanation or exc).strip()
    return words if NO_DRIVER in words else None

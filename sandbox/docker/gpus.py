"""``[environment].gpus`` as Docker device requests, and the engine's "no GPU" answer.

A task asking for GPUs gets ``--gpus N`` (a device request for N devices with the ``gpu``
capability). An engine without a GPU driver refuses such a container with "could not
select device driver"; the trial then fails for good, saying how many GPUs the task needs.
The engine cannot select GPU models, so ``gpu_types`` is recorded, not enforced.
"""

from __future__ import annotations

from docker.types import DeviceRequest

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

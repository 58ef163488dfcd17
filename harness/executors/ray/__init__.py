"""The ``ray`` executor: each trial attempt is a Ray task on a Ray cluster (docs/scale-out.md).

- :mod:`.driver` — :class:`RayExecutor`, in the harness process;
- :mod:`.worker` — what runs in Ray's worker processes (a trial, per-node housekeeping);
- :mod:`.bridge`, :mod:`.relay`, :mod:`.wire` — the link between them: sandboxes on worker
  nodes reach the driver's model gateway through it, and interrupts reach the workers;
- :mod:`.jobs` — the plain data that travels (jobs, results, archives).

Importing this package does not import Ray; opening the executor does (``harness[ray]``).
"""

from harness.executors.ray.driver import RayExecutor

__all__ = ["RayExecutor"]
